/* The code generator's internal header, sectioned by source file.
 *
 * The C backend lowers a verified, shape-inferred graph to C11 sources in an
 * output folder and builds them with the system C compiler into OUTDIR/model,
 * which links the runtime (runtime/accpar_rt.h). Every loop bound is a
 * literal: shapes are known at compile time. docs/codegen.md describes the
 * generated program and how the partitioned (multi-device) version extends it.
 *
 * Operators are emitted by one function per operator, cg_emit_<ID> for every
 * OP(ID, ...) of ir/ops.def, spread over one file per operator family
 * (c_ewise.c, c_layer.c, c_pool.c, c_norm.c, c_reduce.c, c_move.c); the
 * dispatch table in emit_c.c is generated from ops.def, so an operator
 * without an emitter does not link. An emitter writes the body of one kernel
 * function for the operand boxes it is given; identical kernels (same
 * signature and body text, i.e. same operator, attributes, dtypes and box
 * sizes) are emitted once and called from every place that needs them. */
#ifndef ACCPAR_CODEGEN_H
#define ACCPAR_CODEGEN_H

#include <stdio.h>

#include "ir/ir.h"
#include "passes/distribute.h"

/* ---- kir.c: kernels as loop nests -----------------------------------------
 *
 * Every kernel is a small loop-nest program the backends print (C) or build
 * (LLVM): loops with literal bounds, integer index arithmetic, loads and
 * stores of the operands' elements, scalar expressions (the math functions
 * the operators need), selects, local variables, and calls to the
 * project's GEMM and convolution (codegen/kernels). Its semantics are C's:
 * the builder below applies C's integer promotions and usual arithmetic
 * conversions when it makes an expression, and records every conversion
 * as an explicit cast, so the backends never convert implicitly. */

/* Scalar types of expressions and elements (an ONNX bool is stored as
 * uint8). CG_T_BOOL is the result of a comparison or a logical operator (C's
 * int 0 or 1). */
typedef enum cg_ty {
  CG_T_VOID, CG_T_BOOL, CG_T_I8, CG_T_U8, CG_T_I16, CG_T_U16, CG_T_I32, CG_T_U32,
  CG_T_I64, CG_T_U64, CG_T_F32, CG_T_F64, CG_T_PTR
} cg_ty;

cg_ty cg_ty_of(ap_dtype t);                /* CG_T_VOID for types kernels do not support */
const char *cg_ty_c(cg_ty t);              /* "float", "int64_t", "int" (bool) */
bool cg_ty_float(cg_ty t);
bool cg_ty_signed(cg_ty t);                /* signed integer types */
int cg_ty_bits(cg_ty t);

typedef enum cg_xop {
  CG_X_CONST,      /* i (integers, bool) or f (floats) */
  CG_X_VAR,        /* local variable id */
  CG_X_PARAM,      /* pointer parameter (role, slot) */
  CG_X_DATA,       /* pointer to constant table id of the kernel */
  CG_X_LOAD,       /* a[0][a[1]] */
  CG_X_INDEX,      /* &a[0][a[1]] */
  CG_X_VIEW,       /* pointer a[0] read as pointer to elem (scratch reinterpreted) */
  CG_X_CAST,       /* a[0] converted to ty (C semantics) */
  CG_X_NEG, CG_X_NOT,
  CG_X_ADD, CG_X_SUB, CG_X_MUL, CG_X_DIV, CG_X_REM,
  CG_X_LT, CG_X_LE, CG_X_GT, CG_X_GE, CG_X_EQ, CG_X_NE,
  CG_X_AND, CG_X_OR, /* C's && and || (a[1] evaluated only when needed) */
  CG_X_MAX, CG_X_MIN, /* numpy's maximum and minimum: a NaN operand wins, else a[0] unless
                         a[1] is strictly beyond it */
  CG_X_SELECT,     /* a[0] ? a[1] : a[2] (only the chosen operand is evaluated) */
  CG_X_CALL        /* math function fn of a[0] (and a[1]) in ty: expf for float... */
} cg_xop;

/* The math functions of CG_X_CALL: X(ID, C name of the double version,
 * arity), in one list for every backend. The C backend appends "f" for the
 * float version (expf); each is the C library's function, with its
 * semantics (rint rounds halves to even in the default rounding mode, fmod
 * takes the dividend's sign), which an LLVM backend maps to its intrinsics
 * (llvm.exp, llvm.rint, frem...) or to the same library calls. Float tanh
 * is the exception: both backends call apk_tanhf (codegen/kernels/
 * apk_math.h, within 1.371 ulp), which vectorises. */
#define CG_FNS(X) \
  X(EXP, "exp", 1) X(LOG, "log", 1) X(SQRT, "sqrt", 1) X(TANH, "tanh", 1) X(ERF, "erf", 1) \
  X(FABS, "fabs", 1) X(POW, "pow", 2) X(SIN, "sin", 1) X(COS, "cos", 1)                     \
  X(FLOOR, "floor", 1) X(CEIL, "ceil", 1) X(RINT, "rint", 1) X(FMOD, "fmod", 2)

typedef enum cg_fn {
#define X(id, name, arity) CG_FN_##id,
  CG_FNS(X)
#undef X
} cg_fn;

/* The C name of fn's double version ("exp"). */
const char *cg_fn_name(cg_fn fn);

/* Who a pointer parameter is: forward inputs x<slot> and outputs y<slot>,
 * the gradients dy<slot> and dx<slot> of a backward kernel, the scratch,
 * and the operands of the loss and update kernels. */
typedef enum cg_role {
  CG_R_X, CG_R_Y, CG_R_DY, CG_R_DX, CG_R_WORK,
  CG_R_LABELS, CG_R_ALL_LABELS, CG_R_LOSS_W, CG_R_LOSS,  /* the loss kernel */
  CG_R_W, CG_R_G, CG_R_V, CG_R_LR                         /* the update kernel */
} cg_role;

typedef struct cg_x {
  uint8_t op;        /* cg_xop */
  uint8_t ty;        /* cg_ty of the value */
  uint8_t elem;      /* pointers: the element type */
  uint8_t fn;        /* CG_X_CALL: cg_fn */
  bool is_const;     /* pointers: to const elements */
  int16_t role, slot;/* CG_X_PARAM */
  int id;            /* CG_X_VAR, CG_X_DATA */
  int64_t i;         /* CG_X_CONST of an integer type */
  double f;          /* CG_X_CONST of a float type */
  struct cg_x *a[3];
} cg_x;

typedef enum cg_sop {
  CG_ST_DECL,   /* var = a[0] */
  CG_ST_SET,    /* var = a[0] (var is mutable) */
  CG_ST_STORE,  /* a[0][a[1]] = a[2] */
  CG_ST_FOR,    /* for (var = a[0]; var < a[1]; var++) body */
  CG_ST_IF,     /* if (a[0]) body else els */
  CG_ST_MEMCPY, /* memcpy(a[0], a[1], a[2] bytes) */
  CG_ST_MEMSET, /* memset(a[0], 0 or 1 (a[2]), a[1] bytes) */
  CG_ST_SGEMM,  /* apk_sgemm(ta, tb, m, n, k, alpha, A=a[0], lda, B=a[1], ldb, beta, C=a[2],
                   ldc, work=a[3]): iarg = {ta, tb, m, n, k, lda, ldb, ldc, pb}, farg = {alpha,
                   beta}; pb 1: B=a[1] is op(B) packed (CG_PACK_B), apk_sgemm_pb (tb, ldb
                   unused) */
  CG_ST_CONV,   /* apk_conv2d_<lib>(&conv, args...): the five or six pointers in args */
  CG_ST_PACK    /* a constant operand a[0] packed into a[1] as lib (cg_pack_kind) says */
} cg_sop;

/* How CG_ST_PACK packs (codegen/kernels, "Packed weights"). */
typedef enum cg_pack_kind {
  CG_PACK_B,    /* apk_pack_b_all(tb, k, n, a[0], ldb, a[1]): iarg = {tb, k, n, ldb, at};
                   a[0] is the constant's element at (a view of it read in place) */
  CG_PACK_CONV  /* apk_conv2d_pack_weights(&conv, a[0], a[1]): iarg = the conv's fields */
} cg_pack_kind;

