/* The passes' internal header, sectioned by source file: the device tree,
 * the search, and the plan the partition pass attaches to the graph. */
#ifndef ACCPAR_PASSES_H
#define ACCPAR_PASSES_H

#include "accpar/plan.h"
#include "ir/ir.h"
#include "passes/layout.h"

/* ---- device.c ----------------------------------------------------------- */

/* A group of devices: a node of the tree of levels. */
typedef struct ap_group {
  int kind;      /* index into ap_devices.kinds; -1 for the root of a mixed array */
  int first_dev; /* devices first_dev .. first_dev+count-1 */
  int count;
} ap_group;

ap_group ap_group_root(const ap_devices *dv);
/* The children a group splits into at the next level: one per kind at the
 * root of a mixed array, then 2-way when the count is even, p-way for its
 * smallest odd prime factor p < AP_MAX_CHILDREN, two uneven halves
 * otherwise; a single device has itself as its only child. Returns k. */
int ap_group_children(const ap_devices *dv, const ap_group *g, ap_group *child);
/* Levels of the tree: splits from the root down to single devices. */
int ap_devices_levels(const ap_devices *dv);
double ap_group_peak(const ap_devices *dv, const ap_group *g); /* FLOP/s */

/* ---- search.c ----------------------------------------------------------- */

/* A vertex's state: a partition type (layers: I, II, III; joins: split
 * dim[0], split dim[1], replicated) and how its groups share the split
 * dimension: state = type + 3 * ratio rule (see partition.c). */
enum { AP_SEARCH_EXHAUSTIVE_MAX_VARS = 64, AP_SEARCH_STATES = 6 };

/* Vertices with up to AP_SEARCH_STATES states and a cost per state; edges
 * with a cost per pair of states. Disallowed states are never chosen. */
typedef struct ap_search_problem {
  int n, m;
  const uint8_t *allowed;      /* [n]: bit x set when state x may be chosen */
  const double (*unary)[AP_SEARCH_STATES];                   /* [n] */
  const int (*ends)[2];        /* [m]: the two vertices of each edge */
  const double (*pair)[AP_SEARCH_STATES][AP_SEARCH_STATES];  /* [m]: cost[state of ends[0]][state of ends[1]] */
} ap_search_problem;

/* The minimum of ap_search_cost (see search.c for the method); optimality
 * is "exact" or names the bounded method used (a string in ar). What the
 * solve allocates in ar is released before it returns. */
ap_status ap_search_solve(const ap_search_problem *pr, ap_arena *ar, uint8_t *state,
                          double *cost, const char **optimality);
double ap_search_cost(const ap_search_problem *pr, const uint8_t *state);
/* Every assignment; AP_ERR_UNSUPPORTED when there are more than max_visits
 * (*visited then holds their number). */
ap_status ap_search_exhaustive(const ap_search_problem *pr, long max_visits, uint8_t *state,
                               double *cost, long *visited);

/* ---- graph_build.c / partition.c ---------------------------------------- */

/* A tensor where a vertex meets the rest of the graph; the plan splits it
 * along dim[0] (the batch-like dimension) or dim[1] (features). */
typedef struct ap_port {
  int value;       /* value id */
  int dim[2];      /* -1 when the tensor has no such dimension */
  int64_t unit[2]; /* shares of dim[c] are multiples of unit[c] (1: any), so that a
                      slab of it stays a slab through the reshapes after it (the
                      heads of a feature dimension) */
} ap_port;

/* A weightless node with one activation input, after a vertex: it carries
 * the vertex's layout (AccPar: weightless operators choose nothing). */
typedef struct ap_chain_op {
  int node;
  int in_value, out_value;
  int in_map[2], out_map[2]; /* where the vertex's output dims are in its input/output; -1: gathered */
  bool gathers[2];           /* the op needs that dimension whole (Softmax axis, Reshape...) */
} ap_chain_op;

/* A trainable weight of a layer besides its own (a bias, a normalization's
 * scale or shift) whose gradient a training step sums over the devices
 * that hold copies of it. */
typedef struct ap_wsum {
  int value;
  int dim;      /* the weight's dim along the layer's output features (split with
                   them), or -1: held whole wherever the layer runs */
  double scale; /* dim's size over the output features' size */
  bool joint;   /* its gradient is summed with its weight's other readers (ap_wjoint) */
} ap_wsum;

