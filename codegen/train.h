/* Training: the internal header of the training part of code generation,
 * sectioned by source file.
 *
 * From a verified, shape-inferred graph, train.c derives the training
 * schedule (which values are trainable, which carry a gradient, which
 * backward steps run and in what order, where gradients of a value with
 * several consumers accumulate), which the lowering (lower.c) turns into the
 * steps of a training program. The
 * backward kernel of each operator comes from one file per operator family
 * (c_grad_layer.c, c_grad_ewise.c, c_grad_pool.c, c_grad_norm.c,
 * c_grad_reduce.c, c_grad_move.c), each with a static table keyed by ap_op.
 * docs/training.md describes the generated program. */
#ifndef ACCPAR_CODEGEN_TRAIN_H
#define ACCPAR_CODEGEN_TRAIN_H

#include "codegen/codegen.h"

/* ---- train.c: the schedule ----------------------------------------------- */

/* One backward step: the backward kernel of one forward node. */
typedef struct cg_grad_step {
  int node;
  uint64_t want;   /* bit i: produce the gradient of input slot i */
  uint64_t acc;    /* bit i: add into that gradient (an earlier step wrote it) */
  uint64_t has_dy; /* bit i: output i carries a gradient (the others are zero) */
} cg_grad_step;

typedef struct cg_train_schedule {
  int logits;          /* the value the loss reads (graph output 0) */
  bool *trainable;     /* per value: a float initializer (AP_VAL_WEIGHT) a step updates */
  bool *needs_grad;    /* per value: its gradient is computed */
  bool *kept;          /* per value: a backward step reads its forward value */
  cg_grad_step *steps; /* in reverse topological order */
  int n_steps;
} cg_train_schedule;

/* Derives the schedule. grad_inputs makes float graph inputs (not only the
 * trainable weights) differentiable, for gradient checks. A node on the
 * gradient path whose operator has no backward kernel is a user error. */
ap_status cg_train_schedule_build(ap_graph *g, bool grad_inputs, cg_train_schedule *s,
                                  ap_diag *d);

/* ---- print_c.c: a training program in C ------------------------------------ */

typedef struct cg_train_opts {
  const char *outdir;      /* created if missing; generated files are replaced */
  const char *model_name;  /* for the program's diagnostics */
  const char *device_kind; /* the one device's kind name ("cpu") */
  cg_loss loss;
  double momentum;         /* SGD momentum mu (v = mu v + g; w -= lr v); 0: plain SGD */
  bool grad_inputs;        /* float graph inputs get gradients too (see the schedule) */
  bool export_grads;       /* see cg_lower_opts */
  bool export_weights;
} cg_train_opts;

/* Lowers g (after ap_run_pipeline; after ap_partition for several
 * devices) to a training program (cg_lower) and prints it as C in OUTDIR
 * (cg_print_c); ap_codegen_build builds it as an inference program. Each
 * step prints its loss (aprt_step_loss); the learning rate is the
 * program's --lr. */
ap_status cg_emit_train_program(ap_graph *g, const cg_train_opts *o, ap_diag *d);

/* ---- shared by the backward emitters -------------------------------------- */

/* What a backward emitter receives: the forward node's operands (k->in,
 * k->out) and the body to build. The kernel's parameters are x<i> (forward
 * input i), y<i> (forward output i), dy<i> (the gradient of output i, when
 * has_dy says so) and dx<i> (the gradient of input i, for every slot in
 * want): dx<i> is overwritten unless acc has bit i, in which case the kernel
 * adds to it. dx pointers are not restrict: two slots may name the same
 * value (Mul(x, x)), and then write the same buffer in slot order. */
typedef struct cg_grad_kernel {
  cg_kernel *k;
  uint64_t want, acc, has_dy;
  /* cg_grad_unbroadcast's loop */
  bool ub_reduces;
  int ub_o, ub_i, ub_j[AP_MAX_RANK];
} cg_grad_kernel;

typedef ap_status (*cg_grad_fn)(cg_grad_kernel *gk);

/* The backward of one operator. */
typedef struct cg_grad_op {
  cg_grad_fn emit;   /* NULL: the operator has no backward */
  uint64_t diff_in;  /* input slots that have a gradient */
  uint64_t reads_in; /* forward inputs the kernel reads (x<i>) */
  uint64_t reads_out;/* forward outputs the kernel reads (y<i>) */
  bool bilinear;     /* of inputs 0 and 1 (in reads_in), each is read only for
                        the other's gradient (Conv, Gemm, MatMul, Mul) */
} cg_grad_op;

/* The forward inputs the backward of op reads when it produces the
 * gradients of the slots in want. */
uint64_t cg_grad_reads_in(const cg_grad_op *op, uint64_t want);

/* One table per family, indexed by ap_op (zero entries for the others). */
extern const cg_grad_op cg_grad_ops_layer[AP_OP_COUNT];
extern const cg_grad_op cg_grad_ops_ewise[AP_OP_COUNT];
extern const cg_grad_op cg_grad_ops_pool[AP_OP_COUNT];
extern const cg_grad_op cg_grad_ops_norm[AP_OP_COUNT];
extern const cg_grad_op cg_grad_ops_reduce[AP_OP_COUNT];
extern const cg_grad_op cg_grad_ops_move[AP_OP_COUNT];

/* The backward of op from whichever family has it; NULL when none does. */
const cg_grad_op *cg_grad_op_of(ap_op op);

/* dx<slot>[i] = x, or += x when it accumulates. */
void cg_grad_put(cg_grad_kernel *gk, int slot, cg_x *i, cg_x *x);
/* dx<slot> = 0 over the input's elements unless it accumulates: for
 * kernels that scatter-add into dx. */
void cg_grad_zero(cg_grad_kernel *gk, int slot);
/* dx<slot> (=|+=) the sum of x over the dims along which input slot is
 * broadcast to output 0's shape: _begin opens a loop over the output's
 * elements, in which x may read cg_grad_o (the output's flat index) and
 * cg_grad_bcast (any input's element broadcast to that output element);
 * _end stores x and closes it. cg_grad_unbroadcast stores scale * dy0[o]
 * (or its negation; scale NULL: 1). */
void cg_grad_unbroadcast_begin(cg_grad_kernel *gk, int slot);
cg_x *cg_grad_o(cg_grad_kernel *gk);
cg_x *cg_grad_bcast(cg_grad_kernel *gk, int slot);
void cg_grad_unbroadcast_end(cg_grad_kernel *gk, int slot, cg_x *x);
void cg_grad_unbroadcast(cg_grad_kernel *gk, int slot, cg_x *scale, bool negate);
/* C = alpha op(A) op(B) + beta C, op(A) m x kk, op(B) kk x n, row-major and
 * dense (leading dims from the shapes), in the operands' element type:
 * apk_sgemm for float32 (the kernel's workspace must cover
 * apk_sgemm_work_floats(m, n, kk)), direct loops for float64. beta is 0 or 1. */
void cg_grad_gemm(cg_kernel *k, ap_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t kk,
                  double alpha, cg_x *a, cg_x *b, int beta, cg_x *c);

#endif