/* The library functions of CG_ST_CONV. */
typedef enum cg_conv_fn {
  CG_CONV_FORWARD,          /* (x, w, bias or NULL, y, work) */
  CG_CONV_BACKWARD_DATA,    /* (dy, w, dx, work) */
  CG_CONV_BACKWARD_WEIGHTS, /* (x, dy, dw, dbias or NULL, work) */
  CG_CONV_FORWARD_PACKED    /* (x, w packed by CG_PACK_CONV, bias or NULL, y, work) */
} cg_conv_fn;

/* apk_conv2d's fields, in its order (codegen/kernels/kernels.h). */
enum { CG_CONV_FIELDS = 16 };

typedef struct cg_s {
  uint8_t op;          /* cg_sop */
  uint8_t lib;         /* CG_ST_CONV: cg_conv_fn */
  int var;             /* CG_ST_DECL, CG_ST_SET, CG_ST_FOR */
  int n_args;          /* CG_ST_CONV */
  cg_x *a[6];          /* operands; a NULL pointer operand is C's NULL */
  int64_t iarg[CG_CONV_FIELDS];
  double farg[2];
  struct cg_s *body, *els, *next;
} cg_s;

typedef struct cg_var {
  const char *name;    /* a hint for the printed name */
  uint8_t ty, elem;    /* elem: pointers */
  bool is_const;       /* pointers: to const elements */
  bool mut;            /* assigned after its declaration */
} cg_var;

/* A pointer parameter or the learning rate. */
typedef struct cg_param {
  uint8_t role, slot;
  uint8_t ty;          /* the element type (CG_R_LR: the scalar's) */
  bool is_const, is_restrict, scalar;
} cg_param;

/* A constant table a kernel reads (Constant's value). */
typedef struct cg_table {
  uint8_t ty;
  int64_t n;
  const void *data;    /* n elements of ty */
} cg_ktable;

/* One term of the scratch a kernel needs, in floats. */
typedef struct cg_work_term {
  bool conv;                       /* apk_conv2d_work_floats(&conv) */
  int64_t v[CG_CONV_FIELDS];       /* conv: its fields; else apk_sgemm_work_floats(m, n, k) */
} cg_work_term;

typedef struct cg_kir {
  const char *key;       /* operator, direction, element types, box sizes, attributes */
  cg_param *params;
  int n_params;
  cg_var *vars;
  int n_vars, cap_vars;
  cg_s *body;
  cg_ktable *tables;
  int n_tables, cap_tables;
  int64_t work_floats;   /* scratch: this many floats plus the terms */
  cg_work_term *work_terms;
  int n_work_terms, cap_work_terms;
  bool uses_lib;         /* calls apk_* */
} cg_kir;

/* Whether a kernel needs scratch (a work parameter). */
bool cg_kir_needs_work(const cg_kir *k);
/* Whether two kernels are the same program (parameters, statements,
 * tables, scratch). */
bool cg_kir_equal(const cg_kir *a, const cg_kir *b);

/* ---- lower.c: the program of steps ---------------------------------------
 *
 * Code generation lowers once and prints twice (DESIGN.md, "Pipeline"): the
 * annotated graph becomes, per device, a backend-neutral program of steps
 * (kernel calls on buffers of the device's memory, the transfers and
 * collectives of passes/distribute.h, phase marks), and every distinct
 * kernel a definition the backends print (print_c.c) or build. Inference and
 * training are the same lowering: a training program is the forward steps
 * followed by the loss, the backward steps (every forward transfer's
 * adjoint among them), the weights' gradient sums and the updates, run
 * --steps times. */

typedef enum cg_loss {
  CG_LOSS_SOFTMAX_CE,  /* softmax cross-entropy over the last axis of the final output
                          [..., classes] against int64 labels [...] (its shape without
                          the last axis: [N] for a classifier, [N, S] per token for a
                          language model), the mean over the labels that are not
                          CG_IGNORE_INDEX */
  CG_LOSS_WEIGHTED_SUM /* sum(w * y) of the final output y with a fed w of
                          y's shape: dL/dy = w, for gradient checks */
} cg_loss;

/* Labels equal to it count for nothing (PyTorch's CrossEntropyLoss default). */
enum { CG_IGNORE_INDEX = -100 };

typedef struct cg_lower_opts {
  bool train;              /* a training program; else inference */
  cg_loss loss;            /* training */
  double momentum;         /* SGD momentum mu (v = mu v + g; w -= lr v); 0: plain SGD */
  bool grad_inputs;        /* float graph inputs get gradients too (gradient checks) */
  bool export_grads;       /* extra outputs: the last step's loss (float64 "loss") and
                              the gradient of every differentiable graph input and
                              weight ("grad:NAME"); one device only */
  bool export_weights;     /* extra outputs after those: every trainable weight as the
                              last step left it, named as the weight, in value order */
  const char *model_name;  /* for the program's diagnostics ("mnist-8") */
  const char *device_kind; /* the one device's kind name when there is no plan ("cpu") */
  const ap_graph *priced;  /* as ap_codegen_opts' */
} cg_lower_opts;

/* Where a buffer lives on its device. */
typedef enum cg_storage {
  CG_NONE,
  CG_INPUT,  /* a run-time input, whole: the runtime's copy of input_N.pb */
  CG_CONST,  /* the constant blob (weights.bin) */
  CG_PARAM,  /* the writable copy of the device's boxes of the trainable weights */
  CG_MOM,    /* the momentum of a trainable weight */
  CG_ARENA,  /* the activation arena, planned from last use */
  CG_INBOX,  /* the device's box of a run-time input, packed once before the steps */
  CG_ALIAS,  /* another buffer's storage (Reshape, Identity...) */
  CG_PACKED  /* a constant operand (pack_of) as its kernel reads it (packed for the GEMM's
                micro-kernel, Winograd's transformed weights): written by the device's
                prep steps on its first run, kept for the later ones */
} cg_storage;

/* One buffer of a device: a box of a value (or a gradient or momentum of
 * one), or staging for a transfer. Buffer ids: value v is v, its gradient
 * NV + v, its momentum 2 NV + v, 3 NV the loss's fed operand (labels or
 * weights), and every id after those a box made for a reader (a slice, a
 * transferred box, a constant's box, an error to send back) or staging. */
typedef struct cg_buf {
  cg_storage st;
  ap_dtype dtype;
  int64_t bytes;
  int64_t offset;   /* into the blob, the params, the momentum, the inbox or the arena */
  int64_t src;      /* CG_PARAM: where the blob holds its initial value */
  int input_index;  /* CG_INPUT, CG_INBOX: the program input */
  int alias_of;     /* CG_ALIAS */
  int last_use;     /* the last step reading or writing it (through aliases) */
  bool placed;      /* CG_ARENA: offset assigned */
  int value;        /* the value it holds a box of; -1: staging */
  ap_dbox box;      /* which box of the value (the fed operand: of the logits) */
  bool slice;       /* a local slice of what the device holds (shared by its readers) */
  int pack_of;      /* CG_PACKED: the constant buffer it packs */
  int pack_kernel;  /* CG_PACKED: the kernel that packs it (its prep step's) */
} cg_buf;

typedef enum cg_phase {
  CG_PH_FORWARD, CG_PH_LOSS, CG_PH_BACKWARD, CG_PH_GRADIENT, CG_PH_UPDATE
} cg_phase;

typedef enum cg_step_kind {
  CG_S_KERNEL,    /* a kernel call: args are buffers or CG_ARG_* */
  CG_S_ZERO,      /* args[0] = 0 */
  CG_S_SLICE,     /* args[1] = its box of args[0], copied locally */
  CG_S_ADDBOX,    /* args[0] added into its box of args[1] (float32) */
  CG_S_XCHG,      /* the pieces of xfer from args[0] into args[1] (mode) */
  CG_S_ALLREDUCE  /* args[0] summed over the device's group of xfer, in place */
} cg_step_kind;

