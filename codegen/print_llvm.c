/* The LLVM backend: builds a lowered program (codegen.h, "lower.c") as one
 * LLVM module with the LLVM C API (llvm-15): every distinct kernel as a
 * function (cgk_N, its loop nest with C's semantics as print_c.c prints
 * them), the program of every device (ap_device_<d>, calling the runtime as
 * dev<d>.c does), and what main.c defines (the aprt_program description as
 * constant globals, run, main). The project's GEMM and convolution are not
 * in the module: they come as an object compiled once at build time
 * (gemm.c and conv.c by clang -O3, embedded in accparc: kernels_obj.c),
 * written beside model.o and linked with it, or added to the JIT; only the
 * convolution's packing is linked into the module, as bitcode, and
 * specialised for each convolution's constant description (conv_ops). The
 * module is verified, optimised with default<O3> for the host CPU and
 * written as OUTDIR/model.o, which cg_llvm_build links with kernels.o and
 * the runtime into OUTDIR/model; or it is run in memory through ORC LLJIT
 * (cg_llvm_run). */
#define _XOPEN_SOURCE 700
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/codegen.h"
#include "codegen/kernels/kernels.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

_Static_assert((int)AP_MAX_RANK == (int)APRT_MAX_RANK, "boxes of the IR and of the runtime differ");

/* What LLVM rejects is a bug of this backend, reported as an error of the
 * model (never a crash) with "internal error" in its line. */
#define CG_ERR_INTERNAL AP_ERR_UNSUPPORTED

/* The kernel library's object (codegen/kernels_obj.c). */
extern const unsigned char cg_kernels_obj[];
extern const unsigned long cg_kernels_obj_size;
/* The convolution's packing as bitcode (kernels/conv_spec.c, kernels_obj.c). */
extern const unsigned char cg_conv_spec_bc[];
extern const unsigned long cg_conv_spec_bc_size;

/* The functions a module calls: the runtime's (CG_LLVM_RT_EXTERNS,
 * codegen.h), the kernel library's (kernels.h) and libc's. */
#define CG_LLVM_EXTERNS(X)                                              \
  CG_LLVM_RT_EXTERNS(X)                                                 \
  X(memcmp, "i", "ppl")                                                 \
  X(apk_sgemm, "v", "iiiiifplplfplp")                                   \
  X(apk_sgemm_pb, "v", "iiiifplpfplp")                                 \
  X(apk_pack_b_all, "v", "iiiplp")                                      \
  X(apk_conv2d_pack_weights, "v", "ppp")                                \
  X(apk_sgemm_work_floats, "l", "iii")                                  \
  X(apk_conv2d_work_floats, "l", "p")                                   \
  X(apk_conv2d_forward_ops, "v", "ppppppp")                             \
  X(apk_conv2d_forward_packed_ops, "v", "ppppppp")                      \
  X(apk_conv2d_backward_data_ops, "v", "pppppp")                        \
  X(apk_conv2d_backward_weights_ops, "v", "ppppppp")

typedef enum ext_id {
#define EXT_ENUM(name, ret, params) EXT_##name,
  CG_LLVM_EXTERNS(EXT_ENUM)
#undef EXT_ENUM
  EXT_COUNT
} ext_id;

static const struct {
  const char *name, *ret, *params;
} ext_sig[] = {
#define EXT_SIG(name, ret, params) {#name, ret, params},
    CG_LLVM_EXTERNS(EXT_SIG)
#undef EXT_SIG
};
_Static_assert(sizeof ext_sig / sizeof *ext_sig == EXT_COUNT, "one signature per extern");

/* A math function of the kernels: its C names in double and float (the
 * functions print_c.c calls: libm's, or apk_math.h's where that has one),
 * or the intrinsic computing it exactly, and its operands. One line per
 * cg_fn; the switch has no default, so a new cg_fn does not compile until
 * it has its line. */
typedef struct math_fn {
  const char *f64, *f32;
  const char *intrinsic; /* "llvm.sqrt": correctly rounded as libm's, or NULL */
  int n_args;
} math_fn;

static math_fn math_of(cg_fn fn) {
  switch (fn) {
  case CG_FN_EXP: return (math_fn){"apk_exp", "apk_expf", NULL, 1}; /* conv_spec.c's */
  case CG_FN_LOG: return (math_fn){"log", "logf", NULL, 1};
  case CG_FN_SQRT: return (math_fn){"sqrt", "sqrtf", "llvm.sqrt", 1};
  case CG_FN_TANH: return (math_fn){"tanh", "apk_tanhf", NULL, 1}; /* conv_spec.c's */
  case CG_FN_ERF: return (math_fn){"erf", "erff", NULL, 1};
  case CG_FN_FABS: return (math_fn){"fabs", "fabsf", "llvm.fabs", 1};
  case CG_FN_POW: return (math_fn){"pow", "powf", NULL, 2};
  case CG_FN_SIN: return (math_fn){"sin", "sinf", NULL, 1};
  case CG_FN_COS: return (math_fn){"cos", "cosf", NULL, 1};
  case CG_FN_FLOOR: return (math_fn){"floor", "floorf", "llvm.floor", 1};
  case CG_FN_CEIL: return (math_fn){"ceil", "ceilf", "llvm.ceil", 1};
  case CG_FN_RINT: return (math_fn){"rint", "rintf", "llvm.rint", 1};
  case CG_FN_FMOD: return (math_fn){"fmod", "fmodf", NULL, 2};
  }
  ap_die("cg_fn %d has no math function", (int)fn);
}

/* The module being built. */
typedef struct lb {
  const cg_program *p;
  LLVMContextRef cx;
  LLVMModuleRef m;
  LLVMBuilderRef b;
  bool jit;                       /* no main, the blob an absolute symbol */
  LLVMTypeRef v, i1, i8, i16, i32, i64, f32, f64, ptr;
  LLVMTypeRef box_t, xfer_t, spec_t, prog_t, tensor_t, args_t, conv_t;
  LLVMValueRef ext[EXT_COUNT];
  LLVMTypeRef ext_t[EXT_COUNT];
  LLVMValueRef blob;              /* @ap_blob */
  LLVMValueRef *kernels;          /* cgk_N */
  LLVMValueRef work_floats;       /* cgk_work_floats */
  int n_globals;                  /* for names of constants */
} lb;

static LLVMTypeRef letter_type(const lb *L, char c) {
  switch (c) {
  case 'v': return L->v;
  case 'i': return L->i32;
  case 'l': case 'L': return L->i64;
  case 'f': return L->f32;
  case 'd': return L->f64;
  case 'p': return L->ptr;
  }
  ap_die("bad signature letter '%c'", c);
}

static void declare_externs(lb *L) {
  for (int e = 0; e < EXT_COUNT; e++) {
    LLVMTypeRef params[16];
    int n = 0;
    bool var = false;
    for (const char *c = ext_sig[e].params; *c; c++) {
      if (*c == '.') {
        var = true;
        break;
      }
      if ((unsigned char)*c >= 128) /* a stray byte would be a bug in the table */
        ap_die("bad signature of %s", ext_sig[e].name);
      params[n++] = letter_type(L, *c);
    }
    L->ext_t[e] = LLVMFunctionType(letter_type(L, ext_sig[e].ret[0]), params, (unsigned)n, var);
    L->ext[e] = LLVMAddFunction(L->m, ext_sig[e].name, L->ext_t[e]);
  }
}

static LLVMValueRef call_ext(lb *L, ext_id e, LLVMValueRef *args, int n) {
  return LLVMBuildCall2(L->b, L->ext_t[e], L->ext[e], args, (unsigned)n, "");
}

static LLVMValueRef c_i32(const lb *L, int64_t v) { return LLVMConstInt(L->i32, (uint64_t)v, 1); }
static LLVMValueRef c_i64(const lb *L, int64_t v) { return LLVMConstInt(L->i64, (uint64_t)v, 1); }

/* The C layouts the module's constants must have, checked against the
 * data layout once per module (an internal error if they differ). */
static void check_layout(LLVMTargetDataRef td, LLVMTypeRef t, const char *what, size_t size,
                         int n, const size_t *offsets) {
  if (LLVMABISizeOfType(td, t) != size)
    ap_die("LLVM's %s is %llu bytes, C's %zu", what, (unsigned long long)LLVMABISizeOfType(td, t),
           size);
  for (int i = 0; i < n; i++)
    if (LLVMOffsetOfElement(td, t, (unsigned)i) != offsets[i])
      ap_die("LLVM's %s has field %d at another offset than C's", what, i);
}

static void make_types(lb *L, LLVMTargetDataRef td) {
  LLVMContextRef cx = L->cx;
  L->v = LLVMVoidTypeInContext(cx);
  L->i1 = LLVMInt1TypeInContext(cx);
  L->i8 = LLVMInt8TypeInContext(cx);
  L->i16 = LLVMInt16TypeInContext(cx);
  L->i32 = LLVMInt32TypeInContext(cx);
  L->i64 = LLVMInt64TypeInContext(cx);
  L->f32 = LLVMFloatTypeInContext(cx);
  L->f64 = LLVMDoubleTypeInContext(cx);
  L->ptr = LLVMPointerTypeInContext(cx, 0);
  LLVMTypeRef dims = LLVMArrayType(L->i64, APRT_MAX_RANK);
  L->box_t = LLVMStructCreateNamed(cx, "aprt_box");
  LLVMTypeRef box_f[] = {L->i32, L->i64, dims, dims};
  LLVMStructSetBody(L->box_t, box_f, 4, 0);
  L->xfer_t = LLVMStructCreateNamed(cx, "aprt_xfer");
  LLVMTypeRef xfer_f[] = {L->i32, L->box_t};
  LLVMStructSetBody(L->xfer_t, xfer_f, 2, 0);
  L->spec_t = LLVMStructCreateNamed(cx, "aprt_tensor_spec");
  LLVMTypeRef spec_f[] = {L->ptr, L->i32, L->i32, dims, L->i64, L->i64};
  LLVMStructSetBody(L->spec_t, spec_f, 6, 0);
  L->prog_t = LLVMStructCreateNamed(cx, "aprt_program");
  LLVMTypeRef prog_f[] = {L->ptr, L->i32, L->ptr, L->i32, L->i32, L->ptr, L->i32, L->ptr,
                          L->ptr, L->ptr, L->ptr, L->ptr, L->i64, L->f64, L->i32, L->ptr,
                          L->ptr};
  LLVMStructSetBody(L->prog_t, prog_f, 17, 0);
  L->tensor_t = LLVMStructCreateNamed(cx, "aprt_tensor");
  LLVMTypeRef tensor_f[] = {L->i32, L->i32, dims, L->ptr};
  LLVMStructSetBody(L->tensor_t, tensor_f, 4, 0);
  L->args_t = LLVMStructCreateNamed(cx, "aprt_args");
  LLVMTypeRef args_f[] = {L->i32, L->i32, L->f32, L->i64, L->ptr, L->ptr, L->ptr, L->i32};
  LLVMStructSetBody(L->args_t, args_f, 8, 0);
  L->conv_t = LLVMArrayType(L->i32, CG_CONV_FIELDS);
  _Static_assert(sizeof(apk_conv2d) == CG_CONV_FIELDS * sizeof(int), "apk_conv2d is 16 ints");
#define OFF(T, f) offsetof(T, f)
  check_layout(td, L->box_t, "aprt_box", sizeof(aprt_box), 4,
               (size_t[]){OFF(aprt_box, ndim), OFF(aprt_box, offset), OFF(aprt_box, size),
                          OFF(aprt_box, stride)});
  check_layout(td, L->xfer_t, "aprt_xfer", sizeof(aprt_xfer), 2,
               (size_t[]){OFF(aprt_xfer, peer), OFF(aprt_xfer, box)});
  check_layout(td, L->spec_t, "aprt_tensor_spec", sizeof(aprt_tensor_spec), 6,
               (size_t[]){OFF(aprt_tensor_spec, name), OFF(aprt_tensor_spec, dtype),
                          OFF(aprt_tensor_spec, ndim), OFF(aprt_tensor_spec, dims),
                          OFF(aprt_tensor_spec, classes), OFF(aprt_tensor_spec, ignore)});
  check_layout(td, L->prog_t, "aprt_program", sizeof(aprt_program), 17,
               (size_t[]){OFF(aprt_program, name), OFF(aprt_program, ndev),
                          OFF(aprt_program, device_names), OFF(aprt_program, train),
                          OFF(aprt_program, n_inputs), OFF(aprt_program, inputs),
                          OFF(aprt_program, n_outputs), OFF(aprt_program, outputs),
                          OFF(aprt_program, predicted_step_bytes),
                          OFF(aprt_program, predicted_fixed_bytes), OFF(aprt_program, run),
                          OFF(aprt_program, constants), OFF(aprt_program, constants_bytes),
                          OFF(aprt_program, predicted_step_time_s),
                          OFF(aprt_program, n_rows), OFF(aprt_program, row_names),
                          OFF(aprt_program, predicted_row_time_s)});
  check_layout(td, L->tensor_t, "aprt_tensor", sizeof(aprt_tensor), 4,
               (size_t[]){OFF(aprt_tensor, dtype), OFF(aprt_tensor, ndim), OFF(aprt_tensor, dims),
                          OFF(aprt_tensor, data)});
  check_layout(td, L->args_t, "aprt_args", sizeof(aprt_args), 8,
               (size_t[]){OFF(aprt_args, transport), OFF(aprt_args, steps), OFF(aprt_args, lr),
                          OFF(aprt_args, seed), OFF(aprt_args, inputs_dir),
                          OFF(aprt_args, outputs_dir), OFF(aprt_args, report_path),
                          OFF(aprt_args, repeat)});
#undef OFF
}

