/* The tensor IR: the internal header of the ir/ layer, sectioned by source
 * file. Values and nodes are small integer ids into arrays owned by the
 * graph; all memory comes from the graph's arena and is released at once by
 * ap_graph_free. Protobuf types never appear here. */
#ifndef ACCPAR_IR_H
#define ACCPAR_IR_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "accpar/accpar.h"

enum { AP_MAX_RANK = 8 };

/* ---- arena.c ------------------------------------------------------------ */

typedef struct ap_arena ap_arena;

void *ap_xrealloc(void *ptr, size_t size); /* the allocation hook; NULL on failure */
void ap_xfree(void *ptr);
ap_arena *ap_arena_new(void);
void ap_arena_free(ap_arena *a);
/* Releases everything allocated, keeping the chunks for the allocations
 * that follow: a scratch arena used again and again touches memory the
 * process already has, where a new one faults in fresh pages each time. */
void ap_arena_reset(ap_arena *a);
/* A point to release back to: what was allocated after it goes, its chunks
 * kept for the allocations that follow, as ap_arena_reset keeps them. */
typedef struct ap_arena_mark {
  const void *chunk, *next;
  size_t used, grow;
} ap_arena_mark;
ap_arena_mark ap_arena_mark_now(const ap_arena *a);
void ap_arena_release(ap_arena *a, ap_arena_mark m);
void *ap_arena_alloc(ap_arena *a, size_t size);    /* zeroed, 16-byte aligned; NULL on failure */
void *ap_arena_array(ap_arena *a, size_t n, size_t elem); /* overflow-checked */
/* As ap_arena_array, not cleared: for storage whose used part is written
 * before it is read (a copy that may grow), so that its unused pages are
 * never touched. */