/* Where an exchange's received pieces go. */
typedef enum cg_xchg_mode {
  CG_XM_BOX,      /* into their boxes of args[1] */
  CG_XM_ADD,      /* packed one after another into the staging args[2], then added into
                     their boxes of args[1] */
  CG_XM_SUMMANDS  /* into args[1] holding one copy of args[0]'s box per summand (the
                     piece's summand's), its own included */
} cg_xchg_mode;

/* Kernel arguments that are not buffers. */
enum { CG_ARG_LOSS = -1, CG_ARG_LR = -2, CG_ARG_LABELS = -3 };

/* Which half of a communication step a step is: all of it, or the start
 * that posts its sends and the finish that takes its receives, which
 * overlap.c places apart (aprt_exchange_start, aprt_allreduce_start). */
typedef enum cg_half { CG_HALF_WHOLE, CG_HALF_START, CG_HALF_FINISH } cg_half;

typedef struct cg_step {
  cg_step_kind kind;
  cg_phase phase;
  int node;                 /* for the comment; -1 */
  int value;                /* for the comment; -1 */
  const char *what;         /* "forward", "backward", "transfer", "sgd"... */
  int kernel;               /* CG_S_KERNEL */
  int n_args;
  int *args;                /* buffers, CG_ARG_* */
  uint64_t writes;          /* bit a: args[a] is written */
  bool work;                /* CG_S_KERNEL: passes the workspace */
  bool reports_loss;        /* CG_S_KERNEL: the loss; aprt_step_loss follows */
  const ap_dxfer *xfer;
  cg_xchg_mode mode;        /* CG_S_XCHG */
  bool reverse;             /* CG_S_XCHG: every piece sent from its receiver to its sender */
  bool skip_local;          /* CG_S_XCHG: pieces a device sends itself are left out */
  int tag;                  /* communication steps: the message tag, equal on every device */
  uint8_t half;             /* communication steps: cg_half (overlap.c) */
  int row;                  /* the plan's row whose time the step is (cg_program's
                               rows); -1: none */
} cg_step;

/* An output a device writes after its steps: its box of the value. */
typedef struct cg_out {
  int index;        /* program output */
  int value;        /* for the shape; -1: the loss (a float64 scalar) */
  ap_dbox box;
  int buf;          /* CG_ARG_LOSS for the loss */
} cg_output;

typedef struct cg_device {
  int dev;
  cg_buf *bufs;
  int n_bufs, cap_bufs;
  cg_step *steps;
  int n_steps, cap_steps;
  /* Inference: steps run on the first run only, before the steps: packing
   * constant operands into their CG_PACKED buffers (kernels without
   * workspace, reading constants, in a memory of their own that later runs
   * find as that run left it). */
  cg_step *prep;
  int n_prep, cap_prep;
  cg_output *outs;
  int n_outs;
  int64_t arena_bytes, unshared_bytes, params_bytes, inbox_bytes, packed_bytes;
  uint64_t step_bytes;      /* bytes it sends in one step (or one inference run) */
} cg_device;

/* A program input or output as the runtime sees it (aprt_tensor_spec). */
typedef struct cg_spec {
  const char *name;
  ap_dtype dtype;
  int rank;
  int64_t dims[AP_MAX_RANK];
  int64_t classes, ignore;  /* int64 inputs: values in [0, classes), or ignore */
  int value;                /* the value it is; -1 for labels, loss weights, the loss */
} cg_spec;

/* A box of a constant (or of a weight's initial value) in weights.bin. */
typedef struct cg_blob_entry {
  int value;
  ap_dbox box;
  const ap_value *view;     /* the box's data (cg_const_view) */
  int64_t offset;
} cg_blob_entry;

typedef struct cg_program {
  ap_graph *g;
  const ap_dist *dist;
  cg_lower_opts o;
  int n_dev;
  cg_device *devs;
  cg_kir **kernels;         /* the distinct kernels, called cgk_<index> */
  int n_kernels, cap_kernels;
  bool needs_kernels_lib;   /* a kernel calls the project's GEMM or convolution */
  cg_blob_entry *blob;
  int n_blob, cap_blob;
  int64_t blob_bytes;
  cg_spec *inputs, *outputs;
  int n_inputs, n_outputs;
  int *bound_inputs;        /* per program input: the blob offset of the tensor bound at
                               compile time (the run must feed the same), or -1 */
  double *predicted_bytes;  /* per device: of an inference run (the distribution's
                               forward bytes) or of one training step (its steps') */
  double *plan_step_bytes;  /* training on several devices: the distribution's, per device */
  double predicted_step_time_s; /* training: the cost model's step time (the pricing
                                   plan's: g's, or o.priced's); 0: none */
  int n_rows;               /* the pricing plan's rows (its vertices), each program
                               times its steps by (aprt_row); 0: no plan */
  const char **row_names;   /* their nodes' names */
  double *row_time_s;       /* training: what the plan predicts for each row; NULL
                               for inference */
} cg_program;

/* Lowers g (after ap_run_pipeline; after ap_partition when the array has
 * several devices) to *out, in g's arena. Graph inputs that are not
 * initializers become the program's inputs, in graph order (input_N.pb);
 * inputs bound to constants before the pipeline stay inputs, checked at
 * run time against the bound values. A training program's inputs are then
 * followed by the labels (CE loss) or the loss weights; its outputs are the
 * graph's, then what export_grads and export_weights add. */
ap_status cg_lower(ap_graph *g, const cg_lower_opts *o, cg_program **out, ap_diag *d);

/* Buffer b of D with its aliases (CG_ALIAS) resolved. */
static inline int cg_buf_root(const cg_device *D, int b) {
  while (D->bufs[b].st == CG_ALIAS)
    b = D->bufs[b].alias_of;
  return b;
}

/* Whether the program's row (cg_step.row) changes at step si of D, where
 * the backends call aprt_row: at a step whose row differs from the step
 * before's, and at si == D->n_steps (the end) when the last step has a
 * row. Never without rows (p->n_rows 0). */
static inline bool cg_row_changes(const cg_program *p, const cg_device *D, int si) {
  if (!p->n_rows)
    return false;
  int before = si > 0 ? D->steps[si - 1].row : -1;
  return si < D->n_steps ? D->steps[si].row != before : before >= 0;
}

/* ---- overlap.c: communication placed to overlap computation ----------------- */

/* Splits D's exchanges and runs of all-reduces into start and finish halves
 * and moves each exchange's start up to where its source is computed and
 * its finish down to where its destination is first touched (cg_step.half),
 * before the arena is planned; without move, only the all-reduces are
 * split. false: out of memory. */
bool cg_overlap(cg_device *D, ap_arena *arena, bool move);

/* ---- fuse.c: fusion ------------------------------------------------------------ */

/* One operator a convolution's epilogue applies (fuse.c). */
typedef enum cg_epi_kind {
  CG_EPI_AFFINE,  /* BatchNormalization: y s + t per channel (what folding left) */
  CG_EPI_ADD,     /* a residual Add */
  CG_EPI_RELU,
  CG_EPI_CLIP,    /* lo, hi */
  CG_EPI_SIGMOID,
  CG_EPI_LEAKY    /* alpha in lo */
} cg_epi_kind;

typedef struct cg_epi_op {
  uint8_t kind;       /* cg_epi_kind */
  int node;           /* the operator absorbed */
  bool scale, shift;  /* CG_EPI_AFFINE: multiplies by the node's input 1, adds its input 2 */
  int slot;           /* CG_EPI_ADD: the Add's input slot of the residual */
  int value;          /* CG_EPI_ADD: the residual */
  double lo, hi;      /* CG_EPI_CLIP, CG_EPI_LEAKY */
} cg_epi_op;

enum { CG_EPI_MAX = 4 };
/* The extra inputs of a fused convolution kernel, after Conv's three. */
enum { CG_EPI_SLOT_SCALE = 3, CG_EPI_SLOT_SHIFT = 4, CG_EPI_SLOT_RESIDUAL = 5 };

typedef struct cg_epi {
  cg_epi_op ops[CG_EPI_MAX];
  int n_ops;
} cg_epi;

/* An element-wise expression one kernel computes element by element
 * (fuse.c): the epilogue of a MatMul or Gemm (register 0 is the product's
 * element), or one loop in place of a chain of element-wise operators (its
 * first node is ops[0], reading its own inputs). */