/* A private constant global holding init, named prefix.N. */
static LLVMValueRef const_global(lb *L, const char *prefix, LLVMValueRef init, unsigned align) {
  char name[64];
  snprintf(name, sizeof name, "%s.%d", prefix, L->n_globals++);
  LLVMValueRef g = LLVMAddGlobal(L->m, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  if (align)
    LLVMSetAlignment(g, align);
  return g;
}

static LLVMValueRef cstring(lb *L, const char *s) {
  LLVMValueRef init = LLVMConstStringInContext(L->cx, s, (unsigned)strlen(s), 0);
  return const_global(L, "str", init, 1);
}

static LLVMValueRef i64_array(lb *L, int n, const int64_t *v) {
  LLVMValueRef e[APRT_MAX_RANK];
  for (int i = 0; i < n; i++)
    e[i] = c_i64(L, v[i]);
  for (int i = n; i < APRT_MAX_RANK; i++)
    e[i] = c_i64(L, 0);
  return LLVMConstArray(L->i64, e, APRT_MAX_RANK);
}

/* The aprt_box constant of cg_rt_box(rank, b, within, shift). */
static LLVMValueRef box_const(lb *L, int rank, const ap_dbox *b, const ap_dbox *within,
                              int64_t shift) {
  cg_rtbox r = cg_rt_box(rank, b, within, shift);
  LLVMValueRef f[] = {c_i32(L, rank), c_i64(L, r.offset), i64_array(L, rank, r.size),
                      i64_array(L, rank, r.stride)};
  return LLVMConstNamedStruct(L->box_t, f, 4);
}

static LLVMValueRef conv_const(lb *L, const int64_t *v) {
  LLVMValueRef e[CG_CONV_FIELDS];
  for (int i = 0; i < CG_CONV_FIELDS; i++)
    e[i] = c_i32(L, v[i]);
  return const_global(L, "conv", LLVMConstArray(L->i32, e, CG_CONV_FIELDS), 4);
}

/* The function of conv_spec.c's spec (apk_spec_*) for the constant
 * description conv: an internal function of the type apk_conv_ops gives it
 * (spec's parameters but the first) calling spec with conv, which the
 * optimiser inlines (spec is always_inline) and folds: the column matrix's
 * copies specialised for the convolution's shape, as GCC's interprocedural
 * constant propagation specialises them in a C program's kernels.c. */
static LLVMValueRef conv_spec_fn(lb *L, LLVMValueRef conv, const char *spec) {
  LLVMValueRef t = LLVMGetNamedFunction(L->m, spec);
  if (!t)
    ap_die("the convolution's bitcode has no %s", spec);
  LLVMTypeRef ft = LLVMGlobalGetValueType(t);
  unsigned n = LLVMCountParamTypes(ft);
  LLVMTypeRef pt[8];
  if (n < 1 || n > 8)
    ap_die("%s has %u parameters", spec, n);
  LLVMGetParamTypes(ft, pt);
  LLVMTypeRef wt = LLVMFunctionType(LLVMGetReturnType(ft), pt + 1, n - 1, 0);
  size_t len;
  char name[96];
  snprintf(name, sizeof name, "%s.%s", LLVMGetValueName2(conv, &len), spec + strlen("apk_spec_"));
  LLVMValueRef f = LLVMAddFunction(L->m, name, wt);
  LLVMSetLinkage(f, LLVMInternalLinkage);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(L->cx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(L->cx, f, "entry"));
  LLVMValueRef a[8];
  a[0] = conv;
  for (unsigned i = 1; i < n; i++)
    a[i] = LLVMGetParam(f, i - 1);
  LLVMBuildCall2(b, ft, t, a, n, "");
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  return f;
}

/* The apk_conv_ops of a call of kernel fn with the constant description
 * conv (fields v): the packing of the algorithm the library chooses for it
 * (apk_conv2d_choose, the same function of the same description at run
 * time), specialised; NULL where it packs nothing (a pointwise convolution,
 * Winograd). A member left NULL would be the library's generic function. */
static LLVMValueRef conv_ops(lb *L, LLVMValueRef conv, const int64_t *v, cg_conv_fn fn) {
  int f32[CG_CONV_FIELDS];
  for (int i = 0; i < CG_CONV_FIELDS; i++)
    f32[i] = (int)v[i];
  apk_conv2d c;
  memcpy(&c, f32, sizeof c);
  /* kernel 1x1, unit strides, no padding: col_g is x_g (conv.c). */
  if (c.kernel_h == 1 && c.kernel_w == 1 && c.stride_h == 1 && c.stride_w == 1 &&
      c.pad_top == 0 && c.pad_left == 0 && c.pad_bottom == 0 && c.pad_right == 0)
    return LLVMConstNull(L->ptr);
  bool forward = fn == CG_CONV_FORWARD || fn == CG_CONV_FORWARD_PACKED;
  apk_conv_kernel which = forward                       ? APK_CONV_FORWARD
                          : fn == CG_CONV_BACKWARD_DATA ? APK_CONV_BACKWARD_DATA
                                                        : APK_CONV_BACKWARD_WEIGHTS;
  apk_conv_algo algo =
      fn == CG_CONV_FORWARD_PACKED ? apk_conv2d_choose_packed(&c) : apk_conv2d_choose(&c, which);
  if (algo != APK_CONV_IMPLICIT && algo != APK_CONV_IM2COL)
    return LLVMConstNull(L->ptr);
  bool implicit = algo == APK_CONV_IMPLICIT;
  LLVMValueRef f[5];
  for (int i = 0; i < 5; i++)
    f[i] = LLVMConstNull(L->ptr);
  switch (fn) {
  case CG_CONV_FORWARD:
  case CG_CONV_FORWARD_PACKED:
    if (implicit)
      f[0] = conv_spec_fn(L, conv, "apk_spec_pack_col");
    else
      f[3] = conv_spec_fn(L, conv, "apk_spec_im2col");
    break;
  case CG_CONV_BACKWARD_DATA:
    if (implicit)
      f[2] = conv_spec_fn(L, conv, "apk_spec_store_col");
    else
      f[4] = conv_spec_fn(L, conv, "apk_spec_col2im");
    break;
  case CG_CONV_BACKWARD_WEIGHTS:
    if (implicit)
      f[1] = conv_spec_fn(L, conv, "apk_spec_pack_col_t");
    else
      f[3] = conv_spec_fn(L, conv, "apk_spec_im2col");
    break;
  }
  return const_global(L, "convops", LLVMConstStructInContext(L->cx, f, 5, 0), 8);
}

/* Links kernels/conv_spec.c's bitcode into L's module (its apk_spec_*
 * functions, which conv_spec_fn's functions call). */
static ap_status link_conv_spec(lb *L, ap_diag *d) {
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(
      (const char *)cg_conv_spec_bc, (size_t)cg_conv_spec_bc_size, "conv_spec.bc", 0);
  LLVMModuleRef src = NULL;
  LLVMBool bad = LLVMParseBitcodeInContext2(L->cx, buf, &src);
  LLVMDisposeMemoryBuffer(buf);
  if (bad || !src)
    return ap_error(d, CG_ERR_INTERNAL, L->p->g->path, NULL, NULL,
                    "internal error: LLVM cannot read the convolution's bitcode");
  /* clang's triple and layout for the host: the module's, spelled its way. */
  LLVMSetTarget(src, LLVMGetTarget(L->m));
  LLVMSetDataLayout(src, LLVMGetDataLayoutStr(L->m));
  if (LLVMLinkModules2(L->m, src))
    return ap_error(d, CG_ERR_INTERNAL, L->p->g->path, NULL, NULL,
                    "internal error: LLVM cannot link the convolution's bitcode");
  /* apk_math.h's functions: inlined where called, then dropped, not
   * exported. Without clang's target-cpu and target-features, which the
   * kernels do not carry (they get the target machine's), since the inliner
   * refuses a callee whose features it cannot prove the caller's (LLVM 15
   * spells the host's otherwise than clang): a call per element kept
   * GPT-2 tiny's loss at 2.5 times the C backend's. */
  static const char *const math[] = {"apk_tanhf", "apk_expf_reduced", "apk_expf", "apk_exp"};
  static const char *const target_attrs[] = {"target-cpu", "target-features", "tune-cpu"};
  for (size_t m = 0; m < sizeof math / sizeof *math; m++) {
    LLVMValueRef fn = LLVMGetNamedFunction(L->m, math[m]);
    if (!fn)
      ap_die("the convolution's bitcode has no %s", math[m]);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    for (size_t i = 0; i < sizeof target_attrs / sizeof *target_attrs; i++)
      LLVMRemoveStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, target_attrs[i],
                                       (unsigned)strlen(target_attrs[i]));
  }
  return AP_OK;
}

/* ---- kernels -------------------------------------------------------------- */

static LLVMTypeRef ty_of(const lb *L, cg_ty t) {
  switch (t) {
  case CG_T_VOID: return L->v;
  case CG_T_BOOL: return L->i32; /* C's int 0 or 1 */
  case CG_T_I8: case CG_T_U8: return L->i8;
  case CG_T_I16: case CG_T_U16: return L->i16;
  case CG_T_I32: case CG_T_U32: return L->i32;
  case CG_T_I64: case CG_T_U64: return L->i64;
  case CG_T_F32: return L->f32;
  case CG_T_F64: return L->f64;
  case CG_T_PTR: return L->ptr;
  }
  ap_die("bad cg_ty %d", (int)t);
}

/* One kernel being built. */
typedef struct kb {
  lb *L;
  const cg_kir *k;
  LLVMValueRef fn;
  LLVMValueRef *vars;    /* an alloca per variable */
  LLVMValueRef *tables;
} kb;

static LLVMValueRef ex(kb *K, const cg_x *x);

/* v of type from converted to type to, as C converts. */
static LLVMValueRef convert(kb *K, LLVMValueRef v, cg_ty from, cg_ty to) {
  LLVMBuilderRef b = K->L->b;
  if (from == to || from == CG_T_PTR || to == CG_T_PTR)
    return v;
  LLVMTypeRef t = ty_of(K->L, to);
  bool ff = cg_ty_float(from), ft = cg_ty_float(to);
  if (ff && ft)
    return cg_ty_bits(to) > cg_ty_bits(from) ? LLVMBuildFPExt(b, v, t, "")
                                             : LLVMBuildFPTrunc(b, v, t, "");
  if (ff)
    return cg_ty_signed(to) ? LLVMBuildFPToSI(b, v, t, "") : LLVMBuildFPToUI(b, v, t, "");
  if (ft)
    return cg_ty_signed(from) ? LLVMBuildSIToFP(b, v, t, "") : LLVMBuildUIToFP(b, v, t, "");
  int bf = cg_ty_bits(from), bt = cg_ty_bits(to);
  if (bt < bf)
    return LLVMBuildTrunc(b, v, t, "");
  if (bt > bf)
    return cg_ty_signed(from) ? LLVMBuildSExt(b, v, t, "") : LLVMBuildZExt(b, v, t, "");
  return v;
}