/* A trainable weight whose gradient one sum covers for several readers, or
 * for a reader of a value computed from it (a slice of a fused weight, a
 * tied table's transpose): the program sums it once over the smallest box
 * holding what its readers read on each device (ap_dist_weight_box), which
 * no reader's own type decides. Each reader is a vertex's weight (wsum -1)
 * or one of its wsum entries; axis[b] is the reader value's axis that the
 * weight's axis b follows, -1 where the value is computed from the whole
 * axis (a sliced or reshaped one). */
typedef struct ap_wreader {
  int vertex, wsum;
  int8_t axis[AP_MAX_RANK];
} ap_wreader;

typedef struct ap_wjoint {
  int value;
  int n_readers;
  ap_wreader *r;
} ap_wjoint;

/* A decision point: a layer (states: types I, II, III) or a weightless node
 * joining several activations (states: split dim[0], split dim[1], replicated). */
typedef struct ap_vertex {
  int node;
  bool join;
  uint8_t allowed;  /* bit s: state s may be chosen under the strategy */
  int n_ports;      /* port 0: the output; ports 1..: activation inputs */
  ap_port *port;
  int ext_base;     /* index of port 0 in a class's extents */
  int weight;       /* layers: the weight value */
  int w_dim[2];     /* layers: the weight's input-feature (I) and output-feature (O) dims */
  double flops;     /* a training step of the whole layer: forward, backward, gradient */
  double traffic;   /* layers: bytes a training step moves instead of flops (an
                       embedding's rows), counted like flops over B and O */
  bool first;       /* its input is a graph input: no error to propagate back */
  const struct apk_conv2d *conv; /* a 2-D float convolution: the kernel library's description
                                    of the whole layer; NULL for other layers */
  ap_chain_op *chain;
  int n_chain;
  ap_wsum *wsum;    /* the trainable weights of the node (a layer's besides its own) and of
                       its chain ops */
  int n_wsum;
  bool weight_joint; /* its weight's gradient sum is an ap_wjoint's */
} ap_vertex;

/* An activation from vertex `from` reaching port `port` of vertex `to`. */
typedef struct ap_edge {
  int from, to, port;
  int map[2]; /* where from's output dims are in the tensor at the port; -1: gathered */
  int64_t num[2], den[2]; /* index t of from's dim c is index t * num[c] / den[c] there
                             (reshapes between: attention's heads merged into features) */
} ap_edge;

/* Groups of one level that look alike to the cost model: same kind and
 * count, same extents of every port. */
typedef struct ap_class {
  ap_group g;     /* a representative */
  int mult;       /* groups of the level in this class */
  int64_t *ext;   /* [n_ports][2]: extents of each port's dims */
  double *acc_v;  /* [n_vertices]: communication time on the path to here, s */
  double *acc_e;  /* [n_edges] */
} ap_class;