enum { CG_EW_MAX = 16 };
typedef enum cg_ew_arg_kind {
  CG_EWA_REG,    /* register reg: 0 the head's product, i + 1 ops[i]'s result */
  CG_EWA_CONST,  /* a constant scalar, as a literal */
  CG_EWA_SLOT    /* the kernel's input slot, indexed as bcast says */
} cg_ew_arg_kind;
typedef enum cg_ew_bcast {
  CG_EWB_SAME,   /* the output's shape: element o */
  CG_EWB_LAST,   /* a vector along the output's last axis: element j */
  CG_EWB_ROW,    /* the output's shape with last dim 1: element r (row) */
  CG_EWB_SCALAR  /* one element */
} cg_ew_bcast;
typedef struct cg_ew_arg {
  uint8_t kind, bcast;  /* cg_ew_arg_kind, cg_ew_bcast */
  int reg, slot;
  int in;               /* CG_EWA_SLOT: the input of the op's node it reads */
  double c;             /* CG_EWA_CONST */
} cg_ew_arg;
typedef struct cg_ew_op {
  int node, op;         /* the operator absorbed, its ap_op */
  int n_args;
  cg_ew_arg a[2];
  double alpha;         /* LeakyRelu */
} cg_ew_op;
typedef struct cg_ew {
  cg_ew_op ops[CG_EW_MAX];
  int n_ops;
  bool layer;           /* a MatMul/Gemm's epilogue; else ops[0] is the head itself */
} cg_ew;

typedef struct cg_fusion {
  int *head;          /* per node: the convolution, MatMul, Gemm or first element-wise
                         node whose kernel computes it, or -1 */
  cg_epi **chain;     /* per node: a convolution's epilogue, or NULL */
  cg_ew **expr;       /* per node: the element-wise expression its kernel computes, or NULL */
  uint8_t *trans_in;  /* per node: bit i, MatMul/Gemm input i is a Transpose's output read
                         in place: the Transpose's input, through strides and the GEMM's
                         trans flag */
  bool *in_place;     /* per node: a Transpose every reader reads in place; no kernel */
  int n_fused;        /* operators absorbed */
} cg_fusion;

/* Decides the fusion of a program (order: the nodes as every device runs
 * them; dist: NULL or one device for no constraint), folding
 * BatchNormalization constants into g's values; a training program's only
 * what its backward allows (fuse.c). ACCPAR_NO_FUSION=1 in the environment
 * turns it off (the comparisons of tests and benchmarks). */
ap_status cg_fuse_plan(ap_graph *g, const struct ap_dist *dist, const int *order,
                       int n_order, bool train, cg_fusion *f, ap_diag *d);
struct cg_kernel;
/* Transpose node t's permutation of its rank axes in perm. */
void cg_transpose_perm(const ap_node *t, int rank, int *perm);
/* The box of a Transpose's input (perm) its box b of the output covers. */
ap_dbox cg_box_before_perm(int rank, const int *perm, const ap_dbox *b);
/* Appends e to the convolution kernel k built. */
void cg_fuse_epilogue(struct cg_kernel *k, const cg_epi *e);
/* "fused bn+t relu...": for the step's comment and the kernel's key. */
const char *cg_fuse_describe(ap_graph *g, const cg_epi *e);
/* Emits e: after the MatMul/Gemm k built (e->layer), or as k's whole body. */
void cg_fuse_expr(struct cg_kernel *k, const cg_ew *e);
/* "fused add(x,v) tanh(r1)...": for the step's comment and the kernel's key. */
const char *cg_fuse_expr_describe(ap_graph *g, const cg_ew *e);

/* What a backend is told besides the program. */
typedef struct cg_emit_opts {
  bool emit_llvm;          /* llvm: also write OUTDIR/model.ll, the module as generated */
} cg_emit_opts;

/* ---- print_c.c: the C backend ------------------------------------------- */

/* Writes OUTDIR/kernels.h, kernels.c, dev<d>.c for every device, main.c and
 * weights.bin of p, each through a temporary and a rename (o may be NULL). */
ap_status cg_print_c(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                     ap_diag *d);
/* Writes OUTDIR/weights.bin, the blob of p. */
ap_status cg_write_blob(const cg_program *p, const char *outdir, ap_diag *d);

typedef struct ap_codegen_opts {
  const char *outdir;      /* created if missing; generated files are replaced */
  const char *model_name;  /* for the program's diagnostics ("mnist-8") */
  bool train;              /* a training program (codegen/train.h) */
  double momentum;         /* SGD momentum of a training program; 0: plain SGD */
  const char *device_kind; /* the one device's kind name ("cpu") */
  const ap_graph *priced;  /* the graph whose plan prices the program when g has none
                              (one device: a planned copy of g); NULL: g's plan */
} ap_codegen_opts;

/* cg_lower then cg_print_c; a training program exports its updated
 * weights. */
ap_status ap_codegen_c(ap_graph *g, const ap_codegen_opts *o, ap_diag *d);

typedef struct ap_build_opts {
  const char *outdir;
  const char *cc;          /* compiler command; NULL: $CC or "cc" */
  const char *cflags;      /* NULL: $CFLAGS or "-O3 -march=native" */
  const char *rt_include;  /* folder of accpar_rt.h */
  const char *rt_lib;      /* the runtime's static library */
  const char *kernels_dir; /* folder of codegen/kernels (gemm.c, conv.c) */
  const char *extra_libs;  /* libraries the runtime needs ("-lprotobuf-c -lpthread -lm") */
  int n_devices;           /* dev0.c .. dev<n-1>.c; 0 or 1: dev0.c alone */
} ap_build_opts;


/* ---- print_llvm.c: the LLVM backend (when built with LLVM) ---------------- */

/* print_llvm.c is linked, with libLLVM, into its own shared object
 * (accpar-llvm.so), which llvm_module.c loads on first use; these three
 * functions are defined there and called through cg_llvm_module. */

/* Writes OUTDIR/weights.bin, OUTDIR/model.o, the program of p as one LLVM
 * module (kernels, device programs, the aprt_program description; the
 * kernel library's functions declared) optimised with default<O3> for the
 * host CPU, and OUTDIR/kernels.o, the kernel library compiled at build
 * time; with o->emit_llvm also OUTDIR/model.ll, the module as generated
 * before the optimiser runs. */
ap_status cg_print_llvm(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                        ap_diag *d);
/* Links OUTDIR/model.o and kernels.o with the runtime into OUTDIR/model
 * (build.sh). */
ap_status cg_llvm_build(const ap_build_opts *b, ap_diag *d);

/* The runtime functions (accpar_rt.h) an LLVM module calls, with their
 * LLVM types spelled with the letters v (void), i (int), l and L (int64_t,
 * size_t, ptrdiff_t), f (float), d (double), p (a pointer), and "..." for
 * variadic ones: one list for the module's declarations (print_llvm.c) and
 * the JIT's symbols (accparc run). */
#define CG_LLVM_RT_EXTERNS(X)                                           \
  X(aprt_buffer, "p", "pil")                                          \
  X(aprt_buffer_new, "p", "pilp")                                     \
  X(aprt_fail, "i", "pip...")                                         \
  X(aprt_get_args, "p", "p")                                          \
  X(aprt_input, "p", "pi")                                            \
  X(aprt_output_box, "i", "pipp")                                     \
  X(aprt_step_loss, "i", "pid")                                       \
  X(aprt_exchange, "i", "ppippipli")                                  \
  X(aprt_exchange_start, "i", "ppipli")                               \
  X(aprt_exchange_finish, "i", "ppipli")                              \
  X(aprt_allreduce_sum, "i", "ppipLpi")                               \
  X(aprt_allreduce_start, "i", "ppipLpi")                             \
  X(aprt_allreduce_finish, "i", "ppipLpi")                            \
  X(aprt_box_pack, "v", "pppl")                                       \
  X(aprt_box_add_f32, "v", "ppp")                                     \
  X(aprt_phase_begin, "v", "pi")                                      \
  X(aprt_phase_end, "v", "p")                                         \
  X(aprt_row, "v", "pi")                                              \
  X(aprt_rank, "i", "p")                                              \
  X(aprt_size, "i", "p")                                              \
  X(aprt_main, "i", "ipp")