/* v != 0 as an i1. */
static LLVMValueRef nonzero(kb *K, LLVMValueRef v, cg_ty t) {
  LLVMBuilderRef b = K->L->b;
  if (cg_ty_float(t))
    return LLVMBuildFCmp(b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
  if (t == CG_T_PTR)
    return LLVMBuildIsNotNull(b, v, "");
  return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
}

static LLVMBasicBlockRef new_block(kb *K, const char *name) {
  return LLVMAppendBasicBlockInContext(K->L->cx, K->fn, name);
}

/* cond ? (*then)(a) : (*els)(c), evaluating only the chosen one, as C's ?:,
 * && and || do. */
static LLVMValueRef branch_value(kb *K, LLVMValueRef cond, const cg_x *then_x, const cg_x *else_x,
                                 LLVMValueRef then_const, LLVMValueRef else_const, cg_ty t) {
  LLVMBuilderRef b = K->L->b;
  LLVMBasicBlockRef bt = new_block(K, "sel.then"), be = new_block(K, "sel.else"),
                    bm = new_block(K, "sel.end");
  LLVMBuildCondBr(b, cond, bt, be);
  LLVMPositionBuilderAtEnd(b, bt);
  LLVMValueRef vt = then_x ? convert(K, ex(K, then_x), (cg_ty)then_x->ty, t) : then_const;
  LLVMBasicBlockRef et = LLVMGetInsertBlock(b);
  LLVMBuildBr(b, bm);
  LLVMPositionBuilderAtEnd(b, be);
  LLVMValueRef ve = else_x ? convert(K, ex(K, else_x), (cg_ty)else_x->ty, t) : else_const;
  LLVMBasicBlockRef ee = LLVMGetInsertBlock(b);
  LLVMBuildBr(b, bm);
  LLVMPositionBuilderAtEnd(b, bm);
  LLVMValueRef phi = LLVMBuildPhi(b, ty_of(K->L, t), "");
  LLVMValueRef vals[] = {vt, ve};
  LLVMBasicBlockRef blocks[] = {et, ee};
  LLVMAddIncoming(phi, vals, blocks, 2);
  return phi;
}

/* A condition (a comparison, a logical operator, or a value compared with
 * zero) as an i1. */
static LLVMValueRef cond(kb *K, const cg_x *x) {
  LLVMBuilderRef b = K->L->b;
  switch ((cg_xop)x->op) {
  case CG_X_LT: case CG_X_LE: case CG_X_GT: case CG_X_GE: case CG_X_EQ: case CG_X_NE: {
    cg_ty t = (cg_ty)x->a[0]->ty;
    LLVMValueRef a = ex(K, x->a[0]), c = ex(K, x->a[1]);
    if (cg_ty_float(t)) {
      static const LLVMRealPredicate fp[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                             LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
      return LLVMBuildFCmp(b, fp[x->op - CG_X_LT], a, c, "");
    }
    bool s = cg_ty_signed(t);
    static const LLVMIntPredicate sp[] = {LLVMIntSLT, LLVMIntSLE, LLVMIntSGT,
                                          LLVMIntSGE, LLVMIntEQ,  LLVMIntNE};
    static const LLVMIntPredicate up[] = {LLVMIntULT, LLVMIntULE, LLVMIntUGT,
                                          LLVMIntUGE, LLVMIntEQ,  LLVMIntNE};
    if (t == CG_T_PTR)
      s = false;
    int i = x->op - CG_X_LT;
    return LLVMBuildICmp(b, s ? sp[i] : up[i], a, c, "");
  }
  case CG_X_NOT: return LLVMBuildNot(b, cond(K, x->a[0]), "");
  case CG_X_AND:
  case CG_X_OR: {
    /* a && b: b only when a holds; a || b: b only when a does not. */
    LLVMValueRef a = cond(K, x->a[0]);
    LLVMBasicBlockRef from = LLVMGetInsertBlock(b), rhs = new_block(K, "logic.rhs"),
                      end = new_block(K, "logic.end");
    bool and_ = x->op == CG_X_AND;
    LLVMBuildCondBr(b, a, and_ ? rhs : end, and_ ? end : rhs);
    LLVMPositionBuilderAtEnd(b, rhs);
    LLVMValueRef r = cond(K, x->a[1]);
    LLVMBasicBlockRef rhs_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, end);
    LLVMPositionBuilderAtEnd(b, end);
    LLVMValueRef phi = LLVMBuildPhi(b, K->L->i1, "");
    LLVMValueRef vals[] = {LLVMConstInt(K->L->i1, and_ ? 0 : 1, 0), r};
    LLVMBasicBlockRef blocks[] = {from, rhs_end};
    LLVMAddIncoming(phi, vals, blocks, 2);
    return phi;
  }
  default: return nonzero(K, ex(K, x), (cg_ty)x->ty);
  }
}

static LLVMValueRef param_of(kb *K, int role, int slot) {
  for (int i = 0; i < K->k->n_params; i++)
    if (K->k->params[i].role == role && (role > CG_R_DX || K->k->params[i].slot == slot))
      return LLVMGetParam(K->fn, (unsigned)i);
  ap_die("kernel %s has no parameter of role %d slot %d", K->k->key, role, slot);
}

static LLVMValueRef element_ptr(kb *K, const cg_x *p, const cg_x *i) {
  LLVMValueRef idx = ex(K, i);
  return LLVMBuildInBoundsGEP2(K->L->b, ty_of(K->L, (cg_ty)p->elem), ex(K, p), &idx, 1, "");
}

static LLVMValueRef math_call(kb *K, const cg_x *x) {
  lb *L = K->L;
  math_fn mf = math_of((cg_fn)x->fn);
  bool single = x->ty == CG_T_F32;
  LLVMTypeRef t = ty_of(L, (cg_ty)x->ty);
  char name[64];
  if (mf.intrinsic)
    snprintf(name, sizeof name, "%s.%s", mf.intrinsic, single ? "f32" : "f64");
  else
    snprintf(name, sizeof name, "%s", single ? mf.f32 : mf.f64);
  LLVMTypeRef params[] = {t, t};
  LLVMTypeRef ft = LLVMFunctionType(t, params, (unsigned)mf.n_args, 0);
  LLVMValueRef f = LLVMGetNamedFunction(L->m, name);
  if (!f)
    f = LLVMAddFunction(L->m, name, ft);
  LLVMValueRef args[2];
  for (int i = 0; i < mf.n_args; i++)
    args[i] = ex(K, x->a[i]);
  return LLVMBuildCall2(L->b, ft, f, args, (unsigned)mf.n_args, "");
}

static LLVMValueRef ex(kb *K, const cg_x *x) {
  lb *L = K->L;
  LLVMBuilderRef b = L->b;
  cg_ty t = (cg_ty)x->ty;
  switch ((cg_xop)x->op) {
  case CG_X_CONST:
    if (cg_ty_float(t))
      return LLVMConstReal(ty_of(L, t), x->f);
    return LLVMConstInt(ty_of(L, t), (unsigned long long)x->i, 0);
  case CG_X_VAR: {
    const cg_var *v = &K->k->vars[x->id];
    return LLVMBuildLoad2(b, ty_of(L, (cg_ty)v->ty), K->vars[x->id], v->name);
  }
  case CG_X_PARAM:
    if (x->role == CG_R_LR)
      return param_of(K, CG_R_LR, 0);
    return param_of(K, x->role, x->slot);
  case CG_X_DATA: return K->tables[x->id];
  case CG_X_LOAD:
    return LLVMBuildLoad2(b, ty_of(L, t), element_ptr(K, x->a[0], x->a[1]), "");
  case CG_X_INDEX: return element_ptr(K, x->a[0], x->a[1]);
  case CG_X_VIEW: return ex(K, x->a[0]);
  case CG_X_CAST: return convert(K, ex(K, x->a[0]), (cg_ty)x->a[0]->ty, t);
  case CG_X_NEG:
    return cg_ty_float(t) ? LLVMBuildFNeg(b, ex(K, x->a[0]), "") : LLVMBuildNeg(b, ex(K, x->a[0]), "");
  case CG_X_NOT:
  case CG_X_LT: case CG_X_LE: case CG_X_GT: case CG_X_GE: case CG_X_EQ: case CG_X_NE:
  case CG_X_AND: case CG_X_OR:
    return LLVMBuildZExt(b, cond(K, x), L->i32, "");
  case CG_X_ADD: case CG_X_SUB: case CG_X_MUL: case CG_X_DIV: case CG_X_REM: {
    LLVMValueRef a = ex(K, x->a[0]), c = ex(K, x->a[1]);
    bool fl = cg_ty_float(t), s = cg_ty_signed(t);
    /* Signed 64-bit arithmetic is index arithmetic: C's overflow is
     * undefined there, which lets loops vectorise; the element types wrap. */
    bool nsw = t == CG_T_I64;
    switch ((cg_xop)x->op) {
    case CG_X_ADD: return fl ? LLVMBuildFAdd(b, a, c, "") : nsw ? LLVMBuildNSWAdd(b, a, c, "") : LLVMBuildAdd(b, a, c, "");
    case CG_X_SUB: return fl ? LLVMBuildFSub(b, a, c, "") : nsw ? LLVMBuildNSWSub(b, a, c, "") : LLVMBuildSub(b, a, c, "");
    case CG_X_MUL: return fl ? LLVMBuildFMul(b, a, c, "") : nsw ? LLVMBuildNSWMul(b, a, c, "") : LLVMBuildMul(b, a, c, "");
    case CG_X_DIV: return fl ? LLVMBuildFDiv(b, a, c, "") : s ? LLVMBuildSDiv(b, a, c, "") : LLVMBuildUDiv(b, a, c, "");
    default: return fl ? LLVMBuildFRem(b, a, c, "") : s ? LLVMBuildSRem(b, a, c, "") : LLVMBuildURem(b, a, c, "");
    }
  }
  case CG_X_MAX:
  case CG_X_MIN: {
    /* (p != p || p > q) ? p : q, and < for the minimum: a NaN p wins, and
     * a NaN q wins unless p is beyond it, as numpy. */
    LLVMValueRef p = ex(K, x->a[0]), q = ex(K, x->a[1]), pick;
    bool max = x->op == CG_X_MAX;
    if (cg_ty_float(t)) {
      LLVMValueRef nan = LLVMBuildFCmp(b, LLVMRealUNO, p, p, "");
      LLVMValueRef beyond = LLVMBuildFCmp(b, max ? LLVMRealOGT : LLVMRealOLT, p, q, "");
      pick = LLVMBuildOr(b, nan, beyond, "");
    } else {
      bool s = cg_ty_signed(t);
      pick = LLVMBuildICmp(b, max ? (s ? LLVMIntSGT : LLVMIntUGT) : (s ? LLVMIntSLT : LLVMIntULT),
                           p, q, "");
    }
    return LLVMBuildSelect(b, pick, p, q, "");
  }
  case CG_X_SELECT:
    return branch_value(K, cond(K, x->a[0]), x->a[1], x->a[2], NULL, NULL, t);
  case CG_X_CALL: return math_call(K, x);
  }
  ap_die("kernel %s: expression op %d", K->k->key, (int)x->op);
}

static LLVMValueRef arg_or_null(kb *K, const cg_x *x) {
  return x ? ex(K, x) : LLVMConstNull(K->L->ptr);
}

/* Loops unrolled as GCC -O3 (the C backend's) unrolls them: completely,
 * when they run at most 16 times (its max-completely-peel-times) and the
 * optimiser finds the body small; a longer loop is not unrolled (it may
 * be vectorised and interleaved). LLVM's default<O3> also unrolls long
 * loops whose bodies it prices cheap: GPT-2 small's head transpose, 128
 * row copies a loop (each a memcpy of 256 bytes once the loop idiom
 * replaced the inner loop), became 52 kB of vector moves, and its module
 * 157 kB of code (18 kB without unrolling), most of the compile's time
 * in instruction selection (docs/codegen.md). */
static bool short_loop(const cg_s *s) {
  const cg_x *lo = s->a[0], *hi = s->a[1];
  return lo->op == CG_X_CONST && hi->op == CG_X_CONST && hi->i - lo->i <= 16;
}

/* A new loop ID (self-referential, one per loop) asking not to unroll. */
static LLVMMetadataRef no_unroll_id(lb *L) {
  LLVMMetadataRef what[2] = {LLVMTemporaryMDNode(L->cx, NULL, 0),
                             LLVMMDStringInContext2(L->cx, "llvm.loop.unroll.disable", 24)};
  LLVMMetadataRef disable = LLVMMDNodeInContext2(L->cx, &what[1], 1);
  LLVMMetadataRef ops[2] = {what[0], disable};
  LLVMMetadataRef id = LLVMMDNodeInContext2(L->cx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(what[0], id);
  return id;
}

static void stmts(kb *K, const cg_s *s) {
  lb *L = K->L;
  LLVMBuilderRef b = L->b;
  for (; s; s = s->next) {
    switch ((cg_sop)s->op) {
    case CG_ST_DECL:
    case CG_ST_SET: {
      const cg_var *v = &K->k->vars[s->var];
      LLVMValueRef val = convert(K, ex(K, s->a[0]), (cg_ty)s->a[0]->ty, (cg_ty)v->ty);
      LLVMBuildStore(b, val, K->vars[s->var]);
      break;
    }
    case CG_ST_STORE: {
      LLVMValueRef val = ex(K, s->a[2]);
      LLVMBuildStore(b, val, element_ptr(K, s->a[0], s->a[1]));
      break;
    }
    case CG_ST_FOR: {
      /* for (v = lo; v < hi; v++): hi evaluated before every iteration.
       * Blocks are appended in the order of the source (the exit after
       * the body), so model.ll reads as the C does. */
      LLVMValueRef var = K->vars[s->var];
      LLVMBuildStore(b, ex(K, s->a[0]), var);
      LLVMBasicBlockRef head = new_block(K, "for.cond");
      LLVMBuildBr(b, head);
      LLVMPositionBuilderAtEnd(b, head);
      LLVMValueRef i = LLVMBuildLoad2(b, L->i64, var, K->k->vars[s->var].name);
      LLVMValueRef more = LLVMBuildICmp(b, LLVMIntSLT, i, ex(K, s->a[1]), "");
      LLVMBasicBlockRef test = LLVMGetInsertBlock(b), body = new_block(K, "for.body");
      LLVMPositionBuilderAtEnd(b, body);
      stmts(K, s->body);
      LLVMValueRef j = LLVMBuildLoad2(b, L->i64, var, "");
      LLVMBuildStore(b, LLVMBuildNSWAdd(b, j, c_i64(L, 1), ""), var);
      LLVMValueRef latch = LLVMBuildBr(b, head);
      if (!short_loop(s))
        LLVMSetMetadata(latch, LLVMGetMDKindIDInContext(L->cx, "llvm.loop", 9),
                        LLVMMetadataAsValue(L->cx, no_unroll_id(L)));
      LLVMBasicBlockRef end = new_block(K, "for.end");
      LLVMPositionBuilderAtEnd(b, test);
      LLVMBuildCondBr(b, more, body, end);
      LLVMPositionBuilderAtEnd(b, end);
      break;
    }
    case CG_ST_IF: {
      LLVMValueRef c = cond(K, s->a[0]);
      LLVMBasicBlockRef test = LLVMGetInsertBlock(b), then = new_block(K, "if.then");
      LLVMPositionBuilderAtEnd(b, then);
      stmts(K, s->body);
      LLVMBasicBlockRef then_end = LLVMGetInsertBlock(b), els = NULL, els_end = NULL;
      if (s->els) {
        els = new_block(K, "if.else");
        LLVMPositionBuilderAtEnd(b, els);
        stmts(K, s->els);
        els_end = LLVMGetInsertBlock(b);
      }
      LLVMBasicBlockRef end = new_block(K, "if.end");
      LLVMPositionBuilderAtEnd(b, then_end);
      LLVMBuildBr(b, end);
      if (els) {
        LLVMPositionBuilderAtEnd(b, els_end);
        LLVMBuildBr(b, end);
      }
      LLVMPositionBuilderAtEnd(b, test);
      LLVMBuildCondBr(b, c, then, els ? els : end);
      LLVMPositionBuilderAtEnd(b, end);
      break;
    }
    case CG_ST_MEMCPY:
      LLVMBuildMemCpy(b, ex(K, s->a[0]), 1, ex(K, s->a[1]), 1,
                      convert(K, ex(K, s->a[2]), (cg_ty)s->a[2]->ty, CG_T_U64));
      break;
    case CG_ST_MEMSET:
      LLVMBuildMemSet(b, ex(K, s->a[0]), LLVMConstInt(L->i8, (unsigned long long)s->iarg[0], 0),
                      convert(K, ex(K, s->a[1]), (cg_ty)s->a[1]->ty, CG_T_U64), 1);
      break;
    case CG_ST_SGEMM: {
      if (s->iarg[8]) {
        LLVMValueRef args[] = {c_i32(L, s->iarg[0]), c_i32(L, s->iarg[2]), c_i32(L, s->iarg[3]),
                               c_i32(L, s->iarg[4]), LLVMConstReal(L->f32, (float)s->farg[0]),
                               ex(K, s->a[0]), c_i64(L, s->iarg[5]), ex(K, s->a[1]),
                               LLVMConstReal(L->f32, (float)s->farg[1]), ex(K, s->a[2]),
                               c_i64(L, s->iarg[7]), ex(K, s->a[3])};
        call_ext(L, EXT_apk_sgemm_pb, args, 12);
        break;
      }
      LLVMValueRef args[] = {c_i32(L, s->iarg[0]), c_i32(L, s->iarg[1]), c_i32(L, s->iarg[2]),
                             c_i32(L, s->iarg[3]), c_i32(L, s->iarg[4]),
                             LLVMConstReal(L->f32, (float)s->farg[0]), ex(K, s->a[0]),
                             c_i64(L, s->iarg[5]), ex(K, s->a[1]), c_i64(L, s->iarg[6]),
                             LLVMConstReal(L->f32, (float)s->farg[1]), ex(K, s->a[2]),
                             c_i64(L, s->iarg[7]), ex(K, s->a[3])};
      call_ext(L, EXT_apk_sgemm, args, 14);
      break;
    }
    case CG_ST_CONV: {
      ext_id e = EXT_apk_conv2d_forward_ops;
      switch ((cg_conv_fn)s->lib) {
      case CG_CONV_FORWARD: e = EXT_apk_conv2d_forward_ops; break;
      case CG_CONV_BACKWARD_DATA: e = EXT_apk_conv2d_backward_data_ops; break;
      case CG_CONV_BACKWARD_WEIGHTS: e = EXT_apk_conv2d_backward_weights_ops; break;
      case CG_CONV_FORWARD_PACKED: e = EXT_apk_conv2d_forward_packed_ops; break;
      }
      LLVMValueRef args[8];
      args[0] = conv_const(L, s->iarg);
      args[1] = conv_ops(L, args[0], s->iarg, (cg_conv_fn)s->lib);
      for (int i = 0; i < s->n_args; i++)
        args[i + 2] = arg_or_null(K, s->a[i]);
      if ((unsigned)s->n_args + 2 != LLVMCountParamTypes(L->ext_t[e]))
        ap_die("kernel %s: %d operands for %s", K->k->key, s->n_args, ext_sig[e].name);
      call_ext(L, e, args, s->n_args + 2);
      break;
    }
    case CG_ST_PACK:
      if (s->lib == CG_PACK_B) {
        LLVMValueRef args[] = {c_i32(L, s->iarg[0]), c_i32(L, s->iarg[1]), c_i32(L, s->iarg[2]),
                               ex(K, s->a[0]), c_i64(L, s->iarg[3]), ex(K, s->a[1])};
        call_ext(L, EXT_apk_pack_b_all, args, 6);
      } else {
        LLVMValueRef args[] = {conv_const(L, s->iarg), ex(K, s->a[0]), ex(K, s->a[1])};
        call_ext(L, EXT_apk_conv2d_pack_weights, args, 3);
      }
      break;
    }
  }
}

static LLVMValueRef table_const(lb *L, const cg_ktable *t) {
  LLVMTypeRef et = ty_of(L, (cg_ty)t->ty);
  LLVMValueRef *e = malloc(((size_t)t->n + 1) * sizeof *e);
  if (!e)
    return NULL;
  for (int64_t i = 0; i < t->n; i++) {
    switch ((cg_ty)t->ty) {
    case CG_T_F32: e[i] = LLVMConstReal(et, ((const float *)t->data)[i]); break;
    case CG_T_F64: e[i] = LLVMConstReal(et, ((const double *)t->data)[i]); break;
    case CG_T_I8: e[i] = LLVMConstInt(et, (uint64_t)((const int8_t *)t->data)[i], 1); break;
    case CG_T_U8: e[i] = LLVMConstInt(et, ((const uint8_t *)t->data)[i], 0); break;
    case CG_T_I16: e[i] = LLVMConstInt(et, (uint64_t)((const int16_t *)t->data)[i], 1); break;
    case CG_T_U16: e[i] = LLVMConstInt(et, ((const uint16_t *)t->data)[i], 0); break;
    case CG_T_I32: e[i] = LLVMConstInt(et, (uint64_t)((const int32_t *)t->data)[i], 1); break;
    case CG_T_U32: e[i] = LLVMConstInt(et, ((const uint32_t *)t->data)[i], 0); break;
    case CG_T_I64: e[i] = LLVMConstInt(et, (uint64_t)((const int64_t *)t->data)[i], 1); break;
    default: e[i] = LLVMConstInt(et, ((const uint64_t *)t->data)[i], 0);
    }
  }
  LLVMValueRef arr = LLVMConstArray(et, e, (unsigned)t->n);
  free(e);
  return const_global(L, "table", arr, 0);
}

/* Declares cgk_<i> (the device programs call it before it is built). */
static LLVMValueRef declare_kernel(lb *L, int i) {
  const cg_kir *k = L->p->kernels[i];
  LLVMTypeRef *params = malloc(((size_t)k->n_params + 1) * sizeof *params);
  if (!params)
    ap_die("out of memory");
  for (int a = 0; a < k->n_params; a++)
    params[a] = k->params[a].scalar ? ty_of(L, (cg_ty)k->params[a].ty) : L->ptr;
  char name[32];
  snprintf(name, sizeof name, "cgk_%d", i);
  LLVMValueRef fn =
      LLVMAddFunction(L->m, name, LLVMFunctionType(L->v, params, (unsigned)k->n_params, 0));
  free(params);
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  /* Never inlined into the device programs, as the C backend's kernels.c
   * and dev<d>.c are separate units: inlined at each of their calls (GPT-2
   * calls each kernel of a block 12 times), the kernels made ap_device_0
   * 1.2 MB of code and the LLVM build 4 times longer. */
  unsigned noinline = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(L->cx, noinline, 0));
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (int a = 0; a < k->n_params; a++) {
    const cg_param *pa = &k->params[a];
    static const char *const roles[] = {"x", "y", "dy", "dx", "work", "labels", "all_labels",
                                        "w", "loss", "w", "g", "v", "lr"};
    char pn[32];
    if (pa->role <= CG_R_DX)
      snprintf(pn, sizeof pn, "%s%d", roles[pa->role], pa->slot);
    else
      snprintf(pn, sizeof pn, "%s", roles[pa->role]);
    LLVMSetValueName2(LLVMGetParam(fn, (unsigned)a), pn, strlen(pn));
    if (!pa->scalar && pa->is_restrict)
      LLVMAddAttributeAtIndex(fn, (unsigned)a + 1, LLVMCreateEnumAttribute(L->cx, noalias, 0));
  }
  return fn;
}

/* Builds kernel i's body; false (with the kernel named in d) when LLVM
 * rejects it. */
static ap_status build_kernel(lb *L, int i, ap_diag *d) {
  const cg_kir *k = L->p->kernels[i];
  kb K = {.L = L, .k = k, .fn = L->kernels[i]};
  K.vars = malloc(((size_t)k->n_vars + 1) * sizeof *K.vars);
  K.tables = malloc(((size_t)k->n_tables + 1) * sizeof *K.tables);
  if (!K.vars || !K.tables) {
    free(K.vars);
    free(K.tables);
    return cg_oom(L->p->g, d);
  }
  for (int t = 0; t < k->n_tables; t++)
    K.tables[t] = table_const(L, &k->tables[t]);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(L->cx, K.fn, "entry");
  LLVMPositionBuilderAtEnd(L->b, entry);
  for (int v = 0; v < k->n_vars; v++)
    K.vars[v] = LLVMBuildAlloca(L->b, ty_of(L, (cg_ty)k->vars[v].ty), k->vars[v].name);
  stmts(&K, k->body);
  LLVMBuildRetVoid(L->b);
  free(K.vars);
  free(K.tables);
  if (LLVMVerifyFunction(K.fn, LLVMReturnStatusAction))
    return ap_error(d, CG_ERR_INTERNAL, L->p->g->path, NULL, NULL,
                    "internal error: LLVM rejected kernel cgk_%d (%s)", i, k->key);
  return AP_OK;
}

/* cgk_work_floats(): the scratch of the kernel that needs most, in floats. */
static void build_work_floats(lb *L) {
  LLVMValueRef fn = LLVMAddFunction(L->m, "cgk_work_floats", LLVMFunctionType(L->i64, NULL, 0, 0));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  L->work_floats = fn;
  LLVMBuilderRef b = L->b;
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(L->cx, fn, "entry"));
  LLVMValueRef most = c_i64(L, 0);
  for (int i = 0; i < L->p->n_kernels; i++) {
    const cg_kir *k = L->p->kernels[i];
    if (!cg_kir_needs_work(k))
      continue;
    LLVMValueRef need = c_i64(L, k->work_floats);
    for (int t = 0; t < k->n_work_terms; t++) {
      const cg_work_term *w = &k->work_terms[t];
      LLVMValueRef term;
      if (w->conv) {
        LLVMValueRef conv = conv_const(L, w->v);
        term = call_ext(L, EXT_apk_conv2d_work_floats, &conv, 1);
      } else {
        LLVMValueRef args[] = {c_i32(L, w->v[0]), c_i32(L, w->v[1]), c_i32(L, w->v[2])};
        term = call_ext(L, EXT_apk_sgemm_work_floats, args, 3);
      }
      need = LLVMBuildAdd(b, need, term, "");
    }
    most = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGT, need, most, ""), need, most, "");
  }
  LLVMBuildRet(b, most);
}

