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

/* ---- emit_c.c ----------------------------------------------------------- */

typedef struct ap_codegen_opts {
  const char *outdir;      /* created if missing; generated files are replaced */
  const char *model_name;  /* for the program's diagnostics ("mnist-8") */
  bool train;              /* a training program (one device so far: codegen/train.h) */
  double momentum;         /* SGD momentum of a training program; 0: plain SGD */
  const char *device_kind; /* the one device's kind name ("cpu") */
} ap_codegen_opts;

/* Writes OUTDIR/kernels.h, kernels.c, dev<d>.c for every device, main.c and
 * weights.bin for g (after ap_run_pipeline, and after ap_partition when the
 * array has several devices: each device computes its box of every value,
 * passes/distribute.h). Graph inputs that are not initializers become the
 * program's inputs, in graph order (input_N.pb); inputs bound to constants
 * before the pipeline stay inputs, checked at run time against the bound
 * values. Files are written to temporaries and renamed. */
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


/* ---- build.c ------------------------------------------------------------ */

/* Compiles OUTDIR's sources into OUTDIR/model (through OUTDIR/model.tmp and
 * a rename); the command is written to OUTDIR/build.sh. On failure the
 * compiler's messages are left in OUTDIR/build.log, which the diagnostic
 * names. */
ap_status ap_codegen_build(const ap_build_opts *b, ap_diag *d);

/* Which node inputs ONNX needs as constants to know shapes (Reshape's shape,
 * Slice's starts...). */
bool cg_input_needs_constant(ap_op op, int slot);
/* Binds DIR/input_N.pb (as ap_bind_inputs_dir) but keeps as constants only
 * the graph inputs some node needs constant; the others stay run-time
 * inputs, with the file's (concrete) shape. */
ap_status cg_bind_shape_inputs(ap_graph *g, const char *dir, ap_diag *d);

/* ---- emit_util.c: shared by the inference and training emitters ---- */

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

/* The distinct kernels of a program: cgk_<i>(sig) { body }, needing work
 * (a C expression of floats of scratch, "" for none). */
typedef struct cg_kernel_text {
  char *sig, *body, *work;
} cg_kernel_text;

typedef struct cg_kernel_set {
  cg_kernel_text *k;
  int n, cap;
} cg_kernel_set;

/* The index of kernel (sig, body), added unless an identical one is there;
 * takes ownership of both (malloc'd). work NULL is "". -1: out of memory. */
int cg_add_kernel(ap_graph *g, cg_kernel_set *ks, char *sig, char *body, const char *work);
/* Frees the sig and body of every kernel (the rest is arena memory). */
void cg_kernel_set_free(cg_kernel_set *ks);
/* Writes OUTDIR/kernels.h and kernels.c (the project's GEMM and convolution
 * included when needs_kernels_lib); training names the program's kind in
 * the heading. */
ap_status cg_write_kernels(ap_graph *g, ap_diag *d, const char *outdir, const cg_kernel_set *ks,
                           bool needs_kernels_lib, bool training);

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

/* ---- shared by the operator emitters (emit_c.c) -------------------------- */

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
/* Writes an aprt_box initializer of box b inside the dense row-major buffer
 * of box within ({rank, offset, {sizes}, {strides}}), the offset moved on by
 * shift elements. */
void cg_put_box(FILE *f, int rank, const struct ap_dbox *b, const struct ap_dbox *within,
                int64_t shift);

/* What an emitter receives and fills for one node. */
typedef struct cg_kernel {
  ap_graph *g;
  const ap_node *n;
  ap_diag *d;
  int n_in, n_out;               /* slots, omitted ones included */
  cg_operand in[CG_MAX_OPERANDS];
  cg_operand out[CG_MAX_OPERANDS];
  FILE *body;                    /* the kernel's body; parameters x<i> (inputs), y<i> (outputs), work */
  uint64_t skip_in;              /* bit i: input i is read at compile time, not passed */
  char work_expr[1536];          /* C expression (size_t) of the floats of scratch the kernel
                                    needs, evaluated in kernels.c; "" for none. The kernel
                                    receives it as float *work */
  int alias_in;                  /* >= 0: output 0 is input alias_in's storage; no kernel */
  bool needs_kernels_lib;        /* the body calls apk_* (codegen/kernels) */
} cg_kernel;

typedef ap_status (*cg_emit_fn)(cg_kernel *k);

#define OP(id, ...) ap_status cg_emit_##id(cg_kernel *k);
#include "ir/ops.def"
#undef OP