/* A function of the runtime the JIT resolves to the caller's copy. */
typedef struct cg_rt_symbol {
  const char *name;
  void (*addr)(void);
} cg_rt_symbol;
/* The runtime's aprt_main (the program is an aprt_program). */
typedef int (*cg_main_fn)(int argc, char **argv, const void *program);

/* Builds p's module as cg_print_llvm does, compiles it in memory with ORC
 * LLJIT (the runtime's functions resolved to syms, libc and libm to the
 * process's, the blob in memory) and runs main_fn(argc, argv, program);
 * *status is its exit status. Nothing is written but what argv asks. */
ap_status cg_llvm_run(const cg_program *p, const cg_rt_symbol *syms, int n_syms,
                      cg_main_fn main_fn, int argc, char **argv, int *status, ap_diag *d);

/* ---- llvm_module.c: loading the LLVM backend ---------------------------------- */

/* What accpar-llvm.so exports, as the symbol accpar_llvm_module. */
typedef struct cg_llvm_module {
  const char *version;     /* ACCPAR_VERSION_STRING of the build that made it */
  unsigned long abi;       /* CG_LLVM_MODULE_ABI of that build */
  ap_status (*print)(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                     ap_diag *d);                           /* cg_print_llvm */
  ap_status (*build)(const ap_build_opts *b, ap_diag *d);   /* cg_llvm_build */
  ap_status (*run)(const cg_program *p, const cg_rt_symbol *syms, int n_syms,
                   cg_main_fn main_fn, int argc, char **argv, int *status,
                   ap_diag *d);                             /* cg_llvm_run */
} cg_llvm_module;
/* The sizes of the structures the module reads from the caller's build:
 * a module of a build where one differs is refused, as one of another
 * version is. */
#define CG_LLVM_MODULE_ABI                                                          \
  ((unsigned long)sizeof(cg_program) << 40 ^ (unsigned long)sizeof(cg_kernel) << 28 ^ \
   (unsigned long)sizeof(cg_emit_opts) << 20 ^ (unsigned long)sizeof(ap_build_opts) << 10 ^ \
   (unsigned long)sizeof(cg_llvm_module))

/* The LLVM backend, loaded on the first call (llvm_module.c says from
 * where); NULL, with an AP_ERR_IO diagnostic naming file and the module,
 * if it cannot be loaded. */
const cg_llvm_module *cg_llvm_module_load(const char *file, ap_diag *d);

/* ---- backend.c: the backends the driver picks from -------------------------- */

typedef struct cg_backend {
  const char *name;        /* "c", "llvm" (--backend) */
  const char *missing;     /* NULL, or the package this accparc was built without */
  ap_status (*load)(const char *file, ap_diag *d); /* NULL, or loads what the backend needs
                                                    * (file: the model, for its diagnostic) */
  ap_status (*emit)(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                    ap_diag *d);
  ap_status (*build)(const ap_build_opts *b, ap_diag *d);
} cg_backend;

/* The backend called name, or NULL. */
const cg_backend *cg_backend_named(const char *name);
/* The lowering ap_codegen_c does for o (a training program exports its
 * updated weights). */
ap_status cg_lower_codegen(ap_graph *g, const ap_codegen_opts *o, cg_program **out, ap_diag *d);
/* cg_lower_codegen, then be's emit. */
ap_status ap_codegen(ap_graph *g, const ap_codegen_opts *o, const cg_backend *be,
                     const cg_emit_opts *eo, ap_diag *d);

/* ---- build.c ------------------------------------------------------------ */

/* The bound under which a program's sources compile as one unit:
 * ACCPAR_BUILD_UNITY_BYTES, else 256 KiB; AP_ERR_USAGE if the variable is
 * not a number of bytes. */
ap_status cg_build_unity_bound(long long *out, ap_diag *d);
/* Compiles OUTDIR's sources into OUTDIR/model (through OUTDIR/model.tmp and
 * a rename): sources within cg_build_unity_bound as one unit, larger ones
 * each on its own, in parallel, then linked; the commands are written to
 * OUTDIR/build.sh. On failure the
 * compiler's messages are left in OUTDIR/build.log, which the diagnostic
 * names. */
ap_status ap_codegen_build(const ap_build_opts *b, ap_diag *d);
/* Writes script (sh) as OUTDIR/name and runs it with its output in
 * OUTDIR/build.log; a failure names the log and the tool (cc). */
ap_status cg_run_build_script(const char *outdir, const char *name, const char *script,
                              const char *tool, ap_diag *d);

/* Which node inputs ONNX needs as constants to know shapes (Reshape's shape,
 * Slice's starts...). */
bool cg_input_needs_constant(ap_op op, int slot);
/* Binds DIR/input_N.pb (as ap_bind_inputs_dir) but keeps as constants only
 * the graph inputs some node needs constant; the others stay run-time
 * inputs, with the file's (concrete) shape. */
ap_status cg_bind_shape_inputs(ap_graph *g, const char *dir, ap_diag *d);

/* ---- emit_util.c: files, text, operands, the arena, main.c's parts ---- */

/* A growable text buffer: write to f; s and len hold the text once closed. */
typedef struct cg_text {
  char *s;
  size_t len;
  FILE *f;
} cg_text;

bool cg_text_open(cg_text *t);
/* Closes f (s stays the caller's to free); false when the text is incomplete. */
bool cg_text_close(cg_text *t);

/* "out of memory" about g's file. */
ap_status cg_oom(ap_graph *g, ap_diag *d);
/* Writes the whole of data to OUTDIR/name through a temporary file and a
 * rename. */
ap_status cg_write_file(ap_graph *g, ap_diag *d, const char *outdir, const char *name,
                        const void *data, size_t size);
/* Closes t, writes its text as cg_write_file and frees it. */
ap_status cg_write_text(ap_graph *g, ap_diag *d, const char *outdir, const char *name,
                        cg_text *t);
/* Creates dir unless it is a directory already. */
ap_status cg_make_dir(ap_diag *d, const char *dir);
/* Makes outdir ready for a program's files: created if missing, an older
 * OUTDIR/model removed; *blob_path is the absolute path of its weights.bin
 * (in g's arena). */
ap_status cg_prepare_outdir(ap_graph *g, ap_diag *d, const char *outdir, char **blob_path);

/* A C string literal of s. */
void cg_put_cstring(FILE *f, const char *s);
/* A comment-safe rendering of a name (no "*" "/" pairs). */
void cg_put_comment_name(FILE *f, const char *s);

/* The alignment of the arena, the blob and their parts. */
enum { CG_ALIGN = 64 };
int64_t cg_align_up(int64_t x);

/* A live block of an arena (offset, aligned size) holding id. */
typedef struct cg_block {
  int64_t offset, bytes;
  int id;
} cg_block;

/* First fit among the gaps between the *n_live live blocks (kept sorted by
 * offset; live has room for one more): the offset of bytes for id. */
int64_t cg_arena_alloc(cg_block *live, int *n_live, int64_t bytes, int id);
/* Removes id's block. */
void cg_arena_free(cg_block *live, int *n_live, int id);

/* main.c: the blob (blob_path) assembled into the executable as ap_blob. */
void cg_put_blob_asm(FILE *f, const char *blob_path);
/* device_names[]: the kinds of plan p (passes/passes.h) when it has n_dev
 * devices, or else device_kind (NULL: "cpu"). */
void cg_put_device_names(FILE *f, const void *p, int n_dev, const char *device_kind);
/* One aprt_tensor_spec initializer line (classes and ignore: see
 * accpar_rt.h). */
void cg_put_spec(FILE *f, const char *name, ap_dtype dt, int rank, const int64_t *dims,
                 int64_t classes, int64_t ignore);
/* run(): device aprt_rank(c) runs ap_device_<rank>. */
void cg_put_run(FILE *f, int n_dev);

/* ---- shared by the operator emitters (emit_util.c) ------------------------ */

/* A box: the indices [start, start + size) of a tensor, per dim. A device
 * computes a box of every output and holds a box of every input; on one
 * device every box is the whole tensor. */
