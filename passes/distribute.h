/* The plan at the granularity of devices: the box of every value each device
 * computes or reads, and every transfer between devices the plan's layouts
 * imply, with its bytes per device.
 *
 * The partition pass decides layouts per level (passes.h); this turns them
 * into what a partitioned program does (docs/codegen.md, "The partitioned
 * program"): a layer computes the box the plan gives its output from the
 * boxes the plan gives its input and weight; a weightless operator carries
 * its input's box where its output dims correspond to input dims and needs
 * the others whole; a join computes the box the plan gives its output. Where
 * a node needs a box of a value that the devices holding it do not give it,
 * a transfer moves exactly the missing pieces (each element sent once to
 * each device lacking it, by a device holding the lowest-ranked box that
 * holds it, whose holders take the receivers in turn); partial sums of a
 * layer split along its input features (type II at some level) are resolved right after it,
 * by an all-reduce when every group of devices with equal boxes holds one of
 * each summand, else by sending each device every other summand of its box
 * or, where that moves more on the busiest device, by summing each element
 * at one owner among the devices holding it and sending the sum on.
 * Code generation emits exactly these transfers and the bytes below are what
 * the runtime counts for them, so the program's measured bytes_sent equals
 * the predicted bytes device by device.
 */
#ifndef ACCPAR_PASSES_DISTRIBUTE_H
#define ACCPAR_PASSES_DISTRIBUTE_H

#include "ir/ir.h"

/* [lo, hi) per dimension of a value. The coordinates are 32-bit: a plan is
 * priced by building every device's boxes of every node, and over a
 * thousand devices 64-bit boxes made that most of the planner's memory and
 * a third of its time (faulting the pages in). The distribution refuses a
 * graph with a dimension past AP_DCOORD_MAX (ap_dist_oversized). */
typedef int32_t ap_dcoord;
#define AP_DCOORD_MAX INT32_MAX
typedef struct ap_dbox {
  ap_dcoord lo[AP_MAX_RANK], hi[AP_MAX_RANK];
} ap_dbox;

typedef enum ap_dxfer_kind {
  AP_DX_EXCHANGE,  /* box pieces from the holders to the devices needing them */
  AP_DX_ALLREDUCE, /* partial sums: groups of devices with equal boxes, one summand each */
  AP_DX_REDUCE,    /* partial sums: every device receives every other summand of its box */
  AP_DX_OWNER_SUM, /* a weight's gradient over boxes that meet: the pieces of an exchange
                      from the owners (one device holding each element, the elements of
                      equal holders shared out evenly) to every other copy; each copy goes
                      to its owner along the pieces reversed and is added there, then the
                      sum comes back along them */
  AP_DX_OWNER_REDUCE /* partial sums of three summands or more over boxes that meet: the
                        pieces bring each element's owner (as AP_DX_OWNER_SUM's) one copy of
                        every other summand, the owner's own a local piece; the owner sums
                        them in summand order and spread, an exchange, sends the sum on to
                        the other devices holding the element */
} ap_dxfer_kind;

/* One box sent from one device to another (from == to: a local copy). */
typedef struct ap_dpiece {
  int from, to;
  int summand;     /* partial sums: which summand the piece is (the sender's) */
  ap_dbox box;     /* in the value's whole index space */
} ap_dpiece;

typedef struct ap_dxfer {
  ap_dxfer_kind kind;
  int value;
  int n_pieces;
  ap_dpiece *pieces; /* in one order both ends follow; none kept by ap_distribute_priced */
  double *sent;      /* [n_dev]: the bytes of the pieces each device sends to another */
  double *received;  /* [n_dev]: those it receives; NULL with the other when no piece moves */
  int n_summands;    /* partial sums: how many summands */
  int *summand;      /* [n_dev]: each device's summand */
  int *group;        /* AP_DX_ALLREDUCE: [n_dev]: where device d's group starts in members
                        (ap_dxfer_group); devices of one group share its entry */
  int *members;      /* AP_DX_ALLREDUCE: every group's devices once, group after group: by
                        summand, or (n_group) in device order */
  int *n_group;      /* AP_DX_ALLREDUCE of a weight's gradient: [n_dev]: the size of device
                        d's group (summand[d] = d's place in it); NULL: every group has
                        n_summands members */
  struct ap_dxfer *spread; /* AP_DX_OWNER_REDUCE: the owners' sums to the other holders; sent
                              and received above count its pieces too */
} ap_dxfer;