/* ---- device programs -------------------------------------------------------- */

/* One device's program being built. */
typedef struct db {
  lb *L;
  const cg_device *D;
  LLVMValueRef fn, c;
  LLVMValueRef arena, work, params, mom, inbox, packed, args, lr, loss, step, status;
  LLVMValueRef *in;              /* per program input: its data */
  LLVMBasicBlockRef done;
} db;

static LLVMValueRef byte_ptr(db *B, LLVMValueRef base, int64_t offset) {
  if (!offset)
    return base;
  LLVMValueRef off = c_i64(B->L, offset);
  return LLVMBuildInBoundsGEP2(B->L->b, B->L->i8, base, &off, 1, "");
}

/* Buffer b (or a CG_ARG_*) as a kernel argument. */
static LLVMValueRef buf_value(db *B, int b) {
  lb *L = B->L;
  if (b == CG_ARG_LOSS)
    return B->loss;
  if (b == CG_ARG_LR)
    return B->lr;
  if (b == CG_ARG_LABELS)
    return B->in[L->p->n_inputs - 1];
  const cg_buf *bi = &B->D->bufs[cg_buf_root(B->D, b)];
  switch (bi->st) {
  case CG_INPUT: return B->in[bi->input_index];
  case CG_CONST: return byte_ptr(B, L->blob, bi->offset);
  case CG_PARAM: return byte_ptr(B, B->params, bi->offset);
  case CG_MOM: return byte_ptr(B, B->mom, bi->offset);
  case CG_INBOX: return byte_ptr(B, B->inbox, bi->offset);
  case CG_PACKED: return byte_ptr(B, B->packed, bi->offset);
  case CG_ARENA: return byte_ptr(B, B->arena, bi->offset);
  default: ap_die("buffer %d has no storage", b);
  }
}