typedef struct ap_plan {
  ap_devices dev;
  ap_plan_opts opts;            /* opts.devices points at dev */
  int n_levels;
  int n_vertices, n_edges, n_ports;
  ap_vertex *v;
  ap_edge *e;
  uint8_t *state;               /* [n_levels][n_vertices]: type + 3 * ratio rule */
  ap_class **cls;               /* [n_levels + 1]: classes per level; the last are devices */
  int *n_cls;
  int **child_map;              /* [n_levels][class * AP_MAX_CHILDREN + i]: child i's class */
  int *dev_class;               /* [n_devices]: each device's class at the last level */
  double **child_fwd;           /* [n_levels][class * AP_MAX_CHILDREN + i]: bytes the cost
                                   model charges child i's group in the forward pass */
  double **child_sent;          /* the same, a training step */
  double *dev_fwd_bytes;        /* [n_devices]: the cost model's bytes per device, forward */
  double *dev_step_bytes;       /* [n_devices]: the same, a training step */
  double *level_fwd_bytes;      /* [n_devices]: what the levels charged, forward */
  double *level_step_bytes;     /* [n_devices]: the same, a training step */
  double *class_mem;            /* [classes of the last level]: footprint, bytes */
  double *row_time_s;           /* [n_vertices]: its share of the step time */
  double *edge_time_s;          /* [n_edges]: a conversion's share, in its consumer's row too */
  double step_time_s, compute_time_s, comm_time_s, comm_bytes, paper_cost, max_mem_bytes;
  double levels_comm_bytes;     /* comm_bytes as the levels charged it, before finish */
  const char *optimality;
  const char *bytes_priced;     /* how comm_bytes and the devices' bytes were priced:
                                   "program" (its transfers, device by device), "closed
                                   forms" (past EXACT_MAX_WORK, or outpaced), "levels" (a weight
                                   without data: the program trains no layer there),
                                   "paper" (the published metric) */
  double mem_penalty;           /* s per byte a device keeps, added while fitting memory */
  bool level_only;              /* price each level by itself (a base plan of accpar's rollout) */
  const struct ap_plan *rival;  /* a plan priced already, or NULL: where this one's compute
                                   alone is slower than the rival's step, it cannot be faster
                                   and is priced by closed forms (outpaced, a base plan of
                                   accpar's rollout) */
  bool outpaced;
  bool probe;                   /* a plan refine_exact prices: the graph's nodes keep the
                                   chosen plan's types */
  const char *search_priced;    /* how the search priced the states it chose: "levels"
                                   (each level's conversions and sums among its groups;
                                   the rollout's complete plans from the program's
                                   transfers), "closed forms" (the same, the rollout's
                                   plans by closed forms: past EXACT_MAX_WORK), "program"
                                   (refined against the program's transfers,
                                   refine_exact) */
  int loss_vertex;              /* the vertex computing graph output 0 (itself or by a chain
                                   op), or -1 */
  int loss_map[2];              /* where its output dims are in graph output 0; -1: gathered */
  ap_wjoint *wjoint;            /* the weights summed jointly for their readers */
  int n_wjoint;
  bool layers_train;            /* a training step trains every layer's weight, its own or
                                   jointly (ap_train_roles); not one without data (a test
                                   graph's, a light model's computed from shapes) */
  uint64_t *train_want;         /* ap_train_roles's, for the graph the plan was built on */
  bool *trainable;
  double (**level_ratio)[AP_MAX_CHILDREN]; /* [n_levels][class * n_vertices + v]: the
                                   ratio of v's state in a group of the class, while
                                   finish prices the plan as the program runs; or NULL */
  const struct ap_plan *base[4]; /* accpar's rollout: its base plans (dp, owt, hypar, and
                                   accpar with each level priced by itself) as the search
                                   priced them (by closed forms where outpaced); NULL where
                                   one does not fit, or nothing was searched */
  const struct ap_plan *rollout[4]; /* accpar's rollout from each base plan (base[]) it
                                   started from, the complete plan it reached as priced
                                   (by closed forms where outpaced: the fastest so far was
                                   its rival); NULL where it did not start from that one */
  int start;                    /* the base plan whose rollout the search took (before any
                                   fitting to memory), or -1: nothing was rolled out */
  const uint8_t *fixed;         /* [n_levels][n_vertices]: the one state (type + 3 * ratio rule)
                                   a plan read back allows each vertex; or NULL */
} ap_plan;

/* ap_partition with every vertex's state given (a plan read back:
 * plan_load.c): node_state[l * n_nodes + node] is 1 + the state (I, II, III;
 * for a join b, f, r) of the vertex of node at level l, plus 4 where its
 * groups share by device count (the table's '='), 0 where unset. A
 * vertex left unset at some level, or given a state it cannot take, is
 * refused naming the node and level; file names the plan in diagnostics. */
ap_status ap_partition_fixed(ap_graph *g, const ap_plan_opts *o, const uint8_t *node_state,
                             int n_levels, const char *file, ap_diag *d);

/* The figures of a device kind (ap_device_kind's fields), in the order of
 * device files, calibrate's output and a plan's JSON: X(field, required),
 * required for the five every file gives; older files and plans lack the
 * rest, which read as 0 (absent). docs/plan.schema.json lists them too
 * (the plan_schema test holds it to what plans print). */
#define AP_DEVICE_FIGURES(X)                                                               \
  X(peak_flops, 1) X(mem_bw_bytes_s, 1) X(mem_bytes, 1) X(link_bw_bytes_s, 1)              \
  X(link_latency_s, 1) X(exp_s, 0) X(tanh_s, 0) X(lower_row_s, 0) X(lower_float_s, 0)      \
  X(lower_gather_s, 0) X(direct_flops, 0) X(pack_float_s, 0) X(pack_transposed_s, 0)       \
  X(wino_block_s, 0) X(wino_pair_s, 0) X(wino_tile_s, 0)