/* The devices of device d's all-reduce group: n_group[d] of them, or
 * n_summands, the one holding summand s at [s]. Stored once per group, not
 * per device: over a thousand devices a list per device took gigabytes. */
static inline const int *ap_dxfer_group(const ap_dxfer *t, int d) {
  return t->members + t->group[d];
}

/* A node's boxes, port by port: out[o][d] is the box device d computes of
 * output o, in[i][d] the box it reads of input i. Ports whose boxes are
 * equal on every device share one array, read-only, in the whole graph
 * (each array kept once by its content): an input read as its producer's
 * devices hold it shares their output's array, an output carried from an
 * input shares that input's, the blocks of a transformer share one
 * block's arrays. Over a thousand devices a copy per port took two thirds
 * of a plan's memory (docs/plan-time.md). */
typedef struct ap_dnode {
  ap_dbox **out;        /* [n_out]: [n_dev] each */
  ap_dbox **in;         /* [n_in]: [n_dev] each */
  ap_dxfer **xfer_in;   /* [n_in]: the transfer giving input i its boxes, or NULL */
  ap_dxfer *reduce;     /* partial sums resolved after the node, or NULL */
  int bias_slot;        /* with reduce: the bias input, added after the reduction; -1 */
} ap_dnode;

typedef struct ap_dist {
  int n_dev;
  ap_dnode *node;       /* [n_nodes] */
  ap_dbox **held;       /* [n_values]: the boxes the devices hold of value v, [v][d] (its
                           producer's output boxes, not a copy; where every device holds it
                           whole, NULL or one array shared by the values of its shape);
                           read-only, read through ap_dist_held */
  int *read_first;      /* [n_values + 1]: the reads of value v are read[read_first[v] ..
                           read_first[v + 1]), node by node and slot by slot */
  int (*read)[2];       /* (node, input slot) */
  double *fwd_bytes;    /* [n_dev]: bytes sent in the forward pass (inference) */
  double *step_bytes;   /* [n_dev]: a training step (ap_distribute_train): exactly what
                           the training program sends, below; ap_distribute alone: -1 */
  /* Training (ap_distribute_train). The step runs the forward transfers
   * above, the loss, then every transfer's adjoint in reverse: the error of
   * a box a node read through an exchange goes back to the device that sent
   * it and is added there (the pieces reversed); partial sums resolved by an
   * all-reduce get their error all-reduced over the same group, those
   * resolved by sending summands get each receiver's error back; and every
   * trainable weight's gradient is summed over the devices holding a copy of
   * its elements. */
  ap_dbox *loss_box;    /* [n_dev]: the rows (all of the other dims) of graph output 0 the
                           loss of device d reads: its own rows where the devices' boxes
                           partition the rows, else an even split of the batch */
  ap_dxfer *loss_xfer;  /* bringing them, or NULL (every device holds its rows) */
  ap_dxfer **wgrad;     /* [n_values]: the sum of a trainable weight's gradient: an
                           all-reduce over each group of devices reading equal boxes of it
                           when the groups' boxes are disjoint, else a sum at the owners
                           (AP_DX_OWNER_SUM); NULL for one copy */
} ap_dist;

/* The first value with a dimension past AP_DCOORD_MAX, or -1: the graph
 * ap_distribute refuses (the planner prices it by closed forms). */