/* s = v; if (s != APRT_OK) goto done; */
static void check_status(db *B, LLVMValueRef v) {
  lb *L = B->L;
  LLVMBuildStore(L->b, v, B->status);
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(L->cx, B->fn, "ok");
  LLVMBuildCondBr(L->b, LLVMBuildICmp(L->b, LLVMIntNE, v, c_i32(L, APRT_OK), ""), B->done, ok);
  LLVMPositionBuilderAtEnd(L->b, ok);
}

/* return aprt_fail(c, code, "%s", msg); */
static void fail_return(db *B, aprt_status code, const char *msg) {
  lb *L = B->L;
  LLVMValueRef args[] = {B->c, c_i32(L, code), cstring(L, "%s"), cstring(L, msg)};
  LLVMBuildRet(L->b, call_ext(L, EXT_aprt_fail, args, 4));
}

/* if (!v) return aprt_fail(...) for the buffers just requested. */
static void check_alloc(db *B, LLVMValueRef bad, const char *msg) {
  lb *L = B->L;
  LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(L->cx, B->fn, "nomem"),
                    ok = LLVMAppendBasicBlockInContext(L->cx, B->fn, "ok");
  LLVMBuildCondBr(L->b, bad, fail, ok);
  LLVMPositionBuilderAtEnd(L->b, fail);
  fail_return(B, APRT_ERR_NOMEM, msg);
  LLVMPositionBuilderAtEnd(L->b, ok);
}

static LLVMValueRef buffer(db *B, int id, LLVMValueRef bytes, const char *name) {
  LLVMValueRef args[] = {B->c, c_i32(B->L, id), bytes};
  LLVMValueRef v = call_ext(B->L, EXT_aprt_buffer, args, 3);
  LLVMSetValueName2(v, name, strlen(name));
  return v;
}

static LLVMValueRef array_global(lb *L, LLVMTypeRef et, LLVMValueRef *e, int n, const char *what) {
  return const_global(L, what, LLVMConstArray(et, e, (unsigned)n), 0);
}

static void xchg(db *B, const cg_step *st) {
  lb *L = B->L;
  const ap_dxfer *t = st->xfer;
  const ap_value *v = &L->p->g->values[t->value];
  int dev = B->D->dev;
  int src = st->args[0], dst = st->mode == CG_XM_ADD ? st->args[2] : st->args[1];
  ap_dbox sbox = B->D->bufs[src].box, dbox = B->D->bufs[st->args[1]].box;
  int64_t count = ap_dbox_volume(v->rank, &sbox);
  LLVMValueRef *e = malloc(((size_t)t->n_pieces + 1) * sizeof *e);
  LLVMValueRef *adds = malloc(((size_t)t->n_pieces + 1) * sizeof *adds);
  int64_t *add_at = malloc(((size_t)t->n_pieces + 1) * sizeof *add_at);
  if (!e || !adds || !add_at)
    ap_die("out of memory");
  LLVMValueRef lists[2];
  int counts[2] = {0, 0}, n_adds = 0;
  /* The sends' list (pass 0) for a whole step or a start, the receives'
   * (pass 1) for a whole step or a finish. */
  int first = st->half == CG_HALF_FINISH, last = st->half == CG_HALF_START ? 0 : 1;
  for (int pass = first; pass <= last; pass++) {
    int n = 0;
    int64_t at = 0;
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int sender = st->reverse ? pc->to : pc->from, receiver = st->reverse ? pc->from : pc->to;
      if ((st->skip_local && pc->from == pc->to) || (pass ? receiver : sender) != dev)
        continue;
      LLVMValueRef box;
      if (pass == 0) {
        box = box_const(L, v->rank, &pc->box, &sbox, 0);
      } else if (st->mode == CG_XM_SUMMANDS) {
        box = box_const(L, v->rank, &pc->box, &sbox, count * pc->summand);
      } else if (st->mode == CG_XM_ADD) {
        box = box_const(L, v->rank, &pc->box, &pc->box, at);
        adds[n_adds] = box_const(L, v->rank, &pc->box, &dbox, 0);
        add_at[n_adds++] = at;
        at += ap_dbox_volume(v->rank, &pc->box);
      } else {
        box = box_const(L, v->rank, &pc->box, &dbox, 0);
      }
      LLVMValueRef f[] = {c_i32(L, pass ? sender : receiver), box};
      e[n++] = LLVMConstNamedStruct(L->xfer_t, f, 2);
    }
    counts[pass] = n;
    if (n == 0) /* never read: the count is 0 */
      e[n++] = LLVMConstNull(L->xfer_t);
    lists[pass] = array_global(L, L->xfer_t, e, n, pass ? "recvs" : "sends");
  }
  LLVMValueRef es = c_i64(L, (int64_t)ap_dtype_size(v->dtype)), tag = c_i32(L, st->tag);
  if (st->half == CG_HALF_START) {
    LLVMValueRef a[] = {B->c, buf_value(B, src), c_i32(L, counts[0]), lists[0], es, tag};
    check_status(B, call_ext(L, EXT_aprt_exchange_start, a, 6));
  } else if (st->half == CG_HALF_FINISH) {
    LLVMValueRef a[] = {B->c, buf_value(B, dst), c_i32(L, counts[1]), lists[1], es, tag};
    check_status(B, call_ext(L, EXT_aprt_exchange_finish, a, 6));
  } else {
    LLVMValueRef a[] = {B->c,      buf_value(B, src), c_i32(L, counts[0]), lists[0],
                        buf_value(B, dst), c_i32(L, counts[1]), lists[1], es, tag};
    check_status(B, call_ext(L, EXT_aprt_exchange, a, 9));
  }
  /* CG_XM_ADD: the staged pieces added into their boxes, in order. */
  for (int k = 0; k < n_adds; k++) {
    LLVMValueRef box = const_global(L, "add", adds[k], 8);
    LLVMValueRef part = byte_ptr(B, buf_value(B, dst), add_at[k] * 4);
    LLVMValueRef a[] = {buf_value(B, st->args[1]), box, part};
    call_ext(L, EXT_aprt_box_add_f32, a, 3);
  }
  free(e);
  free(adds);
  free(add_at);
}

/* An all-reduce: fn is aprt_allreduce_sum, _start or _finish. */
static void allreduce(db *B, const cg_step *st, ext_id fn) {
  lb *L = B->L;
  const cg_device *D = B->D;
  const ap_graph *g = L->p->g;
  const ap_dxfer *t = st->xfer;
  const ap_value *v = &g->values[t->value];
  ap_dbox bx = D->bufs[st->args[0]].box;
  int64_t count = ap_dbox_volume(v->rank, &bx);
  int n = t->n_group ? t->n_group[D->dev] : t->n_summands;
  if (count == 0 || n < 2)
    return;
  LLVMValueRef *e = malloc((size_t)n * sizeof *e);
  if (!e)
    ap_die("out of memory");
  for (int k = 0; k < n; k++)
    e[k] = c_i32(L, ap_dxfer_group(t, D->dev)[k]);
  LLVMValueRef group = array_global(L, L->i32, e, n, "group");
  free(e);
  LLVMValueRef a[] = {B->c, group, c_i32(L, n), buf_value(B, st->args[0]), c_i64(L, count),
                      LLVMConstNull(L->ptr), c_i32(L, st->tag)};
  check_status(B, call_ext(L, fn, a, 7));
}

static void step(db *B, const cg_step *st) {
  lb *L = B->L;
  const cg_program *p = L->p;
  const cg_device *D = B->D;
  const ap_graph *g = p->g;
  switch (st->kind) {
  case CG_S_KERNEL: {
    const cg_kir *k = p->kernels[st->kernel];
    LLVMValueRef fn = L->kernels[st->kernel];
    LLVMValueRef args[CG_MAX_OPERANDS * 4 + 8];
    int n = 0;
    if (st->n_args + 1 > (int)(sizeof args / sizeof *args) || st->n_args + st->work != k->n_params)
      ap_die("kernel call of cgk_%d with %d arguments for %d parameters", st->kernel,
             st->n_args + st->work, k->n_params);
    for (int a = 0; a < st->n_args; a++) {
      LLVMValueRef v = buf_value(B, st->args[a]);
      if (st->args[a] == CG_ARG_LR && k->params[a].ty == CG_T_F64)
        v = LLVMBuildFPExt(L->b, v, L->f64, "");
      args[n++] = v;
    }
    if (st->work)
      args[n++] = B->work;
    LLVMBuildCall2(L->b, LLVMGlobalGetValueType(fn), fn, args, (unsigned)n, "");
    if (st->reports_loss) {
      LLVMValueRef a[] = {B->c, LLVMBuildLoad2(L->b, L->i32, B->step, "step"),
                          LLVMBuildLoad2(L->b, L->f64, B->loss, "loss")};
      check_status(B, call_ext(L, EXT_aprt_step_loss, a, 3));
    }
    break;
  }
  case CG_S_ZERO: {
    int r = cg_buf_root(D, st->args[0]);
    if (D->bufs[r].bytes > 0)
      LLVMBuildMemSet(L->b, buf_value(B, st->args[0]), LLVMConstInt(L->i8, 0, 0),
                      c_i64(L, D->bufs[r].bytes), 1);
    break;
  }
  case CG_S_SLICE:
  case CG_S_ADDBOX: {
    bool slice = st->kind == CG_S_SLICE;
    int whole = slice ? st->args[0] : st->args[1], part = slice ? st->args[1] : st->args[0];
    ap_dbox wb = D->bufs[whole].box, pb = D->bufs[part].box;
    const ap_value *v = &g->values[st->value];
    if (ap_dbox_volume(v->rank, &pb) == 0)
      break;
    LLVMValueRef box = const_global(L, slice ? "slice" : "addbox",
                                    box_const(L, v->rank, &pb, &wb, 0), 8);
    if (slice) {
      LLVMValueRef a[] = {buf_value(B, part), buf_value(B, whole), box,
                          c_i64(L, (int64_t)ap_dtype_size(v->dtype))};
      call_ext(L, EXT_aprt_box_pack, a, 4);
    } else {
      LLVMValueRef a[] = {buf_value(B, whole), box, buf_value(B, part)};
      call_ext(L, EXT_aprt_box_add_f32, a, 3);
    }
    break;
  }
  case CG_S_ALLREDUCE: {
    static const ext_id fns[] = {[CG_HALF_WHOLE] = EXT_aprt_allreduce_sum,
                                 [CG_HALF_START] = EXT_aprt_allreduce_start,
                                 [CG_HALF_FINISH] = EXT_aprt_allreduce_finish};
    allreduce(B, st, fns[st->half]);
    break;
  }
  case CG_S_XCHG: xchg(B, st); break;
  }
}