/* Builds the vertices, chain ops and edges of p from g (graph_build.c). */
ap_status ap_plan_build(ap_plan *p, ap_graph *g, ap_diag *d);
/* The cost model's seconds of kernel k (an apk_conv_kernel: forward,
 * backward data, backward weights) of convolution `whole` on a device of kind dk holding batch n,
 * input channels c and output channels m of it: what a vertex's compute
 * sums for its convolution, exposed for bench-conv-price. */
double ap_conv_kernel_s(const struct apk_conv2d *whole, int k, int64_t n, int64_t c,
                        int64_t m, const ap_device_kind *dk);
/* The row of the plan's table (a vertex, whose row_time_s prices it) of
 * each node and weight, for the programs' timing by row: row_of_node[n]
 * (g->n_nodes entries) is the vertex of which node n is the layer, the join
 * or a chain op; row_of_value[x] (g->n_values entries) the vertex training
 * weight x (its own, a wsum's, a joint weight's first reader) or the row
 * of the node computing value x; -1 for the rest (graph inputs, shape
 * computations). */
void ap_plan_rows(const ap_plan *p, const ap_graph *g, int *row_of_node, int *row_of_value);
/* Child i's ratio for vertex v in state s in a group of class c. */
void ap_plan_ratio(const ap_plan *p, const ap_graph *g, const ap_class *c, int v, int s,
                   double *ratio);
/* The ratio of vertex v in its state at level l in a group of class cls
 * (from level_ratio when set). */
void ap_plan_level_ratio(const ap_plan *p, const ap_graph *g, int l, int cls, int v,
                         double *ratio);
/* The layout of vertex v's port in state s (partial sums as they are
 * produced: the output of type II, the input error of type III). */
ap_layout ap_plan_port_layout(const ap_plan *p, int v, int port, int s, const double *ratio);

/* The ratio by which vertex v's port shares its dimension in state s with
 * v's ratio r, among k children; vext: v's extents in the group. r, except
 * for the inputs of a Concat split along its axis (partition.c). */
void ap_plan_port_ratio(const ap_plan *p, const ap_graph *g, const int64_t *vext, int v,
                        int port, int s, int k, const double *r, double *out);

/* What the cost model charges, for tests and code generation: the box
 * exchanges of edge e (activation forward, its error backward) with its ends
 * in states su, sv, and the all-reduce inside vertex v in state s (ex->k is
 * 0 when there is none), within a group of class c. */
void ap_plan_edge_exchange(const ap_plan *p, const ap_graph *g, const ap_class *c, int e,
                           int su, int sv, const double *ru, const double *rv,
                           ap_exchange *fwd, ap_exchange *bwd);
void ap_plan_intra_exchange(const ap_plan *p, const ap_graph *g, const ap_class *c, int v,
                            int s, ap_exchange *ex);

/* The bytes the cost model charges device dev (what its communication
 * time is made of): the forward pass (train false) or a training step. */
double ap_plan_model_device_bytes(const ap_plan *p, int dev, bool train);
/* The bytes the levels charged device dev, as the search prices every
 * candidate, before the chosen plan is priced from the program's transfers
 * (bytes_priced "program"); where it is not, ap_plan_model_device_bytes. */
double ap_plan_level_device_bytes(const ap_plan *p, int dev, bool train);

/* ---- plan_print.c ------------------------------------------------------- */

/* Vertex v's state at a level as the plan prints it: "I", "II", "III" for a
 * layer, "b", "f", "r" (split dim 0, dim 1, replicated) for a join. */
const char *ap_plan_state_name(const ap_plan *p, int v, int level);

/* Device dev's box of vertex v's port: [lo, hi) per dimension. */
void ap_plan_device_box(const ap_plan *p, const ap_graph *g, int v, int port, int dev,
                        int64_t *lo, int64_t *hi);

/* Device dev's box of layer v's weight: type II splits its I dim, type III
 * its O dim, at each level as the layer's ports. */
void ap_plan_weight_box(const ap_plan *p, const ap_graph *g, int v, int dev, int64_t *lo,
                        int64_t *hi);

/* The same boxes for every device at once, each group's box computed once:
 * device d's into box[d] (the first rank coordinates of each). */
struct ap_dbox;
void ap_plan_device_boxes(const ap_plan *p, const ap_graph *g, int v, int port,
                          struct ap_dbox *box);
void ap_plan_weight_boxes(const ap_plan *p, const ap_graph *g, int v, struct ap_dbox *box);

#endif