int ap_dist_oversized(const ap_graph *g);

/* The box device d holds of value v: whole where no node computes it in
 * part (empty where its shape is unknown). */
ap_dbox ap_dist_held(const ap_graph *g, const ap_dist *dist, int v, int d);

/* Distributes g (after ap_run_pipeline; after ap_partition when the array
 * has several devices — without a plan there is one device holding every
 * value whole). Lives in g's arena. */
ap_status ap_distribute(ap_graph *g, ap_dist **out, ap_diag *d);

/* The one definition of what a training step trains, which the cost model
 * (graph_build.c: the gradient sums it prices), the distribution and the
 * plan's figures share: trainable[v] is a float weight (a parameter,
 * ap_value_is_parameter, or a fed weight, ap_value_is_fed_weight, computed
 * by no node) from which graph output 0 is computed through inputs other
 * than BatchNormalization's running statistics; want[n] (bit i) marks the
 * inputs of node n that are computed from such a weight and reach the
 * output, whose errors the backward produces. Both live in g's arena. */
ap_status ap_train_roles(ap_graph *g, uint64_t **want, bool **trainable, ap_diag *d);

/* ap_distribute, then the training step's transfers and step_bytes. want[n]
 * (bit i: the backward of node n produces the error of input i; 0: no
 * backward step) and trainable[v] (a weight the step updates) are the
 * training schedule's (codegen/train.h); NULL takes ap_train_roles's. */
ap_status ap_distribute_train(ap_graph *g, const uint64_t *want, const bool *trainable,
                              ap_dist **out, ap_diag *d);

/* ap_distribute_train for pricing: every transfer with the bytes each
 * device sends and receives, without its pieces. The cost model prices a
 * plan so (passes/partition.c); over a thousand devices a gather of a
 * replicated value is a million pieces. */
ap_status ap_distribute_priced(ap_graph *g, const uint64_t *want, const bool *trainable,
                               ap_dist **out, ap_diag *d);

/* derived[v] for every value v: a constant or a weight, or computed from
 * them alone (a Slice or Transpose of a weight). Such a value is computed
 * where it is read, its boxes narrowed to what its readers read after
 * they read them (the last pass of ap_distribute). */
void ap_dist_weight_derived(const ap_graph *g, bool *derived);

/* The device d's box of trainable weight v: the smallest box holding every
 * box its readers on d read of it (a table tied to an LM head may be read
 * by rows and by columns), whole when no node reads it. */
ap_dbox ap_dist_weight_box(const ap_graph *g, const ap_dist *dist, int v, int dev);
/* The same for every device at once: the array its readers all read, or
 * room[n_dev] filled. */
const ap_dbox *ap_dist_weight_boxes(const ap_graph *g, const ap_dist *dist, int v,
                                    ap_dbox *room);

/* Adds to bytes[d] what device d sends for the forward transfer t: its
 * pieces, or for an all-reduce of partial sums its share of summing box[d]
 * (the node's output boxes). The same charge as fwd_bytes's. */
void ap_dxfer_charge(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box, int n_dev,
                     double *bytes);
/* Adds to bytes[d] what device d sends for the adjoint of forward transfer t
 * in a training step: every piece's error back to the device that sent it,
 * or the all-reduce of the error over box[d]. */
void ap_dxfer_charge_adjoint(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box,
                             int n_dev, double *bytes);
/* Adds to bytes[d] what device d sends for t = dist->wgrad[v], the sum of a
 * trainable weight's gradient over box[d] = ap_dist_weight_box(v, d). */
void ap_dxfer_charge_sum(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box, int n_dev,
                         double *bytes);

int64_t ap_dbox_volume(int rank, const ap_dbox *b);
bool ap_dbox_equal(int rank, const ap_dbox *a, const ap_dbox *b);
bool ap_dbox_whole(const ap_value *v, const ap_dbox *b);

#endif