static void output(db *B, const cg_output *o) {
  lb *L = B->L;
  LLVMValueRef box, local;
  if (o->value < 0) { /* the loss, a float64 scalar: a box of rank 0 */
    box = LLVMConstNull(L->box_t);
    local = B->loss;
  } else {
    const ap_value *v = &L->p->g->values[o->value];
    ap_dbox whole;
    memset(&whole, 0, sizeof whole);
    for (int k = 0; k < v->rank; k++)
      whole.hi[k] = v->dims[k];
    box = box_const(L, v->rank, &o->box, &whole, 0);
    local = buf_value(B, o->buf);
  }
  LLVMValueRef a[] = {B->c, c_i32(L, o->index), const_global(L, "out", box, 8), local};
  check_status(B, call_ext(L, EXT_aprt_output_box, a, 4));
}

static const aprt_phase phase_of[] = {
    [CG_PH_FORWARD] = APRT_PHASE_FORWARD, [CG_PH_LOSS] = APRT_PHASE_LOSS,
    [CG_PH_BACKWARD] = APRT_PHASE_BACKWARD, [CG_PH_GRADIENT] = APRT_PHASE_GRADIENT,
    [CG_PH_UPDATE] = APRT_PHASE_UPDATE};
_Static_assert(sizeof phase_of / sizeof *phase_of == CG_PH_UPDATE + 1, "one phase per cg_phase");

static LLVMValueRef build_device(lb *L, const cg_device *D) {
  const cg_program *p = L->p;
  LLVMBuilderRef b = L->b;
  int dev = D->dev;
  bool train = p->o.train, mom = train && p->o.momentum != 0;
  char name[48], msg[640];
  snprintf(name, sizeof name, "ap_device_%d", dev);
  LLVMValueRef fn = LLVMAddFunction(L->m, name, LLVMFunctionType(L->i32, &L->ptr, 1, 0));
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  db B = {.L = L, .D = D, .fn = fn, .c = LLVMGetParam(fn, 0)};
  LLVMSetValueName2(B.c, "c", 1);
  B.in = malloc(((size_t)p->n_inputs + 1) * sizeof *B.in);
  if (!B.in)
    ap_die("out of memory");
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(L->cx, fn, "entry"));
  B.status = LLVMBuildAlloca(b, L->i32, "s");
  B.loss = LLVMBuildAlloca(b, L->f64, "loss");
  B.step = LLVMBuildAlloca(b, L->i32, "step");
  LLVMBuildStore(b, c_i32(L, APRT_OK), B.status);
  LLVMBuildStore(b, LLVMConstReal(L->f64, 0), B.loss);
  LLVMBuildStore(b, c_i32(L, 0), B.step);
  B.done = LLVMAppendBasicBlockInContext(L->cx, fn, "done");
  /* The rank's memory, as dev<d>.c requests it (print_c.c). */
  B.arena = buffer(&B, 0, c_i64(L, D->arena_bytes ? D->arena_bytes : CG_ALIGN), "arena");
  LLVMValueRef wf = LLVMBuildCall2(b, LLVMGlobalGetValueType(L->work_floats), L->work_floats,
                                   NULL, 0, "");
  B.work = buffer(&B, 1, LLVMBuildAdd(b, LLVMBuildMul(b, wf, c_i64(L, 4), ""),
                                      c_i64(L, CG_ALIGN), ""), "work");
  snprintf(msg, sizeof msg, "device %d: out of memory (%lld bytes)", dev,
           (long long)D->arena_bytes);
  check_alloc(&B, LLVMBuildOr(b, LLVMBuildIsNull(b, B.arena, ""), LLVMBuildIsNull(b, B.work, ""), ""),
              msg);
  if (train) {
    int64_t pb = D->params_bytes ? D->params_bytes : CG_ALIGN;
    B.params = buffer(&B, 2, c_i64(L, pb), "params");
    LLVMValueRef bad = LLVMBuildIsNull(b, B.params, "");
    if (mom) {
      B.mom = buffer(&B, 3, c_i64(L, pb), "mom");
      bad = LLVMBuildOr(b, bad, LLVMBuildIsNull(b, B.mom, ""), "");
    }
    snprintf(msg, sizeof msg, "device %d: out of memory (%lld bytes of weights)", dev,
             (long long)D->params_bytes);
    check_alloc(&B, bad, msg);
  }
  bool has_inbox = false;
  for (int i = 0; i < D->n_bufs; i++)
    has_inbox |= D->bufs[i].st == CG_INBOX;
  if (has_inbox) {
    B.inbox = buffer(&B, 4, c_i64(L, D->inbox_bytes ? D->inbox_bytes : CG_ALIGN), "inbox");
    snprintf(msg, sizeof msg, "device %d: out of memory (%lld bytes of inputs)", dev,
             (long long)D->inbox_bytes);
    check_alloc(&B, LLVMBuildIsNull(b, B.inbox, ""), msg);
  }
  if (D->n_prep) {
    /* As dev<d>.c: the constant operands packed on the first run only. */
    LLVMValueRef is_new = LLVMBuildAlloca(b, L->i32, "packed_new");
    LLVMValueRef a[] = {B.c, c_i32(L, 5), c_i64(L, D->packed_bytes), is_new};
    B.packed = call_ext(L, EXT_aprt_buffer_new, a, 4);
    LLVMSetValueName2(B.packed, "packed", strlen("packed"));
    snprintf(msg, sizeof msg, "device %d: out of memory (%lld bytes of packed weights)", dev,
             (long long)D->packed_bytes);
    check_alloc(&B, LLVMBuildIsNull(b, B.packed, ""), msg);
    LLVMBasicBlockRef pack = LLVMAppendBasicBlockInContext(L->cx, fn, "pack"),
                      packed = LLVMAppendBasicBlockInContext(L->cx, fn, "packed");
    LLVMValueRef fresh = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildLoad2(b, L->i32, is_new, ""),
                                       c_i32(L, 0), "");
    LLVMBuildCondBr(b, fresh, pack, packed);
    LLVMPositionBuilderAtEnd(b, pack);
    for (int i = 0; i < D->n_prep; i++)
      step(&B, &D->prep[i]);
    LLVMBuildBr(b, packed);
    LLVMPositionBuilderAtEnd(b, packed);
  }
  if (train) {
    /* The weights start from the blob's values on every run, the momentum
     * from zero. */
    for (int v = 0; v < p->g->n_values; v++)
      if (D->bufs[v].st == CG_PARAM && D->bufs[v].bytes)
        LLVMBuildMemCpy(b, byte_ptr(&B, B.params, D->bufs[v].offset), 1,
                        byte_ptr(&B, L->blob, D->bufs[v].src), 1, c_i64(L, D->bufs[v].bytes));
    if (mom && D->params_bytes)
      LLVMBuildMemSet(b, B.mom, LLVMConstInt(L->i8, 0, 0), c_i64(L, D->params_bytes), 1);
    B.args = call_ext(L, EXT_aprt_get_args, &B.c, 1);
    B.lr = LLVMBuildLoad2(b, L->f32, LLVMBuildStructGEP2(b, L->args_t, B.args, 2, ""), "lr");
  }
  for (int i = 0; i < p->n_inputs; i++) {
    LLVMValueRef a[] = {B.c, c_i32(L, i)};
    LLVMValueRef t = call_ext(L, EXT_aprt_input, a, 2);
    char in_name[24];
    snprintf(in_name, sizeof in_name, "in%d", i);
    B.in[i] = LLVMBuildLoad2(b, L->ptr, LLVMBuildStructGEP2(b, L->tensor_t, t, 3, ""), in_name);
    if (p->bound_inputs[i] >= 0) {
      /* Bound at compile time (it fixed shapes): the run must feed the same. */
      const cg_spec *in = &p->inputs[i];
      int64_t bytes = ap_numel(in->rank, in->dims) * (int64_t)ap_dtype_size(in->dtype);
      if (bytes) {
        LLVMValueRef ca[] = {B.in[i], byte_ptr(&B, L->blob, p->bound_inputs[i]), c_i64(L, bytes)};
        LLVMValueRef differs =
            LLVMBuildICmp(b, LLVMIntNE, call_ext(L, EXT_memcmp, ca, 3), c_i32(L, 0), "");
        LLVMBasicBlockRef bad = LLVMAppendBasicBlockInContext(L->cx, fn, "differs"),
                          ok = LLVMAppendBasicBlockInContext(L->cx, fn, "ok");
        LLVMBuildCondBr(b, differs, bad, ok);
        LLVMPositionBuilderAtEnd(b, bad);
        snprintf(msg, sizeof msg,
                 "input %d (%s) differs from the tensor bound when the program was compiled", i,
                 in->name);
        fail_return(&B, APRT_ERR_MISMATCH, msg);
        LLVMPositionBuilderAtEnd(b, ok);
      }
    }
    for (int k = 0; k < D->n_bufs; k++) {
      const cg_buf *bi = &D->bufs[k];
      if (bi->st != CG_INBOX || bi->input_index != i || !bi->bytes)
        continue;
      const cg_spec *in = &p->inputs[i];
      ap_dbox within;
      memset(&within, 0, sizeof within);
      for (int r = 0; r < in->rank; r++)
        within.hi[r] = in->dims[r];
      LLVMValueRef box = const_global(L, "inbox", box_const(L, in->rank, &bi->box, &within, 0), 8);
      LLVMValueRef a2[] = {byte_ptr(&B, B.inbox, bi->offset), B.in[i], box,
                           c_i64(L, (int64_t)ap_dtype_size(bi->dtype))};
      call_ext(L, EXT_aprt_box_pack, a2, 4);
    }
  }
  LLVMBasicBlockRef loop_head = NULL, loop_end = NULL;
  if (train) {
    /* for (step = 0; step < args->steps; step++) */
    loop_head = LLVMAppendBasicBlockInContext(L->cx, fn, "step.cond");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(L->cx, fn, "step.body");
    loop_end = LLVMAppendBasicBlockInContext(L->cx, fn, "step.end");
    LLVMBuildBr(b, loop_head);
    LLVMPositionBuilderAtEnd(b, loop_head);
    LLVMValueRef steps =
        LLVMBuildLoad2(b, L->i32, LLVMBuildStructGEP2(b, L->args_t, B.args, 1, ""), "steps");
    LLVMValueRef s = LLVMBuildLoad2(b, L->i32, B.step, "");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, s, steps, ""), body, loop_end);
    LLVMPositionBuilderAtEnd(b, body);
  }
  for (int si = 0; si < D->n_steps; si++) {
    const cg_step *st = &D->steps[si];
    if (si == 0 || D->steps[si - 1].phase != st->phase) {
      if (si)
        call_ext(L, EXT_aprt_phase_end, &B.c, 1);
      LLVMValueRef a[] = {B.c, c_i32(L, phase_of[st->phase])};
      call_ext(L, EXT_aprt_phase_begin, a, 2);
    }
    if (cg_row_changes(L->p, D, si)) {
      LLVMValueRef a[] = {B.c, c_i32(L, st->row)};
      call_ext(L, EXT_aprt_row, a, 2);
    }
    step(&B, st);
  }
  if (D->n_steps)
    call_ext(L, EXT_aprt_phase_end, &B.c, 1);
  if (cg_row_changes(L->p, D, D->n_steps)) {
    LLVMValueRef a[] = {B.c, c_i32(L, -1)};
    call_ext(L, EXT_aprt_row, a, 2);
  }
  if (train) {
    LLVMValueRef s = LLVMBuildLoad2(b, L->i32, B.step, "");
    LLVMBuildStore(b, LLVMBuildNSWAdd(b, s, c_i32(L, 1), ""), B.step);
    LLVMBuildBr(b, loop_head);
    LLVMPositionBuilderAtEnd(b, loop_end);
  }
  for (int i = 0; i < D->n_outs; i++)
    output(&B, &D->outs[i]);
  LLVMBuildBr(b, B.done);
  LLVMPositionBuilderAtEnd(b, B.done);
  LLVMBuildRet(b, LLVMBuildLoad2(b, L->i32, B.status, ""));
  free(B.in);
  return fn;
}