typedef struct cg_box {
  int rank;
  int64_t start[AP_MAX_RANK];
  int64_t size[AP_MAX_RANK];
} cg_box;

/* One input or output of the node being emitted. */
typedef struct cg_operand {
  const ap_value *v;            /* NULL for an absent or omitted operand */
  ap_dtype dtype;
  int rank;
  int64_t dims[AP_MAX_RANK];    /* of the whole tensor */
  int64_t numel;                /* of the whole tensor */
  cg_box box;                   /* the part this device holds or computes */
} cg_operand;

enum { CG_MAX_OPERANDS = 64 };  /* inputs or outputs of one node (Concat, Split) */

struct ap_dbox; /* passes/distribute.h */
/* The operand an emitter sees: box b of v (NULL: an absent operand, all
 * zero) as a whole tensor of its own (kernels specialise to box sizes)
 * (emit_util.c). */
void cg_operand_of(const ap_value *v, const struct ap_dbox *b, cg_operand *o);
/* Box b of constant v as a value of its own (dims = the box's sizes, its
 * data sliced), in g's arena; v itself when b is whole. NULL: out of memory. */
const ap_value *cg_const_view(ap_graph *g, int v, const struct ap_dbox *b);
/* The aprt_box (runtime/accpar_rt.h) of box b inside the dense row-major
 * buffer of box within, its offset moved on by shift elements. */
typedef struct cg_rtbox {
  int rank;
  int64_t offset;
  int64_t size[AP_MAX_RANK], stride[AP_MAX_RANK];
} cg_rtbox;
cg_rtbox cg_rt_box(int rank, const struct ap_dbox *b, const struct ap_dbox *within,
                   int64_t shift);
/* The same as a C initializer ({rank, offset, {sizes}, {strides}}). */
void cg_put_box(FILE *f, int rank, const struct ap_dbox *b, const struct ap_dbox *within,
                int64_t shift);

/* What an emitter receives and fills for one node: it builds the body of
 * the node's kernel with the cg_* builder below. The kernel's parameters
 * are its inputs x<i> (cg_in), outputs y<i> (cg_out), the gradients dy<i>
 * and dx<i> of a backward kernel (cg_dy, cg_dx) and the scratch (cg_work);
 * which of them a kernel receives, and in what order, is the lowering's
 * business. */
enum { CG_MAX_DEPTH = 48 };    /* nested loops and ifs of one kernel */
typedef struct cg_kernel {
  ap_graph *g;
  const ap_node *n;
  ap_diag *d;
  int n_in, n_out;               /* slots, omitted ones included */
  cg_operand in[CG_MAX_OPERANDS];
  cg_operand out[CG_MAX_OPERANDS];
  uint64_t skip_in;              /* bit i: input i is read at compile time, not passed */
  uint8_t trans_in;              /* bit i: MatMul/Gemm input i is operand i permuted: */
  int perm_in[2][AP_MAX_RANK];   /* axis j of the input is axis perm_in[i][j] of the operand */
  int alias_in;                  /* >= 0: output 0 is input alias_in's storage; no kernel */
  bool backward;                 /* a backward kernel: it reads the outputs y<i> */
  /* The body being built. */
  cg_kir *ir;
  cg_s **tail;                   /* where the next statement goes */
  cg_s *open[CG_MAX_DEPTH];      /* the open loops and ifs, innermost last */
  cg_s **saved_tail[CG_MAX_DEPTH];
  int depth;
  bool oom;                      /* an allocation failed: the kernel is garbage */
  /* cg_map's loop */
  int map_out, map_n, map_o, map_loops;
  int map_arg[CG_MAX_OPERANDS];
  /* Constant operands read packed (cg_pack_operand): an inference program's
   * node kernel may read one input slot packed, as pack_kind and pack_iarg
   * say; lowering passes the CG_PACKED buffer in its place. */
  bool prepack;                  /* inference: constant operands may be packed */
  bool packed;
  int pack_slot;
  uint8_t pack_kind;             /* cg_pack_kind */
  int64_t pack_iarg[CG_CONV_FIELDS];
} cg_kernel;

typedef ap_status (*cg_emit_fn)(cg_kernel *k);

#define OP(id, ...) ap_status cg_emit_##id(cg_kernel *k);
#include "ir/ops.def"
#undef OP