/* A user error about the node being emitted: "FILE: node 'N' (OP): ...". */
ap_status cg_error(cg_kernel *k, ap_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends to the kernel body. */
void cg_printf(cg_kernel *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The C type of an element ("float", "int64_t"; bool is "uint8_t"), or NULL. */
const char *cg_ctype(ap_dtype t);
bool cg_dtype_is_unsigned(ap_dtype t); /* unsigned integers and bool */
/* A C literal of value v in type t, exact for every finite float and double
 * ("0x1.8p+1f", "INFINITY"), written into buf of at least 64 bytes. */
const char *cg_literal(char *buf, ap_dtype t, double v);
/* Element i of a constant operand, or false when the operand has no data. */
bool cg_const_i64(const cg_operand *o, int64_t i, int64_t *out);
bool cg_const_f64(const cg_operand *o, int64_t i, double *out);
/* Row-major strides (in elements) of dims. */
void cg_strides(int rank, const int64_t *dims, int64_t *strides);
/* Opens `for (int64_t <var>K = 0; <var>K < dims[K]; <var>K++) {` for every
 * K < rank; cg_loops_close closes them. */
void cg_loops_open(cg_kernel *k, int rank, const int64_t *dims, const char *var);
void cg_loops_close(cg_kernel *k, int rank);
/* Writes "<var>0*s0 + <var>1*s1 ..." (terms with a zero stride dropped; "0"
 * when none is left) into buf of size cap. */
const char *cg_index(char *buf, size_t cap, int rank, const int64_t *strides,
                     const char *var);
/* Strides of operand o broadcast (numpy rules) to an output of rank r and
 * dims: 0 along the dims o repeats. */
void cg_broadcast_strides(const cg_operand *o, int r, int64_t *strides);
/* y<out> = expr, element by element over output out's box, where expr
 * reads a<j>, the element of input slots[j] broadcast (numpy rules) to the
 * output (c_ewise.c). */
void cg_map(cg_kernel *k, int out, int n_args, const int *slots, const char *expr);
/* The operator's ONNX opset version in this graph (default domain). */
int64_t cg_opset(const cg_kernel *k);
/* An axis attribute normalised to [0, rank), or -1 when out of range. */
int cg_norm_axis(int64_t axis, int rank);
/* The kernel adding the bias a partial layer left out once its partial sums
 * are resolved (k->n: the layer; k->in[0]: the bias's box, k->out[0]: the
 * output's): per channel for Conv and ConvTranspose, beta * C broadcast for
 * Gemm. Body into k->body; the signature (x0 the bias, y0 the output) into
 * sig. */
void cg_emit_bias_add(cg_kernel *k, FILE *sig);
/* The bias-add kernel of layer n added to ks (emit_util.c): output y's box
 * ybox, bias b's box bbox (b a constant's view when sliced); k is scratch.
 * The kernel's index, or -1 when out of memory. */
int cg_bias_kernel(ap_graph *g, ap_diag *d, cg_kernel_set *ks, cg_kernel *k, const ap_node *n,
                   const ap_value *y, const struct ap_dbox *ybox, const ap_value *b,
                   const struct ap_dbox *bbox);

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

/* The apk_conv2d initializer of a 2-d convolution (c_layer.c). */
void cg_conv2d_params(char *buf, size_t cap, const cg_operand *x, const cg_operand *wt,
                      int64_t group, const cg_win *w);
/* Transpose's input strides in output order (perm, default reversed), into
 * st (c_move.c). */
ap_status cg_transpose_strides(cg_kernel *k, const cg_operand *x, int64_t *st);
/* Softmax and LogSoftmax over x: outer rows of n elements spaced inner
 * apart (the opset < 13 coercion to 2-d included) (c_norm.c). */
ap_status cg_softmax_geometry(cg_kernel *k, const cg_operand *x, int64_t *outer, int64_t *n,
                              int64_t *inner);

/* ---- c_move.c: Gather's index, shared with its gradient ------------------ */

/* Inside loops over j, the indices' elements: `at`, the row of x's box that
 * index x1[j] names (negative indices count from the whole tensor's end;
 * outside [0, box size) when the index is outside the box). */
void cg_gather_index(cg_kernel *k, const cg_operand *x, int axis);

/* ---- c_pool.c: window loops, shared by pooling and its gradient ----------- */

/* Opens the loops over (N*C, output positions o<i>) of a pooling kernel. */
void cg_win_open(cg_kernel *k, const cg_operand *x, const cg_operand *y, const cg_win *w);
/* Opens the loops over the kernel taps k<i> and defines p<i>, the input
 * position of tap k<i> at output o<i>. */
void cg_win_taps(cg_kernel *k, const cg_win *w);
/* "p0 >= lo0 && p0 < hi0 && ...": the tap lies in [-pad_lo, in + pad_hi)
 * (padded) or inside the input. */
void cg_win_inside(cg_kernel *k, const cg_operand *x, const cg_win *w, bool padded);
/* x's element at input position p within image/channel nc. */
void cg_win_x_index(cg_kernel *k, const cg_operand *x, int nsp);

#endif