/* ---- the program's description (main.c) ------------------------------------ */

static LLVMValueRef spec_array(lb *L, const cg_spec *s, int n, const char *what) {
  if (!n)
    return LLVMConstNull(L->ptr);
  LLVMValueRef *e = malloc((size_t)n * sizeof *e);
  if (!e)
    ap_die("out of memory");
  for (int i = 0; i < n; i++) {
    LLVMValueRef f[] = {cstring(L, s[i].name), c_i32(L, s[i].dtype), c_i32(L, s[i].rank),
                        i64_array(L, s[i].rank, s[i].dims), c_i64(L, s[i].classes),
                        c_i64(L, s[i].ignore)};
    e[i] = LLVMConstNamedStruct(L->spec_t, f, 6);
  }
  LLVMValueRef g = array_global(L, L->spec_t, e, n, what);
  free(e);
  return g;
}

static void build_main(lb *L, LLVMValueRef *devices) {
  const cg_program *p = L->p;
  const ap_graph *g = p->g;
  LLVMBuilderRef b = L->b;
  /* device_names: the plan's kinds, or the one device's. */
  LLVMValueRef names[256];
  int n_names = 0;
  const ap_plan *plan = p->n_dev > 1 ? g->plan : NULL;
  if (plan && plan->dev.n_devices == p->n_dev) {
    for (int kd = 0; kd < plan->dev.n_kinds; kd++)
      for (int i = 0; i < plan->dev.kinds[kd].count && n_names < 256; i++)
        names[n_names++] = cstring(L, plan->dev.kinds[kd].name);
  } else {
    names[n_names++] = cstring(L, p->o.device_kind ? p->o.device_kind : "cpu");
  }
  LLVMValueRef device_names = array_global(L, L->ptr, names, n_names, "device_names");
  LLVMValueRef *pb = malloc((size_t)p->n_dev * sizeof *pb);
  if (!pb)
    ap_die("out of memory");
  for (int dev = 0; dev < p->n_dev; dev++)
    pb[dev] = LLVMConstInt(L->i64, (unsigned long long)p->predicted_bytes[dev], 0);
  LLVMValueRef predicted = array_global(L, L->i64, pb, p->n_dev, "predicted_bytes");
  free(pb);
  /* The plan's rows: each one's node and predicted time. */
  LLVMValueRef row_names = LLVMConstNull(L->ptr), row_time = LLVMConstNull(L->ptr);
  if (p->n_rows) {
    LLVMValueRef *rn = malloc((size_t)p->n_rows * sizeof *rn);
    LLVMValueRef *rt = malloc((size_t)p->n_rows * sizeof *rt);
    if (!rn || !rt)
      ap_die("out of memory");
    for (int r = 0; r < p->n_rows; r++) {
      rn[r] = cstring(L, p->row_names[r]);
      rt[r] = LLVMConstReal(L->f64, p->row_time_s ? p->row_time_s[r] : 0);
    }
    row_names = array_global(L, L->ptr, rn, p->n_rows, "row_names");
    if (p->row_time_s)
      row_time = array_global(L, L->f64, rt, p->n_rows, "predicted_row_time_s");
    free(rn);
    free(rt);
  }
  /* run(): device aprt_rank(c) runs ap_device_<rank>. */
  LLVMTypeRef run_params[] = {L->ptr, L->ptr};
  LLVMValueRef run = LLVMAddFunction(L->m, "run", LLVMFunctionType(L->i32, run_params, 2, 0));
  LLVMSetLinkage(run, LLVMInternalLinkage);
  LLVMValueRef c = LLVMGetParam(run, 0);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(L->cx, run, "entry"));
  LLVMBasicBlockRef other = LLVMAppendBasicBlockInContext(L->cx, run, "other");
  LLVMValueRef sw = LLVMBuildSwitch(b, call_ext(L, EXT_aprt_rank, &c, 1), other, (unsigned)p->n_dev);
  for (int dev = 0; dev < p->n_dev; dev++) {
    LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(L->cx, run, "device");
    LLVMAddCase(sw, c_i32(L, dev), bb);
    LLVMPositionBuilderAtEnd(b, bb);
    LLVMBuildRet(b, LLVMBuildCall2(b, LLVMGlobalGetValueType(devices[dev]), devices[dev], &c, 1, ""));
  }
  LLVMPositionBuilderAtEnd(b, other);
  char fmt[96];
  snprintf(fmt, sizeof fmt, "this program has %d device%s, not %%d", p->n_dev,
           p->n_dev > 1 ? "s" : "");
  LLVMValueRef fa[] = {c, c_i32(L, APRT_ERR_USAGE), cstring(L, fmt),
                       call_ext(L, EXT_aprt_size, &c, 1)};
  LLVMBuildRet(b, call_ext(L, EXT_aprt_fail, fa, 4));
  bool train = p->o.train;
  LLVMValueRef null = LLVMConstNull(L->ptr);
  LLVMValueRef f[] = {cstring(L, p->o.model_name ? p->o.model_name : "model"),
                      c_i32(L, p->n_dev),
                      device_names,
                      c_i32(L, train),
                      c_i32(L, p->n_inputs),
                      spec_array(L, p->inputs, p->n_inputs, "inputs"),
                      c_i32(L, p->n_outputs),
                      spec_array(L, p->outputs, p->n_outputs, "outputs"),
                      train ? predicted : null,
                      train ? null : predicted,
                      run,
                      L->blob,
                      c_i64(L, p->blob_bytes),
                      LLVMConstReal(L->f64, p->predicted_step_time_s),
                      c_i32(L, p->n_rows),
                      row_names,
                      row_time};
  LLVMValueRef prog = LLVMAddGlobal(L->m, L->prog_t, "ap_program");
  LLVMSetInitializer(prog, LLVMConstNamedStruct(L->prog_t, f, 17));
  LLVMSetGlobalConstant(prog, 1);
  if (L->jit)
    return; /* the JIT's caller runs aprt_main on ap_program */
  LLVMSetLinkage(prog, LLVMInternalLinkage);
  LLVMTypeRef main_params[] = {L->i32, L->ptr};
  LLVMValueRef main_fn = LLVMAddFunction(L->m, "main", LLVMFunctionType(L->i32, main_params, 2, 0));
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(L->cx, main_fn, "entry"));
  LLVMValueRef ma[] = {LLVMGetParam(main_fn, 0), LLVMGetParam(main_fn, 1), prog};
  LLVMBuildRet(b, call_ext(L, EXT_aprt_main, ma, 3));
}

/* ---- the module ----------------------------------------------------------------- */

static ap_status target_machine(const ap_graph *g, LLVMTargetMachineRef *tm, ap_diag *d) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser();
  char *triple = LLVMGetDefaultTargetTriple(), *err = NULL;
  LLVMTargetRef target;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    ap_status s = ap_error(d, CG_ERR_INTERNAL, g->path, NULL, NULL,
                           "LLVM has no target for %s: %s", triple, err);
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return s;
  }
  char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
  *tm = LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelAggressive,
                                LLVMRelocPIC, LLVMCodeModelDefault);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  LLVMDisposeMessage(triple);
  return AP_OK;
}

/* The blob's bytes into blob (p->blob_bytes + 1 bytes, zeros): every
 * constant at its offset; the last byte stays 0 (ap_blob is never empty). */
static void blob_fill(const cg_program *p, unsigned char *blob) {
  for (int i = 0; i < p->n_blob; i++) {
    const ap_value *v = p->blob[i].view;
    int64_t bytes = ap_numel(v->rank, v->dims) * (int64_t)ap_dtype_size(v->dtype);
    if (bytes)
      memcpy(blob + p->blob[i].offset, v->data, (size_t)bytes);
  }
}

/* Writes OUTDIR/blob.o: an ELF relocatable object defining ap_blob, the
 * blob's bytes (blob_fill), in .rodata aligned to CG_ALIGN, as main.c's
 * `.incbin` of weights.bin does for a C program. Written here, the blob is
 * written once; through an assembly file, `as` read weights.bin and wrote
 * it again (GPT-2 small: 497 MB, about a tenth of the compile's CPU time),
 * and through the module LLVM copied it in memory. The class, byte order,
 * machine and flags are those of the kernel library's object, which clang
 * made for this host: the object links wherever kernels.o does. */
static ap_status blob_object(const cg_program *p, const char *outdir, ap_diag *d) {
  ap_graph *g = p->g;
  const Elf64_Ehdr *k = (const Elf64_Ehdr *)(const void *)cg_kernels_obj;
  const unsigned char host_data =
      __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (cg_kernels_obj_size < sizeof *k || memcmp(k->e_ident, ELFMAG, SELFMAG) != 0 ||
      k->e_ident[EI_CLASS] != ELFCLASS64 || k->e_ident[EI_DATA] != host_data)
    return ap_error(d, CG_ERR_INTERNAL, g->path, NULL, NULL,
                    "internal error: the kernel library's object is not ELF64 of this host's "
                    "byte order: cannot write blob.o");
  static const char strtab[] = "\0ap_blob";
  static const char shstrtab[] = "\0.rodata\0.symtab\0.strtab\0.shstrtab\0.note.GNU-stack";
  enum { S_RODATA = 1, S_SYMTAB, S_STRTAB, S_SHSTRTAB, S_NOTE, N_SECTIONS };
  size_t data_size = (size_t)p->blob_bytes + 1;
  size_t data_at = (size_t)cg_align_up((int64_t)sizeof(Elf64_Ehdr));
  size_t sym_at = (size_t)cg_align_up((int64_t)(data_at + data_size));
  size_t str_at = sym_at + 2 * sizeof(Elf64_Sym);
  size_t shstr_at = str_at + sizeof strtab;
  size_t sh_at = (size_t)cg_align_up((int64_t)(shstr_at + sizeof shstrtab));
  size_t size = sh_at + N_SECTIONS * sizeof(Elf64_Shdr);
  unsigned char *o = calloc(1, size);
  if (!o)
    return cg_oom(g, d);
  Elf64_Ehdr eh = {.e_type = ET_REL,
                   .e_machine = k->e_machine,
                   .e_version = EV_CURRENT,
                   .e_flags = k->e_flags,
                   .e_ehsize = sizeof(Elf64_Ehdr),
                   .e_shoff = sh_at,
                   .e_shentsize = sizeof(Elf64_Shdr),
                   .e_shnum = N_SECTIONS,
                   .e_shstrndx = S_SHSTRTAB};
  memcpy(eh.e_ident, k->e_ident, EI_NIDENT);
  memcpy(o, &eh, sizeof eh);
  blob_fill(p, o + data_at);
  Elf64_Sym sym[2] = {{0},
                      {.st_name = 1,
                       .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT),
                       .st_shndx = S_RODATA,
                       .st_size = data_size}};
  memcpy(o + sym_at, sym, sizeof sym);
  memcpy(o + str_at, strtab, sizeof strtab);
  memcpy(o + shstr_at, shstrtab, sizeof shstrtab);
  Elf64_Shdr sh[N_SECTIONS] = {
      {0},
      [S_RODATA] = {.sh_name = 1, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                    .sh_offset = data_at, .sh_size = data_size, .sh_addralign = CG_ALIGN},
      [S_SYMTAB] = {.sh_name = 9, .sh_type = SHT_SYMTAB, .sh_offset = sym_at,
                    .sh_size = sizeof sym, .sh_link = S_STRTAB, .sh_info = 1,
                    .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym)},
      [S_STRTAB] = {.sh_name = 17, .sh_type = SHT_STRTAB, .sh_offset = str_at,
                    .sh_size = sizeof strtab, .sh_addralign = 1},
      [S_SHSTRTAB] = {.sh_name = 25, .sh_type = SHT_STRTAB, .sh_offset = shstr_at,
                      .sh_size = sizeof shstrtab, .sh_addralign = 1},
      /* An empty .note.GNU-stack: the program's stack is not executable. */
      [S_NOTE] = {.sh_name = 35, .sh_type = SHT_PROGBITS, .sh_offset = sh_at, .sh_addralign = 1},
  };
  memcpy(o + sh_at, sh, sizeof sh);
  ap_status s = cg_write_file(g, d, outdir, "blob.o", o, size);
  free(o);
  return s;
}

/* Builds p's module in cx: kernels, device programs, the description; the
 * blob is @ap_blob, declared (blob.o defines it for the executable, the JIT
 * in memory: jit true). */