void *ap_arena_array_uncleared(ap_arena *a, size_t n, size_t elem);
void *ap_arena_copy(ap_arena *a, const void *src, size_t size); /* not cleared first */
char *ap_arena_strdup(ap_arena *a, const char *s);
char *ap_arena_strndup(ap_arena *a, const char *s, size_t n);
char *ap_arena_printf(ap_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Grows *arr (of *cap elements) to hold at least need; old storage stays in
 * the arena. Returns false when out of memory. */
bool ap_arena_grow(ap_arena *a, void **arr, int *cap, int need, size_t elem);

/* ---- diag.c ------------------------------------------------------------- */

/* Records the first user error: "FILE: node 'NODE' (OP): MESSAGE". node and
 * op may be NULL when the error is about the file as a whole. Returns s so
 * callers can write `return ap_error(...)`. Later errors do not overwrite. */
ap_status ap_error(ap_diag *d, ap_status s, const char *file, const char *node,
                   const char *op, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* ap_error(AP_ERR_UNSUPPORTED) naming node ni of g: what a rewrite does not
 * implement, refused in one line. */
ap_status ap_refuse(const ap_graph *g, ap_diag *d, int ni, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A broken invariant: prints file:line and aborts. Never for user input. */
_Noreturn void ap_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ap_die(...) ap_die_at(__FILE__, __LINE__, __VA_ARGS__)

/* ---- dtype.c ------------------------------------------------------------ */

/* Element types, numbered as ONNX TensorProto.DataType. */
typedef enum ap_dtype {
  AP_DT_UNDEFINED = 0,
  AP_DT_FLOAT = 1,
  AP_DT_UINT8 = 2,
  AP_DT_INT8 = 3,
  AP_DT_UINT16 = 4,
  AP_DT_INT16 = 5,
  AP_DT_INT32 = 6,
  AP_DT_INT64 = 7,
  AP_DT_STRING = 8,
  AP_DT_BOOL = 9,
  AP_DT_FLOAT16 = 10,
  AP_DT_DOUBLE = 11,
  AP_DT_UINT32 = 12,
  AP_DT_UINT64 = 13,
  AP_DT_COMPLEX64 = 14,
  AP_DT_COMPLEX128 = 15,
  AP_DT_BFLOAT16 = 16,
  AP_DT_LAST_KNOWN = 23 /* FLOAT8*, UINT4/INT4, FLOAT4E2M1: recognised by name only */
} ap_dtype;

size_t ap_dtype_size(ap_dtype t);       /* bytes per element; 0 for STRING/unknown */
const char *ap_dtype_name(ap_dtype t);  /* "float32", "int64"... */
bool ap_dtype_is_float(ap_dtype t);
bool ap_dtype_is_int(ap_dtype t);       /* signed or unsigned integer, not bool */

/* A dense tensor: attribute values, initializers, folded constants. */
typedef struct ap_tensor {
  ap_dtype dtype;
  int rank;
  int64_t dims[AP_MAX_RANK];
  int64_t numel;  /* product of dims; 1 for a scalar */
  void *data;     /* numel elements in host order; for STRING, numel char* (NUL-terminated) */
} ap_tensor;

/* Element i of a numeric tensor, converted. */
double ap_tensor_get_f64(const ap_tensor *t, int64_t i);
int64_t ap_tensor_get_i64(const ap_tensor *t, int64_t i);
void ap_tensor_set_f64(ap_tensor *t, int64_t i, double v);
/* numel for rank/dims, or -1 on overflow or a negative dim. */
int64_t ap_numel(int rank, const int64_t *dims);

/* ---- ops.c -------------------------------------------------------------- */

typedef enum ap_op {
#define OP(id, ...) AP_OP_##id,
#include "ir/ops.def"
#undef OP
  AP_OP_COUNT,
  AP_OP_UNKNOWN = AP_OP_COUNT /* an operator accpar does not support */
} ap_op;

typedef enum ap_op_kind {
  AP_OPK_LAYER,
  AP_OPK_EWISE,
  AP_OPK_POOL,
  AP_OPK_NORM,
  AP_OPK_REDUCE,
  AP_OPK_MOVE,
  AP_OPK_CONST
} ap_op_kind;

/* Axis rules (ir/axes.c): how boxes of an operator's tensors correspond. */
typedef enum ap_axes_rule {
  AP_AXES_WHOLE,       /* computed whole from whole inputs (Shape, Range...) */
  AP_AXES_EWISE,       /* element-wise, numpy broadcasting, every input data */
  AP_AXES_EWISE_FIRST, /* element-wise on input 0; the others are parameters */
  AP_AXES_CONV,        /* Conv, ConvTranspose: N and output channels */
  AP_AXES_GEMM,        /* rows of A, columns of B, C broadcast */
  AP_AXES_MATMUL,      /* rows of A, columns of B, batch dims broadcast */
  AP_AXES_POOL,        /* N and C; spatial dims whole */
  AP_AXES_LRN,         /* every axis but the channels */
  AP_AXES_BATCH_NORM,  /* every axis; per-channel parameters follow C */
  AP_AXES_LAYER_NORM,  /* the axes before `axis` */
  AP_AXES_SOFTMAX,     /* every axis but `axis` (opset >= 13), before it otherwise */
  AP_AXES_REDUCE,      /* the axes not reduced */
  AP_AXES_RESHAPE,     /* blocks of equal products (ap_axes_reshape) */
  AP_AXES_TRANSPOSE,   /* perm */
  AP_AXES_CONCAT,      /* every axis; along `axis` each input fills its part */
  AP_AXES_SPLIT,       /* every axis but `axis` */
  AP_AXES_SLICE,       /* the axes not sliced */
  AP_AXES_PAD,         /* the axes not padded */
  AP_AXES_TILE,        /* the axes not repeated */
  AP_AXES_BATCH,       /* axis 0 only (DepthToSpace, SpaceToDepth) */
  AP_AXES_RESIZE,      /* the axes Resize maps to themselves */
  AP_AXES_SCAN,        /* every axis but CumSum's */
  AP_AXES_TRILU,       /* the axes before the last two (the matrices) */
  AP_AXES_TOP_K,       /* every axis but TopK's */
  AP_AXES_ONE_HOT,     /* the indices' axes (the depth axis whole) */
  AP_AXES_GATHER,      /* data's axes but `axis`, and the indices' axes */
  AP_AXES_ELEMENTS,    /* every axis but `axis` where the indices span the data
                          (GatherElements, ScatterElements) */
  AP_AXES_ND,          /* the batch_dims leading axes (GatherND; none for ScatterND) */
  AP_AXES_NORMALIZED,  /* the axes a statistic does not run over (ap_norm_axes);
                          InstanceNormalization's scale and bias follow C */
  AP_AXES_EXPAND       /* input 0 broadcast to the output */
} ap_axes_rule;

typedef struct ap_op_info {
  const char *name; /* the ONNX operator type */
  int min_in, max_in, min_out, max_out; /* max -1: variadic */
  ap_op_kind kind;
  ap_axes_rule axes;
  unsigned const_in; /* bit i: input i must be a constant for shapes to be known */
} ap_op_info;

extern const ap_op_info ap_op_table[AP_OP_COUNT];
/* The newest opset of the default domain whose semantics are implemented
 * (ONNX 1.22's node tests go up to it); a newer model is refused. */
enum { AP_OPSET_MAX = 25 };
ap_op ap_op_lookup(const char *domain, const char *type); /* AP_OP_UNKNOWN if unsupported */

/* ---- graph.c ------------------------------------------------------------ */

typedef enum ap_value_kind {
  AP_VAL_INPUT,   /* a graph input with no initializer: data fed at run time */
  AP_VAL_WEIGHT,  /* an initializer: a constant that training may update */
  AP_VAL_CONST,   /* a constant made by folding or bound by --inputs */
  AP_VAL_NODE     /* produced by a node */
} ap_value_kind;

typedef struct ap_value {
  const char *name;
  ap_value_kind kind;
  ap_dtype dtype;               /* AP_DT_UNDEFINED until known */
  int rank;                     /* -1 until known */
  int64_t dims[AP_MAX_RANK];    /* -1 for a size not known yet */
  const char *sym[AP_MAX_RANK]; /* dim_param naming a symbolic size, or NULL */
  void *data;                   /* constant contents (as ap_tensor.data), or NULL */
  int producer;                 /* node id, or -1 */
  bool is_graph_input;          /* listed in graph.input */
  bool is_graph_output;         /* listed in graph.output */
  const char *non_tensor;       /* "sequence", "optional"...: a type accpar refuses */
  bool outer;                   /* in a subgraph: a name of an enclosing graph it reads */
} ap_value;

typedef enum ap_attr_type { /* numbered as ONNX AttributeProto.AttributeType */
  AP_ATTR_UNDEFINED = 0,
  AP_ATTR_FLOAT = 1,
  AP_ATTR_INT = 2,
  AP_ATTR_STRING = 3,
  AP_ATTR_TENSOR = 4,
  AP_ATTR_GRAPH = 5,
  AP_ATTR_FLOATS = 6,
  AP_ATTR_INTS = 7,
  AP_ATTR_STRINGS = 8,
  AP_ATTR_TENSORS = 9
} ap_attr_type;

typedef struct ap_attr {
  const char *name;
  ap_attr_type type;
  int64_t i;             /* INT */
  float f;               /* FLOAT */
  const char *s;         /* STRING: NUL-terminated copy (bytes after a NUL are kept in s_len) */
  size_t s_len;          /* STRING: length in bytes */
  int n;                 /* element count of FLOATS/INTS/STRINGS/TENSORS */
  int64_t *ints;         /* INTS */
  float *floats;         /* FLOATS */
  const char **strings;  /* STRINGS */
  ap_tensor *t;          /* TENSOR, or the n tensors of TENSORS */
  struct ap_graph *g;    /* GRAPH: the subgraph (If's branches, Loop's body), in the
                            enclosing graph's arena; its reads of enclosing names are
                            values marked outer */
} ap_attr;

typedef struct ap_node {
  const char *name;    /* unique; the frontend names unnamed nodes "OpType_K" */
  ap_op op;            /* AP_OP_UNKNOWN for an unsupported operator */
  const char *op_type; /* as written in the model */
  const char *domain;  /* "" for the default ONNX domain */
  int n_in, n_out, n_attr;
  int *in;             /* value ids; -1 for an omitted optional input */
  int *out;            /* value ids; -1 for an omitted optional output */
  ap_attr *attr;
  bool dead;           /* removed by a pass; dropped by ap_graph_compact */
  uint8_t *types;      /* set by the partition pass: per level 1=I, 2=II, 3=III */
  int n_types;         /* levels planned; 0 for weightless or unplanned nodes */
} ap_node;

/* ONNX IR version 11's multi-device annotations of one tensor a node reads
 * or writes (ShardingSpecProto): one entry of device per shard, the shards
 * in row-major order over dims; an entry < 0 is the key of a group of
 * devices holding copies of that shard. */
typedef struct ap_shard_dim {
  int64_t axis, dim_value, num_shards; /* axis split evenly into num_shards */
} ap_shard_dim;

typedef struct ap_shard_group {
  int64_t key;        /* < 0, as written in device */
  int n;
  int64_t *devices;
} ap_shard_group;

typedef struct ap_shard_spec {
  const char *tensor;
  int n_device, n_groups, n_dims;
  int64_t *device;
  ap_shard_group *groups;
  ap_shard_dim *dims;
} ap_shard_spec;

/* A device configuration (DeviceConfigurationProto) and every node's
 * sharding specs under it (NodeDeviceConfigurationProto), written by
 * ap_write_onnx. */
typedef struct ap_devconf {
  const char *name;
  int n_devices;
  const char **devices;  /* a name per device index */
  int *n_specs;          /* [n_nodes] */
  ap_shard_spec **specs; /* [n_nodes]: the node's inputs' and outputs' specs */
} ap_devconf;

typedef struct ap_opset {
  const char *domain; /* "" or "ai.onnx" for the default domain */
  int64_t version;
} ap_opset;

struct ap_graph {
  ap_arena *arena;
  ap_arena *scratch;       /* reset between uses, freed with the graph (the partition
                              pass prices plans from their distributions in it); or NULL */
  const char *path;        /* the file it came from, for diagnostics */
  const char *name;
  int64_t ir_version;
  const char *producer_name;
  const char *producer_version;
  int64_t opset;           /* version of the default domain's opset */
  ap_opset *opsets;
  int n_opsets;
  ap_value *values;
  int n_values, cap_values;
  ap_node *nodes;          /* in topological order once verified */
  int n_nodes, cap_nodes;
  int *inputs;             /* graph.input, initializers included, in file order */
  int n_inputs, cap_inputs;
  int *outputs;
  int n_outputs, cap_outputs;
  const char **meta_keys;  /* the model's metadata_props, in file order */
  const char **meta_values;
  int n_meta, cap_meta;
  int *name_index;         /* open-addressing hash: value name -> id + 1 */
  int name_index_cap;
  void *plan;              /* the partition pass's plan (passes/passes.h), or NULL */
  ap_devconf *devconf;     /* the plan as ONNX sharding annotations, or NULL */
  const char **rebatched;  /* constants re-batching rewrote: "NAME[i]: B -> N (node...)" */
  int n_rebatched, cap_rebatched;
};

ap_graph *ap_graph_new(const char *path);
/* A copy of g's values, nodes, inputs and outputs in an arena of its own
 * (no plan, no metadata) that passes can run on without touching g. Constant
 * data and attribute contents stay g's: the copy must be freed first. NULL
 * when out of memory. */
ap_graph *ap_graph_clone(const ap_graph *g);
/* The value named name, or -1. */
int ap_graph_find(const ap_graph *g, const char *name);
/* The only live node reading value v, or -1 (none, several, or v a graph
 * output); with once, also -1 when that node reads v twice (Add(x, x)). */
int ap_sole_reader(const ap_graph *g, bool once, int v);
/* Whether two shapes have the same rank and dims. */
bool ap_dims_equal(int rank_a, const int64_t *a, int rank_b, const int64_t *b);
/* Adds a value named name (copied); -1 if out of memory. The caller checks
 * for duplicates with ap_graph_find first. */
int ap_graph_add_value(ap_graph *g, const char *name, ap_value_kind kind);
/* Adds a node; in/out arrays are allocated (filled with -1) for the caller to
 * set. Returns the node id, or -1 if out of memory. */
int ap_graph_add_node(ap_graph *g, const char *name, const char *domain,
                      const char *op_type, int n_in, int n_out, int n_attr);
bool ap_graph_add_input(ap_graph *g, int v);
/* Sets the model metadata entry key (copied), replacing an existing one. */
bool ap_graph_set_meta(ap_graph *g, const char *key, const char *value);
bool ap_graph_add_output(ap_graph *g, int v);
/* Drops dead nodes and values no node, input or output refers to, and
 * renumbers; recomputes producers. false if out of memory. */
bool ap_graph_compact(ap_graph *g);
/* Sets producer for every value from the node list. */
void ap_graph_link(ap_graph *g);

/* Attribute access by name: NULL / the default when absent. */
const ap_attr *ap_attr_find(const ap_node *n, const char *name);
int64_t ap_attr_int(const ap_node *n, const char *name, int64_t dflt);
float ap_attr_float(const ap_node *n, const char *name, float dflt);
const char *ap_attr_string(const ap_node *n, const char *name, const char *dflt);
/* The ints of an INTS attribute and their count, or NULL with *count = 0. */
const int64_t *ap_attr_ints(const ap_node *n, const char *name, int *count);

/* Whether v is a parameter a training step updates: a float initializer
 * with more than one element. Exporters write scalar constants (Pow's
 * exponent, an epsilon, a mask's fill value, 1/sqrt(d)) as initializers
 * too; they stay constants. */
bool ap_value_is_parameter(const ap_value *v);
/* Whether graph input v, fed at run time, is a weight rather than data: a
 * float tensor of more than one element that no node reads as its first
 * operand, but as a Gather's table or through a reshaping op (Transpose,
 * Cast...) read so in turn (ONNX's node tests and accpar-zoo --no-weights
 * feed their weights: a MatMul's right operand, a bias added, an embedding
 * table and its transpose). */
bool ap_value_is_fed_weight(const ap_graph *g, int v);
/* fed[v] = ap_value_is_fed_weight(g, v) for every value, from one index of
 * the readers instead of a look at every node per value. */
void ap_fed_weights(const ap_graph *g, bool *fed);
/* The rows of the smallest table integer value v indexes (as Gather's
 * indices, directly or through casts and reshapes), or 0 when it indexes
 * none: the range a run-time input of token ids must stay in. */
int64_t ap_value_index_rows(const ap_graph *g, int v);
/* A value's view as a tensor (shape, dtype, data), for constants. */
ap_tensor ap_value_tensor(const ap_value *v);
bool ap_value_shape_known(const ap_value *v);
/* Makes v a constant holding t (copied into the arena); false if out of memory. */
bool ap_value_set_constant(ap_graph *g, int v, const ap_tensor *t);
/* The input i of node n as a value, or NULL when absent/omitted. */
ap_value *ap_node_in(ap_graph *g, const ap_node *n, int i);
ap_value *ap_node_out(ap_graph *g, const ap_node *n, int i);

/* ---- verify.c ----------------------------------------------------------- */

/* Structure: unique names, every input defined, arities from ops.def, no
 * cycles; sorts nodes topologically. Lists every unsupported operator type
 * with the nodes using it in one message. */
ap_status ap_verify(ap_graph *g, ap_diag *d);

/* ---- shape.c ------------------------------------------------------------ */

/* Infers dtype and shape of every node output, in node order, with the ONNX
 * semantics of the graph's opset. Needs constant inputs where ONNX does
 * (Reshape's shape, Slice's starts...). */
ap_status ap_infer_shapes(ap_graph *g, ap_diag *d);
/* Infers the outputs of one node (a no-op for a dead node); the folding pass
 * interleaves it with evaluation. */
ap_status ap_infer_node(ap_graph *g, int node, ap_diag *d);
/* Helpers shared with folding, so shapes and values agree by construction. */
/* Slice: per input axis, start/end/step (axes not sliced get 0, INT64_MAX,
 * 1 and sliced[i] false); *known is false when an input is not constant. */
ap_status ap_slice_params(ap_graph *g, ap_node *n, const ap_value *x, int64_t *starts,
                          int64_t *ends, int64_t *steps, bool *sliced, bool *known,
                          ap_diag *d);
/* One sliced axis of size dim after ONNX clamping: first index and count. */
void ap_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first,
                   int64_t *count);
/* Pad's modes, and its parameters per input axis: pads before and after
 * (0 for axes it does not pad; negative ones crop), from the attribute
 * before opset 11, from the constant input (and axes, opset 18) after;
 * *known is false when an input is not constant. */
typedef enum ap_pad_mode { AP_PAD_CONSTANT, AP_PAD_REFLECT, AP_PAD_EDGE, AP_PAD_WRAP } ap_pad_mode;
ap_status ap_pad_params(ap_graph *g, ap_node *n, int rank, int64_t *begin, int64_t *end,
                        ap_pad_mode *mode, bool *known, ap_diag *d);
/* The input index along an axis of size dim (> 0 unless mode is constant)
 * that output index i reads, begin pads before it; -1 for the constant. */
int64_t ap_pad_source(ap_pad_mode mode, int64_t i, int64_t begin, int64_t dim);
/* Tile: the repeats per input axis; *known is false when they are not a
 * constant. */
ap_status ap_tile_repeats(ap_graph *g, ap_node *n, int rank, int64_t *repeats, bool *known,
                          ap_diag *d);
/* DepthToSpace, SpaceToDepth: the block size, and whether DepthToSpace's
 * mode is CRD (else DCR). */
ap_status ap_depth_space_params(ap_graph *g, ap_node *n, int64_t *block, bool *crd, ap_diag *d);
/* Resize and Upsample, nearest, linear or cubic: per axis the input and
 * output sizes, the scale, and how an output index maps to input indices. */
typedef enum ap_resize_coord {
  AP_RESIZE_HALF_PIXEL, AP_RESIZE_ASYMMETRIC, AP_RESIZE_ALIGN_CORNERS,
  AP_RESIZE_PYTORCH_HALF_PIXEL, AP_RESIZE_TF_HALF_PIXEL_FOR_NN, AP_RESIZE_TF_CROP_AND_RESIZE
} ap_resize_coord;
typedef enum ap_resize_nearest {
  AP_RESIZE_ROUND_PREFER_FLOOR, AP_RESIZE_ROUND_PREFER_CEIL, AP_RESIZE_FLOOR, AP_RESIZE_CEIL
} ap_resize_nearest;
enum { AP_RESIZE_MAX_TAPS = 4 };
typedef struct ap_resize {
  int rank;
  int taps;                    /* input elements per output element along an axis:
                                  1 nearest, 2 linear, 4 cubic */
  double cubic_a;              /* cubic: cubic_coeff_a */
  bool exclude_outside;        /* cubic: taps outside the input weigh 0, the rest
                                  renormalised */
  double roi_start[AP_MAX_RANK], roi_end[AP_MAX_RANK]; /* tf_crop_and_resize: the region
                                  of interest, fractions of each axis */
  double extrapolation;        /* tf_crop_and_resize: the value outside the input */
  ap_resize_coord coord;
  ap_resize_nearest nearest;
  int64_t in[AP_MAX_RANK], out[AP_MAX_RANK];
  double scale[AP_MAX_RANK];
} ap_resize;
/* The parameters for input x (its dims known); *known is false when the
 * scales or sizes are not constants. */
ap_status ap_resize_params(ap_graph *g, ap_node *n, const ap_value *x, ap_resize *r,
                           bool *known, ap_diag *d);
/* Output index i along axis a reads r->taps input indices idx[t] (clamped
 * into the input: the edge repeats) weighted w[t]. False (all weights 0)
 * when it lies outside the input (tf_crop_and_resize): an output element
 * outside along any axis is r->extrapolation. */
bool ap_resize_source(const ap_resize *r, int a, int64_t i, int64_t *idx, double *w);
/* Whether axis a maps every output index to the same input index. */
bool ap_resize_identity(const ap_resize *r, int a);
/* ScatterElements, ScatterND: how an update meets the element it lands on. */
typedef enum ap_scatter_reduction {
  AP_SCATTER_NONE, /* replaces it */
  AP_SCATTER_ADD,
  AP_SCATTER_MUL,
  AP_SCATTER_MAX,
  AP_SCATTER_MIN
} ap_scatter_reduction;
/* The reduction attribute, refused where the node's opset does not have
 * it (add and mul from 16, max and min from 18). */
ap_status ap_scatter_reduction_of(ap_graph *g, ap_node *n, ap_scatter_reduction *r, ap_diag *d);
/* GatherND: batch_dims, checked against the ranks of data and indices. */
ap_status ap_gather_nd_batch(ap_graph *g, ap_node *n, int *batch_dims, ap_diag *d);
/* InstanceNormalization, GroupNormalization, LpNormalization,
 * MeanVarianceNormalization: over[i] for every axis i of input 0 (rank)
 * that one statistic runs over (GroupNormalization's channels, of which a
 * group holds several, count as such). */
ap_status ap_norm_axes(ap_graph *g, ap_node *n, int rank, bool *over, ap_diag *d);
/* Reduce*: reduced[i] for every axis i of input 0 (axes from the attribute
 * or a constant input, noop_with_empty_axes applied); ArgMax, ArgMin: their
 * one axis. */
ap_status ap_reduce_axes(ap_graph *g, ap_node *n, bool *reduced, ap_diag *d);
/* CumSum: its axis (input 1) normalized against rank; *known is false when
 * it is not a constant. */
ap_status ap_cumsum_axis(ap_graph *g, ap_node *n, int rank, int *axis, bool *known, ap_diag *d);
/* TopK: its axis normalized against rank, and K (input 1, or attribute k
 * before opset 10); *known is false when K is not a constant. */
ap_status ap_top_k_params(ap_graph *g, ap_node *n, int rank, int *axis, int64_t *k, bool *known,
                          ap_diag *d);
/* OneHot: the output axis the depth goes to (indices of rank `rank`), and
 * depth (input 1); *known is false when depth is not a constant. */
ap_status ap_one_hot_params(ap_graph *g, ap_node *n, int rank, int *axis, int64_t *depth,
                            bool *known, ap_diag *d);
/* Trilu: upper, and the diagonal offset k (input 1, 0 when absent); *known
 * is false when k is not a constant. */
ap_status ap_trilu_params(ap_graph *g, ap_node *n, bool *upper, int64_t *k, bool *known,
                          ap_diag *d);
/* ConstantOfShape's fill value (a one-element tensor; float 0 by default). */
ap_status ap_constant_of_shape_value(ap_graph *g, ap_node *n, ap_tensor *value,
                                     ap_diag *d);
/* Shape's [start, end) dims (opset 15 attributes), clamped to [0, rank]. */
void ap_shape_range(const ap_node *n, int rank, int *start, int *end);
/* Range's element count max(ceil((limit - start) / delta), 0). */
ap_status ap_range_count(ap_graph *g, ap_node *n, double start, double limit, double delta,
                         int64_t *count, ap_diag *d);

/* ---- fold.c ------------------------------------------------------------- */

/* Evaluates nodes whose inputs are all constants (Constant, ConstantOfShape,
 * Shape/Gather/Unsqueeze/Concat chains, Identity, inference Dropout...),
 * turning their outputs into constants and marking them dead. */
ap_status ap_fold_constants(ap_graph *g, ap_diag *d);

/* ---- axes.c ------------------------------------------------------------- */

/* The operator's axis rule, one place for the planner and the distribution
 * of boxes. A device computes a box of a node's outputs; the rule says,
 * for a node whose shapes are known, which boxes it may compute and which
 * box of every input that needs. Where input axis a of slot i runs along an
 * output axis index for index, the input's box along a is the output's box
 * along that axis; every other input axis is read whole. The kernel of the
 * whole tensor applied to those boxes (as tensors of their own) computes
 * the output box. */

/* Whether the node computes boxes of its outputs at all (false: it reads
 * its inputs whole and computes its outputs whole). */
bool ap_axes_boxwise(const ap_graph *g, const ap_node *n);
/* Whether a device may compute a slab of axis j of output 0. */
bool ap_axes_out_split(const ap_graph *g, const ap_node *n, int j);
/* The axis of output 0 along which axis a of input slot runs index for
 * index, or -1 when the node reads that axis whole (reduced, contracted,
 * windowed, broadcast from 1). Reshape-like nodes: see ap_axes_reshape. */
int ap_axes_in_to_out(const ap_graph *g, const ap_node *n, int slot, int a);
/* Whether input slot carries data whose boxes the node follows (as
 * opposed to a parameter: a shape, axes, a ratio...). */
bool ap_axes_data_slot(const ap_node *n, int slot);
/* Reshape-like nodes (rule AP_AXES_RESHAPE) reinterpret a row-major
 * buffer; their dims fall into blocks of equal products. A slab of input
 * axis a can stay a slab of an output axis only when a is the outermost
 * non-unit dim of its block: returns that output axis q (or -1). Within the
 * block, index t of a starts at flat offset t * in_step and index u of q at
 * u * out_step, so a bound t of a slab carries over exactly when t * in_step
 * is a multiple of out_step (then u = t * in_step / out_step): slabs whose
 * bounds are multiples of out_step / gcd(in_step, out_step) always do. */
int ap_axes_reshape(const ap_value *x, const ap_value *y, int a, int64_t *in_step,
                    int64_t *out_step);
int64_t ap_gcd(int64_t a, int64_t b);

/* ---- unfuse.c ----------------------------------------------------------- */

/* MatMul(x, W) [+ bias] followed by a Split of the last axis becomes one
 * MatMul per part on column slices of W (and of the bias). */
ap_status ap_unfuse_projections(ap_graph *g, ap_diag *d);
/* Einsum nodes of matmul-shaped equations rewritten into Transpose,
 * Unsqueeze, MatMul and Squeeze (one operand: a Transpose); any other
 * equation is refused in one line naming the node and the equation. The
 * pipeline's first pass, before the verifier sees the graph. */
ap_status ap_rewrite_einsum(ap_graph *g, ap_diag *d);

/* ---- control.c ---------------------------------------------------------- */

/* If with a condition constant once the inputs are bound: the taken
 * branch inlined; Loop with a constant trip count and a condition that
 * stays true: unrolled (recurrent layers unrolled first where a condition
 * depends on their output). Any other If or Loop is refused in one line.
 * Runs before the verifier, which would refuse them. */
ap_status ap_lower_control_flow(ap_graph *g, ap_diag *d);
/* Whether input slot of n must be a constant for that (If's condition,
 * Loop's trip count and condition), so --inputs binds it. */
bool ap_control_input_constant(const ap_node *n, int slot);
/* What the graph computes for value v before any operator the verifier
 * refuses (on a copy, verified, folded and shape-inferred; those operators
 * and whatever reads their outputs left out). false when v is not known so. */
typedef struct ap_prefix {
  int rank;
  int64_t dims[AP_MAX_RANK];
  bool constant;   /* folded to a constant */
  double first;    /* then its first element (0 for an empty tensor) */
} ap_prefix;
bool ap_infer_prefix(const ap_graph *g, int v, ap_prefix *out);

/* ---- recurrent.c -------------------------------------------------------- */

/* LSTM, GRU and RNN unrolled over their sequence length into the existing
 * operators (before the verifier, which would refuse them). */
ap_status ap_unroll_recurrent(ap_graph *g, ap_diag *d);
/* The same for the recurrent nodes whose input shape is known now, the
 * others left; *unrolled counts (ap_lower_control_flow, for conditions
 * that depend on a recurrent layer's output). */
ap_status ap_unroll_recurrent_known(ap_graph *g, int *unrolled, ap_diag *d);
/* Whether input slot of n must be a constant for the unrolling (an LSTM,
 * GRU or RNN's sequence_lens), so --inputs binds it. */
bool ap_recurrent_input_constant(const ap_node *n, int slot);

/* ---- bind.c ------------------------------------------------------------- */
/* ap_bind_batch and ap_bind_inputs_dir: see accpar.h. */
/* rebatch.c: rewrites the literal shapes that carry the fixed batch of
 * graph input `input` (dim 0) so the model computes at batch `batch`;
 * ap_bind_batch then binds the input itself. */
ap_status ap_rebatch(ap_graph *g, int input, int64_t batch, ap_diag *d);

/* ---- dump.c ------------------------------------------------------------- */
/* ap_dump_text and ap_dump_json: see accpar.h. */

/* s[0..len) as a JSON string, quoted and escaped: every JSON the library and
 * accparc print writes its strings so. */
void ap_json_string(FILE *out, const char *s, size_t len);

#endif