/* A user error about the node being emitted: "FILE: node 'N' (OP): ...". */
ap_status cg_error(cg_kernel *k, ap_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The C type of an element ("float", "int64_t"; bool is "uint8_t"), or NULL. */
const char *cg_ctype(ap_dtype t);
bool cg_dtype_is_unsigned(ap_dtype t); /* unsigned integers and bool */
/* A C literal of value v in type t, exact for every finite float and double
 * ("0x1.8p+1f", "INFINITY"), written into buf of at least 64 bytes. */
const char *cg_literal(char *buf, ap_dtype t, double v);
/* Element i of a constant operand, or false when the operand has no data. */
bool cg_const_i64(const cg_operand *o, int64_t i, int64_t *out);
bool cg_const_f64(const cg_operand *o, int64_t i, double *out);
/* Whether input slot of k is one constant element equal to an integer n of
 * 1 to 4 (Pow's exponent: GELU's 3, a variance's 2), and n. */
bool cg_small_power(const cg_kernel *k, int slot, int *n);
/* x^n for n of 0 to 4 as products of x (x bound once). */
cg_x *cg_power(cg_kernel *k, cg_x *x, int n);
/* Row-major strides (in elements) of dims. */
void cg_strides(int rank, const int64_t *dims, int64_t *strides);
/* Strides of operand o broadcast (numpy rules) to an output of rank r and
 * dims: 0 along the dims o repeats. */
void cg_broadcast_strides(const cg_operand *o, int r, int64_t *strides);
/* The operator's ONNX opset version in this graph (default domain). */
int64_t cg_opset(const cg_kernel *k);
/* An axis attribute normalised to [0, rank), or -1 when out of range. */
int cg_norm_axis(int64_t axis, int rank);

/* ---- kir.c: the builder ------------------------------------------------------- */

/* Starts k's body in ir (zeroed). */
void cg_kernel_begin(cg_kernel *k, cg_kir *ir);

/* Constants: of type ty (floats rounded to it, integers saturated), C's
 * int, int64_t, uint64_t, float, double, and an element type's. */
cg_x *cg_const(cg_kernel *k, cg_ty ty, double v);
cg_x *cg_int(cg_kernel *k, int64_t v);
cg_x *cg_i64(cg_kernel *k, int64_t v);
cg_x *cg_u64(cg_kernel *k, uint64_t v);
cg_x *cg_f32(cg_kernel *k, double v);
cg_x *cg_f64(cg_kernel *k, double v);
cg_x *cg_lit(cg_kernel *k, ap_dtype t, double v);
/* The parameters: input, output, their gradients, the scratch (float), the
 * loss's and the update's operands, and the learning rate (a float). */
cg_x *cg_in(cg_kernel *k, int slot);
cg_x *cg_out(cg_kernel *k, int slot);
cg_x *cg_dy(cg_kernel *k, int slot);
cg_x *cg_dx(cg_kernel *k, int slot);
cg_x *cg_work(cg_kernel *k);
cg_x *cg_param_ptr(cg_kernel *k, cg_role role, cg_ty elem, bool is_const);
cg_x *cg_lr(cg_kernel *k);
/* A constant table of n elements of type t (data stays the caller's, in
 * the arena) and the pointer to it. */
int cg_table_add(cg_kernel *k, ap_dtype t, int64_t n, const void *data);
cg_x *cg_table(cg_kernel *k, int id);
/* Local variable var's value. */
cg_x *cg_v(cg_kernel *k, int var);
/* p[i] (an element), &p[i] (a pointer), p as a pointer to elem. */
cg_x *cg_ld(cg_kernel *k, cg_x *p, cg_x *i);
cg_x *cg_ldi(cg_kernel *k, cg_x *p, int64_t i);
cg_x *cg_at(cg_kernel *k, cg_x *p, cg_x *i);
cg_x *cg_view(cg_kernel *k, cg_x *p, cg_ty elem);
/* Operators with C's conversions; comparisons and logical operators are
 * conditions (CG_T_BOOL). */
cg_x *cg_bin(cg_kernel *k, cg_xop op, cg_x *a, cg_x *b);
cg_x *cg_add(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_sub(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_mul(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_div(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_lt(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_le(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_gt(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_ge(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_eq(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_ne(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_and(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_or(cg_kernel *k, cg_x *a, cg_x *b);
cg_x *cg_not(cg_kernel *k, cg_x *a);
cg_x *cg_neg(cg_kernel *k, cg_x *a);
cg_x *cg_cast(cg_kernel *k, cg_ty ty, cg_x *a);
cg_x *cg_sel(cg_kernel *k, cg_x *c, cg_x *a, cg_x *b);
/* numpy's maximum (max) or minimum of a and b converted to t. */
cg_x *cg_minmax(cg_kernel *k, bool max, cg_ty t, cg_x *a, cg_x *b);
/* fn of a in a's float type (expf of a float), in double (exp) whatever
 * a is, and of two operands (powf when both are float). */
cg_x *cg_fn1(cg_kernel *k, cg_fn fn, cg_x *a);
cg_x *cg_fnd(cg_kernel *k, cg_fn fn, cg_x *a);
cg_x *cg_fn2(cg_kernel *k, cg_fn fn, cg_x *a, cg_x *b);

/* Statements, appended where the builder is: a variable declared with its
 * initial value (cg_let: never assigned again; cg_mut: of type ty, assigned
 * with cg_set), stores converting to the element type (cg_st_op: p[i] = p[i]
 * op x), loops over [lo, hi) (cg_for_n: [0, n)) and ifs closed by cg_end,
 * memcpy/memset, the project's GEMM (C = alpha op(A) op(B) + beta C,
 * row-major and dense, with the scratch) and convolution kernels. */
int cg_let(cg_kernel *k, const char *name, cg_x *init);
int cg_mut(cg_kernel *k, const char *name, cg_ty ty, cg_x *init);
void cg_set(cg_kernel *k, int var, cg_x *x);
void cg_set_op(cg_kernel *k, int var, cg_xop op, cg_x *x);
void cg_st(cg_kernel *k, cg_x *p, cg_x *i, cg_x *x);
void cg_st_op(cg_kernel *k, cg_x *p, cg_x *i, cg_xop op, cg_x *x);
int cg_for(cg_kernel *k, const char *name, cg_x *lo, cg_x *hi);
int cg_for_n(cg_kernel *k, const char *name, int64_t n);
void cg_if(cg_kernel *k, cg_x *cond);
void cg_else(cg_kernel *k);
void cg_end(cg_kernel *k);
void cg_memcpy(cg_kernel *k, cg_x *dst, cg_x *src, cg_x *bytes);
void cg_memset(cg_kernel *k, cg_x *dst, int byte, cg_x *bytes);
void cg_sgemm(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk, double alpha,
              cg_x *a, cg_x *b, double beta, cg_x *c);
/* cg_sgemm with the leading dimensions of A and B given: a strided view. */
void cg_sgemm_ld(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk, double alpha,
                 cg_x *a, int64_t lda, cg_x *b, int64_t ldb, double beta, cg_x *c);
void cg_conv_call(cg_kernel *k, cg_conv_fn fn, const int64_t *conv, int n, cg_x *const *args);
/* Whether input slot of k (a float32 constant of an inference program) can
 * be read packed; when it can, records how (kind, iarg as CG_ST_PACK's) and
 * the caller reads the slot's pointer as the packed operand. */
bool cg_pack_operand(cg_kernel *k, int slot, cg_pack_kind kind, const int64_t *iarg, int n_iarg);
/* apk_sgemm_pb: cg_sgemm_ld with op(B) read packed from pb (cg_pack_operand's
 * CG_PACK_B of tb, kk, n). */
void cg_sgemm_pb(cg_kernel *k, int ta, int64_t m, int64_t n, int64_t kk, double alpha, cg_x *a,
                 int64_t lda, cg_x *pb, double beta, cg_x *c);
/* The pack kernel's statement: src packed into dst. */
void cg_pack_call(cg_kernel *k, cg_pack_kind kind, const int64_t *iarg, cg_x *src, cg_x *dst);
/* Scratch the kernel needs, in floats: a count, apk_sgemm's for (m, n, kk),
 * a convolution's (all three of its kernels). */
void cg_work_const(cg_kernel *k, int64_t floats);
void cg_work_sgemm(cg_kernel *k, int64_t m, int64_t n, int64_t kk);
void cg_work_conv(cg_kernel *k, const int64_t *conv);

/* sum of var[i] * strides[i] (terms with a zero stride dropped; 0 when
 * none is left), an int64. */
cg_x *cg_idx(cg_kernel *k, int rank, const int64_t *strides, const int *vars);
/* Opens a loop over [0, dims[i]) for every i < rank, outermost first, into
 * vars; cg_loops_end closes them. */
void cg_loops(cg_kernel *k, int rank, const int64_t *dims, const char *name, int *vars);
void cg_loops_end(cg_kernel *k, int rank);
/* y<out> = x element by element over output out's box, where x reads
 * cg_map_arg(k, j), the element of input slots[j] broadcast (numpy rules)
 * to the output: cg_map_begin opens the loops and loads the arguments,
 * cg_map_end stores x and closes them (c_ewise.c). */
void cg_map_begin(cg_kernel *k, int out, int n_args, const int *slots);
cg_x *cg_map_arg(cg_kernel *k, int j);
void cg_map_end(cg_kernel *k, cg_x *x);
/* The kernel adding the bias a partial layer left out once its partial sums
 * are resolved (k->n: the layer; k->in[0]: the bias's box, k->out[0]: the
 * output's): per channel for Conv and ConvTranspose, beta * C broadcast for
 * Gemm; x0 the bias, y0 the output (emit_util.c). */
void cg_emit_bias_add(cg_kernel *k);

/* ---- c_move.c ------------------------------------------------------------- */

/* Pad: the input index along an axis of dim elements (begin and end pads)
 * that output index i reads, ap_pad_source as an expression; in the
 * constant mode the index may fall outside, and *inside is the condition
 * that it does not (NULL: always inside). */
cg_x *cg_pad_source(cg_kernel *k, ap_pad_mode mode, cg_x *i, int64_t begin, int64_t end,
                    int64_t dim, cg_x **inside);

/* Tile: the input offset output element iv[] (loop variables over the
 * output's box) reads. */
cg_x *cg_tile_source(cg_kernel *k, const int64_t *repeats, const int *iv);
/* DepthToSpace, SpaceToDepth (k->n): the input offset output element
 * iv[] = (n, c, h, w) reads. */
cg_x *cg_depth_space_source(cg_kernel *k, const int *iv);
/* Trilu (k->n): an error unless k is known; then whether element iv[]
 * (loop variables over the input) is kept. */
ap_status cg_trilu_check(cg_kernel *k);
cg_x *cg_trilu_keep(cg_kernel *k, const int *iv);
/* OneHot (k->n): opens loops iv[] over the output's box, with *o its
 * element's offset (a counter the caller advances), and returns the
 * variable saying whether that element is on; -1 (and *s) on an error or
 * an empty output. The caller closes the loops. */
int cg_one_hot_begin(cg_kernel *k, int *axis, int *iv, int *o, ap_status *s);

/* Resize, Upsample: cg_resize_begin adds the index and weight tables of
 * k's kernel to it and returns the number of corners an output element
 * reads (1 for nearest, 2^ or 4^resized axes for linear or cubic); cg_resize_corner gives
 * corner c's input offset for output element iv[] and its weight (NULL for
 * nearest), tables what cg_resize_begin set. */
int cg_resize_begin(cg_kernel *k, void **tables, ap_status *s);
cg_x *cg_resize_corner(cg_kernel *k, const void *tables, const int *iv, int c, cg_x **weight);

/* ---- c_reduce.c ----------------------------------------------------------- */

/* Reduce*, ArgMax, ArgMin (k->n): reduced[i] for every dim of input 0, and
 * the number of elements each output element reads. */
ap_status cg_reduced_dims(cg_kernel *k, bool *reduced, int64_t *count);
/* The output's strides seen from input 0's indices (0 along reduced dims);
 * an error when the output's size disagrees. */
ap_status cg_reduce_strides(cg_kernel *k, const bool *reduced, int64_t *os);
/* TopK (k->n): its axis, K, and the sizes before and after the axis; an
 * error when K is not a constant. */
ap_status cg_top_k_params(cg_kernel *k, int *axis, int64_t *kk, int64_t *outer, int64_t *inner);
/* CumSum (k->n): its axis and attributes; an error when the axis is not a
 * constant. */
ap_status cg_cumsum_params(cg_kernel *k, int *axis, bool *exclusive, bool *reverse);
/* dst[] = (or, add, +=) the prefix sums of src[] (both shaped as input 0)
 * along axis, converted to ct. */
void cg_scan(cg_kernel *k, int axis, bool exclusive, bool reverse, cg_x *src, cg_x *dst,
             cg_ty ct, bool add);
/* ---- c_norm.c: InstanceNormalization, GroupNormalization,
 * LpNormalization, MeanVarianceNormalization ------------------------------ */

/* The groups one statistic covers: kept axes (outer loops) and the axes it
 * runs over (inner loops) of input 0's box, GroupNormalization's channels
 * seen as [G, C/G]; where the scale and bias are read. */
typedef struct cg_norm_groups {
  int nk, nr;                                    /* kept, normalized axes */
  int64_t kd[AP_MAX_RANK + 1], ks[AP_MAX_RANK + 1]; /* their dims and strides */
  int64_t rd[AP_MAX_RANK + 1], rs[AP_MAX_RANK + 1];
  int64_t m;                                     /* elements per group */
  int scale_k;        /* kept loop whose index times scale_mul picks the scale (-1: none) */
  int64_t scale_mul;
  bool scale_r;       /* plus the first inner loop's index (per-channel GroupNormalization) */
  int lp;             /* LpNormalization's p, else 0 */
  double eps;
} cg_norm_groups;
/* A group's statistics (double variables): mean (0 for Lp), inv (1 / the
 * divisor), sigma (MeanVarianceNormalization's sqrt(var), else -1). */
typedef struct cg_norm_vars {
  int mean, inv, sigma;
} cg_norm_vars;
ap_status cg_norm_groups_of(cg_kernel *k, cg_norm_groups *ng);
/* Opens the kept loops (variables kv); returns the group's base offset.
 * cg_loops_end(k, ng->nk) closes them. */
int cg_norm_open(cg_kernel *k, const cg_norm_groups *ng, int *kv);
/* Opens the inner loops (rv); returns the element's offset.
 * cg_loops_end(k, ng->nr) closes them. */
int cg_norm_inner(cg_kernel *k, const cg_norm_groups *ng, int base, int *rv);
/* The scale and bias index inside both loops. */
cg_x *cg_norm_scale_index(cg_kernel *k, const cg_norm_groups *ng, const int *kv, const int *rv);
/* The statistics of the group at base, from x0. */
void cg_norm_stats(cg_kernel *k, const cg_norm_groups *ng, int base, cg_norm_vars *v);

/* ---- c_layer.c ------------------------------------------------------------ */

/* The spatial window of a convolution or pool: kernel, strides, dilations
 * and the begin/end pads with auto_pad resolved, for nsp dims after N, C. */
typedef struct cg_win {
  int nsp;
  int64_t kernel[AP_MAX_RANK], stride[AP_MAX_RANK], dilation[AP_MAX_RANK];
  int64_t pad_begin[AP_MAX_RANK], pad_end[AP_MAX_RANK];
} cg_win;

/* Reads the window of node k for input x and output y. kernel_from gives the
 * kernel when kernel_shape is absent (Conv's weight), or NULL. */
ap_status cg_window(cg_kernel *k, const cg_operand *x, const cg_operand *y,
                    const cg_operand *kernel_from, bool has_dilations, cg_win *w);

/* ConvTranspose's geometry (nsp = x->rank - 2 entries each): kernel, strides,
 * dilations and the begin pad with auto_pad/output_shape resolved. */
void cg_conv_transpose_geometry(const cg_kernel *k, const cg_operand *x, const cg_operand *wt,
                                const cg_operand *y, int64_t *kernel, int64_t *stride,
                                int64_t *dil, int64_t *pad_begin);

/* ---- c_layer.c, c_move.c, c_norm.c: geometry shared with the backward ---- */

/* The apk_conv2d fields of a 2-d convolution, in its order (c_layer.c). */
void cg_conv2d_params(int64_t *conv, const cg_operand *x, const cg_operand *wt, int64_t group,
                      const cg_win *w);
/* Transpose's input strides in output order (perm, default reversed), into
 * st (c_move.c). */
ap_status cg_transpose_strides(cg_kernel *k, const cg_operand *x, int64_t *st);
/* Softmax and LogSoftmax over x: outer rows of n elements spaced inner
 * apart (the opset < 13 coercion to 2-d included) (c_norm.c). */
ap_status cg_softmax_geometry(cg_kernel *k, const cg_operand *x, int64_t *outer, int64_t *n,
                              int64_t *inner);

/* ---- c_move.c: Gather's index, shared with its gradient ------------------ */

/* Inside a loop over j, the indices' elements: a new variable holding the
 * row of x's box that index x1[j] names (negative indices count from the
 * whole tensor's end; outside [0, box size) when the index is outside the
 * box). */
int cg_gather_index(cg_kernel *k, const cg_operand *x, int axis, int j);
/* GatherElements, ScatterElements: the offset in operand t of the element
 * at loop variables iv (over operand from's box) with the axis's index
 * replaced by variable at. */
cg_x *cg_elements_offset(cg_kernel *k, const cg_operand *t, const cg_operand *from, int axis,
                         const int *iv, int at);
/* Whether variable at lies in [0, dim). */
cg_x *cg_in_axis(cg_kernel *k, int at, int64_t dim);
/* GatherND, ScatterND: data [B..., D...] (a device's batch slab, ir/axes.c
 * rule ND), indices [B..., M..., width]. */
typedef struct cg_nd_geom {
  int b, width;                                /* batch_dims, the tuples' length */
  int64_t batches, tuples, block, per_batch;   /* elements */
  int64_t xs[AP_MAX_RANK];                     /* data's strides */
} cg_nd_geom;
ap_status cg_nd_geometry(cg_kernel *k, cg_nd_geom *g);
/* Opens the loops over batches and tuples (*t: the tuple's number) and
 * returns the variable holding the data offset of the tuple's block; *ok
 * is a variable that is 0 when a component lies outside its axis. Two
 * cg_end close the loops. */
int cg_nd_open(cg_kernel *k, const cg_nd_geom *g, int *t, int *ok);

/* ---- c_pool.c: window loops, shared by pooling and its gradient ----------- */

/* The variables of a pooling kernel's loops. */
typedef struct cg_wloops {
  int o;                      /* the output's flat index, counted by the kernel */
  int nc;                     /* image and channel */
  int ov[AP_MAX_RANK];        /* output position */
  int kv[AP_MAX_RANK];        /* kernel tap */
  int p[AP_MAX_RANK];         /* input position of the tap */
} cg_wloops;

/* Declares o = 0 and opens the loops over (N*C, output positions). */
void cg_win_open(cg_kernel *k, const cg_operand *x, const cg_operand *y, const cg_win *w,
                 cg_wloops *l);
/* Closes them. */
void cg_win_close(cg_kernel *k, const cg_win *w);
/* Opens the loops over the kernel taps and defines p<i>, the input
 * position of tap k<i> at output o<i>; closed with cg_loops_end(k, nsp). */
void cg_win_taps(cg_kernel *k, const cg_win *w, cg_wloops *l);
/* Whether the tap lies in [-pad_lo, in + pad_hi) (padded) or inside the
 * input. */
cg_x *cg_win_inside(cg_kernel *k, const cg_operand *x, const cg_win *w, bool padded,
                    const cg_wloops *l);
/* x's element index at input position p within image/channel nc. */
cg_x *cg_win_x_index(cg_kernel *k, const cg_operand *x, int nsp, const cg_wloops *l);

#endif