static ap_status build_module(const cg_program *p, LLVMContextRef cx, LLVMTargetMachineRef tm,
                              bool jit, LLVMModuleRef *out, ap_diag *d) {
  lb L = {.p = p, .cx = cx, .jit = jit};
  L.m = LLVMModuleCreateWithNameInContext("model", cx);
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(L.m, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(L.m, td);
  make_types(&L, td);
  LLVMDisposeTargetData(td);
  L.b = LLVMCreateBuilderInContext(cx);
  declare_externs(&L);
  L.blob = LLVMAddGlobal(L.m, L.i8, "ap_blob");
  LLVMSetGlobalConstant(L.blob, 1);
  LLVMSetAlignment(L.blob, CG_ALIGN);
  L.kernels = malloc(((size_t)p->n_kernels + 1) * sizeof *L.kernels);
  LLVMValueRef *devices = malloc(((size_t)p->n_dev + 1) * sizeof *devices);
  if (!L.kernels || !devices) {
    free(L.kernels);
    free(devices);
    LLVMDisposeBuilder(L.b);
    LLVMDisposeModule(L.m);
    return cg_oom(p->g, d);
  }
  for (int i = 0; i < p->n_kernels; i++)
    L.kernels[i] = declare_kernel(&L, i);
  ap_status s = link_conv_spec(&L, d);
  for (int i = 0; i < p->n_kernels && s == AP_OK; i++)
    s = build_kernel(&L, i, d);
  if (s == AP_OK) {
    build_work_floats(&L);
    for (int dev = 0; dev < p->n_dev; dev++)
      devices[dev] = build_device(&L, &p->devs[dev]);
    build_main(&L, devices);
    char *msg = NULL;
    if (LLVMVerifyModule(L.m, LLVMReturnStatusAction, &msg)) {
      char line[400];
      snprintf(line, sizeof line, "%s", msg ? msg : "");
      for (char *q = line; *q; q++)
        if (*q == '\n')
          *q = ' ';
      s = ap_error(d, CG_ERR_INTERNAL, p->g->path, NULL, NULL,
                   "internal error: LLVM rejected the program's module: %s", line);
    }
    LLVMDisposeMessage(msg);
  }
  free(L.kernels);
  free(devices);
  LLVMDisposeBuilder(L.b);
  if (s != AP_OK) {
    LLVMDisposeModule(L.m);
    return s;
  }
  *out = L.m;
  return AP_OK;
}

/* Everything defined but keep becomes internal. The kernel library is not
 * in the module: its functions stay declarations, defined by clang's object
 * of it (kernels_obj.c), which the executable links and the JIT adds. */
static ap_status internalize(LLVMModuleRef m, const char *keep) {
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    size_t len;
    const char *name = LLVMGetValueName2(f, &len);
    if (!LLVMIsDeclaration(f) && strcmp(name, keep) != 0)
      LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  for (LLVMValueRef v = LLVMGetFirstGlobal(m); v; v = LLVMGetNextGlobal(v)) {
    size_t len;
    const char *name = LLVMGetValueName2(v, &len);
    if (!LLVMIsDeclaration(v) && strcmp(name, keep) != 0 && LLVMGetLinkage(v) != LLVMPrivateLinkage)
      LLVMSetLinkage(v, LLVMInternalLinkage);
  }
  return AP_OK;
}

static ap_status optimise(const cg_program *p, LLVMModuleRef m, LLVMTargetMachineRef tm,
                          ap_diag *d) {
  /* ACCPAR_LLVM_PASSES, as CFLAGS for the C backend: the test suites
   * trade speed of the programs for compile time (default<O1>). */
  const char *passes = getenv("ACCPAR_LLVM_PASSES");
  if (!passes || !*passes)
    passes = "default<O3>";
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMErrorRef err = LLVMRunPasses(m, passes, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (err) {
    char *msg = LLVMGetErrorMessage(err);
    ap_status s = ap_error(d, CG_ERR_INTERNAL, p->g->path, NULL, NULL,
                           "LLVM's optimiser failed (passes '%s'): %s", passes, msg);
    LLVMDisposeErrorMessage(msg);
    return s;
  }
  return AP_OK;
}

ap_status cg_print_llvm(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                        ap_diag *d) {
  ap_graph *g = p->g;
  char *blob_path = NULL; /* weights.bin: a C program's, not written here */
  ap_status s = cg_prepare_outdir(g, d, outdir, &blob_path);
  if (s == AP_OK)
    s = blob_object(p, outdir, d);
  LLVMTargetMachineRef tm = NULL;
  if (s == AP_OK)
    s = target_machine(g, &tm, d);
  if (s != AP_OK)
    return s;
  LLVMContextRef cx = LLVMContextCreate();
  LLVMContextSetOpaquePointers(cx, 1);
  LLVMModuleRef m = NULL;
  s = build_module(p, cx, tm, false, &m, d);
  if (s == AP_OK && o && o->emit_llvm) {
    char *text = LLVMPrintModuleToString(m);
    s = cg_write_file(g, d, outdir, "model.ll", text, strlen(text));
    LLVMDisposeMessage(text);
  }
  if (s == AP_OK)
    s = internalize(m, "main");
  if (s == AP_OK)
    s = optimise(p, m, tm, d);
  if (s == AP_OK) {
    char *err = NULL;
    LLVMMemoryBufferRef obj = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &err, &obj)) {
      s = ap_error(d, CG_ERR_INTERNAL, g->path, NULL, NULL,
                   "internal error: LLVM cannot write the object file: %s", err ? err : "");
      LLVMDisposeMessage(err);
    } else {
      s = cg_write_file(g, d, outdir, "model.o", LLVMGetBufferStart(obj), LLVMGetBufferSize(obj));
      LLVMDisposeMemoryBuffer(obj);
    }
  }
  if (s == AP_OK)
    s = cg_write_file(g, d, outdir, "kernels.o", (const char *)cg_kernels_obj,
                      (size_t)cg_kernels_obj_size);
  if (m)
    LLVMDisposeModule(m);
  LLVMContextDispose(cx);
  LLVMDisposeTargetMachine(tm);
  return s;
}

ap_status cg_llvm_build(const ap_build_opts *b, ap_diag *d) {
  const char *cc = b->cc ? b->cc : getenv("CC");
  if (!cc || !*cc)
    cc = "cc";
  cg_text t;
  if (!cg_text_open(&t))
    return ap_error(d, AP_ERR_NOMEM, b->outdir, NULL, NULL, "out of memory");
  fprintf(t.f, "#!/bin/sh\n# Generated by accparc: links ./model from the LLVM backend's "
               "model.o, the kernel library's kernels.o\n# and the constants' blob.o.\nset -e\n"
               "cd \"$(dirname \"$0\")\"\n"
               "%s -o model.tmp model.o kernels.o blob.o '",
          cc);
  for (const char *q = b->rt_lib; *q; q++) {
    if (*q == '\'')
      fputs("'\\''", t.f);
    else
      fputc(*q, t.f);
  }
  fprintf(t.f, "' %s\nmv model.tmp model\n", b->extra_libs ? b->extra_libs : "");
  if (!cg_text_close(&t)) {
    free(t.s);
    return ap_error(d, AP_ERR_NOMEM, b->outdir, NULL, NULL, "out of memory");
  }
  ap_status s = cg_run_build_script(b->outdir, "build.sh", t.s, cc, d);
  free(t.s);
  return s;
}

/* ---- running in memory ---------------------------------------------------------- */

static ap_status jit_error(const cg_program *p, LLVMErrorRef err, const char *what, ap_diag *d) {
  char *msg = LLVMGetErrorMessage(err);
  char line[400];
  snprintf(line, sizeof line, "%s", msg);
  for (char *q = line; *q; q++)
    if (*q == '\n')
      *q = ' ';
  LLVMDisposeErrorMessage(msg);
  return ap_error(d, CG_ERR_INTERNAL, p->g->path, NULL, NULL, "internal error: %s: %s", what,
                  line);
}

ap_status cg_llvm_run(const cg_program *p, const cg_rt_symbol *syms, int n_syms,
                      cg_main_fn main_fn, int argc, char **argv, int *status, ap_diag *d) {
  ap_graph *g = p->g;
  /* The blob in memory, where the executable would map it. */
  unsigned char *blob = aligned_alloc(CG_ALIGN, (size_t)cg_align_up(p->blob_bytes + 1));
  if (!blob)
    return cg_oom(g, d);
  memset(blob, 0, (size_t)cg_align_up(p->blob_bytes + 1));
  blob_fill(p, blob);
  LLVMTargetMachineRef tm = NULL;
  ap_status s = target_machine(g, &tm, d);
  if (s != AP_OK) {
    free(blob);
    return s;
  }
  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
  LLVMContextRef cx = LLVMOrcThreadSafeContextGetContext(tsc);
  LLVMContextSetOpaquePointers(cx, 1);
  LLVMModuleRef m = NULL;
  s = build_module(p, cx, tm, true, &m, d);
  if (s == AP_OK)
    s = internalize(m, "ap_program");
  if (s == AP_OK)
    s = optimise(p, m, tm, d);
  LLVMDisposeTargetMachine(tm);
  LLVMOrcLLJITRef jit = NULL;
  LLVMErrorRef err = NULL;
  if (s == AP_OK) {
    LLVMOrcJITTargetMachineBuilderRef jtmb = NULL;
    err = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb);
    if (!err) {
      LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
      LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, jtmb);
      err = LLVMOrcCreateLLJIT(&jit, jb);
    }
    if (err)
      s = jit_error(p, err, "cannot create the JIT", d);
  }
  if (s == AP_OK) {
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    /* libc and libm from the process; the runtime from the caller's table. */
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
        &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL);
    if (err) {
      s = jit_error(p, err, "cannot search the process's libraries", d);
    } else {
      LLVMOrcJITDylibAddGenerator(jd, gen);
      LLVMOrcCSymbolMapPairs pairs = calloc((size_t)n_syms + 1, sizeof *pairs);
      if (!pairs)
        ap_die("out of memory");
      LLVMJITSymbolFlags flags = {LLVMJITSymbolGenericFlagsExported, 0};
      for (int i = 0; i < n_syms; i++) {
        pairs[i].Name = LLVMOrcLLJITMangleAndIntern(jit, syms[i].name);
        pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)syms[i].addr;
        pairs[i].Sym.Flags = flags;
        pairs[i].Sym.Flags.GenericFlags |= LLVMJITSymbolGenericFlagsCallable;
      }
      pairs[n_syms].Name = LLVMOrcLLJITMangleAndIntern(jit, "ap_blob");
      pairs[n_syms].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)blob;
      pairs[n_syms].Sym.Flags = flags;
      err = LLVMOrcJITDylibDefine(jd, LLVMOrcAbsoluteSymbols(pairs, (size_t)n_syms + 1));
      free(pairs);
      if (err)
        s = jit_error(p, err, "cannot define the runtime's symbols", d);
    }
    if (s == AP_OK) {
      /* The kernel library, as the executable links it. */
      LLVMMemoryBufferRef lib = LLVMCreateMemoryBufferWithMemoryRange(
          (const char *)cg_kernels_obj, (size_t)cg_kernels_obj_size, "kernels.o", 0);
      err = LLVMOrcLLJITAddObjectFile(jit, jd, lib);
      if (err)
        s = jit_error(p, err, "cannot add the kernel library to the JIT", d);
    }
    if (s == AP_OK) {
      LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(m, tsc);
      m = NULL; /* the JIT's now */
      err = LLVMOrcLLJITAddLLVMIRModule(jit, jd, tsm);
      if (err) {
        LLVMOrcDisposeThreadSafeModule(tsm);
        s = jit_error(p, err, "cannot add the module to the JIT", d);
      }
    }
    LLVMOrcExecutorAddress prog = 0;
    if (s == AP_OK) {
      err = LLVMOrcLLJITLookup(jit, &prog, "ap_program");
      if (err)
        s = jit_error(p, err, "cannot compile the program", d);
    }
    if (s == AP_OK)
      *status = main_fn(argc, argv, (const void *)(uintptr_t)prog);
  }
  if (m)
    LLVMDisposeModule(m);
  if (jit)
    LLVMOrcDisposeLLJIT(jit);
  LLVMOrcDisposeThreadSafeContext(tsc);
  free(blob);
  return s;
}

/* The module's one exported symbol, which llvm_module.c looks up. */
__attribute__((visibility("default"))) extern const cg_llvm_module accpar_llvm_module;
const cg_llvm_module accpar_llvm_module = {ACCPAR_VERSION_STRING, CG_LLVM_MODULE_ABI,
                                           cg_print_llvm, cg_llvm_build, cg_llvm_run};
