/* Training programs (codegen/train.c and the backward emitters
 * codegen/c_grad_*.c).
 *
 * Gradient checks: every case of tests/grad_models.py is a tiny graph whose
 * differentiable operands are all graph inputs. It is compiled as a
 * training program with the loss L = sum(w * y) for a fixed random w, the
 * gradients of every input exported; one run gives the analytic gradients,
 * and central differences (L(x + e) - L(x - e)) / 2e, one program run per
 * perturbed element, give the numeric ones. float64 cases use e = 1e-6 and
 * must agree within 1e-6 relative + 1e-7 absolute. float32 cases are the
 * layers that go through the project's GEMM and convolution kernels; the
 * loss is linear in each of their operands, so a large step (e = 0.25) has
 * no truncation error and shrinks the float32 rounding of y it divides:
 * they must agree within 1e-3 relative to max(|g|, 1).
 *
 * Also: the softmax cross-entropy loss and its gradient against a direct
 * computation, plain SGD and SGD with momentum against hand-computed
 * updates, and 20 training steps of the zoo's mlp and lenet5 (the loss
 * decreases; the first step's loss equals the cross-entropy of the
 * inference program's output on the same data). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "codegen/train.h"
#include "frontend/frontend.h"
#include "ir/ir.h"

#define WORK_DIR ACCPAR_BINARY_DIR "/grad"
#define MODELS_PY ACCPAR_SOURCE_DIR "/tests/grad_models.py"
#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define PYTHON "/usr/bin/python3" /* Debian's, which has onnx */

#if defined(__SANITIZE_ADDRESS__)
#define RT_LINK "-lprotobuf-c -lpthread -lm -fsanitize=address,undefined"
#else
#define RT_LINK "-lprotobuf-c -lpthread -lm"
#endif

__attribute__((format(printf, 3, 4))) static void fmt(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int w = vsnprintf(buf, cap, f, ap);
  va_end(ap);
  cr_assert(w >= 0 && (size_t)w < cap, "a path or command is longer than %zu bytes", cap);
}

/* Runs a shell command; its exit status. */
__attribute__((format(printf, 1, 2))) static int sh(const char *f, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, f);
  int w = vsnprintf(cmd, sizeof cmd, f, ap);
  va_end(ap);
  cr_assert(w >= 0 && (size_t)w < sizeof cmd, "command too long");
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make_dirs(const char *dir) {
  cr_assert_eq(sh("mkdir -p '%s'", dir), 0, "cannot create %s", dir);
}

/* A deterministic generator for test data (xorshift64*), in [-1, 1). */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static double uniform(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717u) >> 11) / 9007199254740992.0 * 2 - 1;
}

/* Loads, binds the batch (when batch > 0), runs the pipeline and writes and
 * builds a training program in outdir. Returns the graph (for its input
 * and output shapes); the caller frees it. */
static ap_graph *compile_train(const char *model, const char *outdir, const cg_train_opts *o,
                               int64_t batch, const char *cflags) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(model, &g, &d), AP_OK, "%s", d.message);
  if (batch)
    cr_assert_eq(ap_bind_batch(g, batch, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, NULL, &d), AP_OK, "%s", d.message);
  make_dirs(outdir);
  cg_train_opts opts = *o;
  opts.outdir = outdir;
  cr_assert_eq(cg_emit_train_program(g, &opts, &d), AP_OK, "%s", d.message);
  ap_build_opts b = {.outdir = outdir,
                     .cflags = cflags,
                     .rt_include = ACCPAR_SOURCE_DIR "/runtime",
                     .rt_lib = ACCPAR_BINARY_DIR "/runtime/libaccpar_rt.a",
                     .kernels_dir = ACCPAR_SOURCE_DIR "/codegen/kernels",
                     .extra_libs = RT_LINK};
  cr_assert_eq(ap_codegen_build(&b, &d), AP_OK, "%s", d.message);
  return g;
}

/* The program inputs of a training program: the graph inputs that are not
 * initializers, then the loss's operand (shape and type given). */
typedef struct feed {
  int n;
  ap_tensor t[16];
  const char *name[16];
} feed;

static void write_input(const char *dir, const feed *f, int i) {
  char path[1024];
  ap_diag d = {0};
  fmt(path, sizeof path, "%s/input_%d.pb", dir, i);
  cr_assert_eq(ap_write_tensor_pb(path, &f->t[i], f->name[i], &d), AP_OK, "%s", d.message);
}

static void random_fill(ap_tensor *t) {
  for (int64_t i = 0; i < t->numel; i++)
    ap_tensor_set_f64(t, i, uniform());
}

static ap_tensor new_tensor(ap_arena *a, ap_dtype dt, int rank, const int64_t *dims) {
  ap_tensor t = {.dtype = dt, .rank = rank, .numel = ap_numel(rank, dims)};
  memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  t.data = ap_arena_alloc(a, (size_t)(t.numel ? t.numel : 1) * ap_dtype_size(dt));
  cr_assert(t.data, "out of memory");
  return t;
}

/* The graph's fed inputs with random values, then the loss weights. */
static void make_feed(ap_graph *g, ap_arena *a, feed *f) {
  f->n = 0;
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    if (v->kind == AP_VAL_WEIGHT)
      continue;
    cr_assert(f->n < 15);
    f->t[f->n] = new_tensor(a, v->dtype, v->rank, v->dims);
    f->name[f->n] = v->name;
    random_fill(&f->t[f->n++]);
  }
  const ap_value *y = &g->values[g->outputs[0]];
  f->t[f->n] = new_tensor(a, y->dtype, y->rank, y->dims);
  f->name[f->n] = "loss_weights";
  random_fill(&f->t[f->n++]);
}

static void run_program(const char *prog_dir, const char *in_dir, const char *out_dir,
                        const char *extra) {
  cr_assert_eq(sh("'%s/model' --inputs '%s' --outputs '%s' %s > /dev/null", prog_dir, in_dir,
                  out_dir, extra),
               0, "%s/model failed", prog_dir);
}

static ap_tensor read_output(ap_arena *a, const char *out_dir, int i, const char **name) {
  char path[1024];
  ap_diag d = {0};
  ap_tensor t;
  fmt(path, sizeof path, "%s/output_%d.pb", out_dir, i);
  cr_assert_eq(ap_read_tensor_pb(path, a, &t, name, &d), AP_OK, "%s", d.message);
  return t;
}

static double read_loss(ap_arena *a, const char *out_dir, int n_graph_outputs) {
  ap_tensor t = read_output(a, out_dir, n_graph_outputs, NULL);
  cr_assert_eq(t.dtype, AP_DT_DOUBLE);
  return ((const double *)t.data)[0];
}

/* ---- gradient checks ------------------------------------------------------ */

/* Elements checked per tensor, evenly spaced. Each is two runs of the
 * program, which under the sanitizers is sanitized too (RT_LINK) and starts
 * slowly: there, where memory errors are looked for and every perturbed run
 * repeats the code of the first, 2 a tensor (30 took the suite to its
 * 900-second timeout on a loaded host; 4 took 279 s of a 1365-s pass). */
#if defined(__SANITIZE_ADDRESS__)
enum { MAX_CHECKED = 2 };
#else
enum { MAX_CHECKED = 30 };
#endif

/* f32_eps: the step of float32 inputs' central differences, large enough
 * that the loss's float32 rounding is small beside the change it makes,
 * small enough that the function's curvature is too. */
static void grad_check_eps(const char *name, double f32_eps) {
  char dir[512], model[640], prog[640], in[640], out[640];
  fmt(dir, sizeof dir, WORK_DIR "/%s", name);
  fmt(model, sizeof model, "%s/%s.onnx", dir, name);
  fmt(prog, sizeof prog, "%s/prog", dir);
  fmt(in, sizeof in, "%s/in", dir);
  fmt(out, sizeof out, "%s/out", dir);
  make_dirs(in);
  make_dirs(out);
  cr_assert_eq(sh(PYTHON " '" MODELS_PY "' '%s' %s", dir, name), 0, "grad_models.py %s failed",
               name);
  cg_train_opts o = {.model_name = name, .loss = CG_LOSS_WEIGHTED_SUM, .grad_inputs = true,
                     .export_grads = true};
  ap_graph *g = compile_train(model, prog, &o, 0, "-O1");
  ap_arena *a = ap_arena_new();
  feed f;
  make_feed(g, a, &f);
  for (int i = 0; i < f.n; i++)
    write_input(in, &f, i);
  int n_out = g->n_outputs;
  run_program(prog, in, out, "--steps 1 --lr 0");
  /* Every fed input but the loss weights must have its gradient exported;
   * all are read before the perturbed runs overwrite the outputs. */
  ap_tensor grads[16];
  int slot_of[16], n_grads = 0;
  for (int k = n_out + 1;; k++) {
    char path[1024];
    fmt(path, sizeof path, "%s/output_%d.pb", out, k);
    struct stat st;
    if (stat(path, &st) != 0)
      break;
    cr_assert(n_grads < 16);
    const char *gname = NULL;
    grads[n_grads] = read_output(a, out, k, &gname);
    cr_assert(strncmp(gname, "grad:", 5) == 0, "output %d is '%s'", k, gname);
    int i = 0;
    while (i < f.n - 1 && strcmp(f.name[i], gname + 5) != 0)
      i++;
    cr_assert(i < f.n - 1, "%s: '%s' is not a fed input", name, gname);
    cr_assert_eq(grads[n_grads].numel, f.t[i].numel);
    slot_of[n_grads++] = i;
  }
  int checked_tensors = 0;
  for (int k = 0; k < n_grads; k++) {
    const ap_tensor *grad = &grads[k];
    int i = slot_of[k];
    bool f32 = f.t[i].dtype == AP_DT_FLOAT;
    double eps = f32 ? f32_eps : 1e-6;
    int64_t stride = grad->numel > MAX_CHECKED ? (grad->numel + MAX_CHECKED - 1) / MAX_CHECKED : 1;
    for (int64_t e = 0; e < grad->numel; e += stride) {
      double x0 = ap_tensor_get_f64(&f.t[i], e), l[2];
      for (int side = 0; side < 2; side++) {
        ap_tensor_set_f64(&f.t[i], e, x0 + (side ? -eps : eps));
        write_input(in, &f, i);
        run_program(prog, in, out, "--steps 1 --lr 0");
        l[side] = read_loss(a, out, n_out);
      }
      ap_tensor_set_f64(&f.t[i], e, x0);
      write_input(in, &f, i);
      double fd = (l[0] - l[1]) / (2 * eps), an = ap_tensor_get_f64(grad, e);
      double tol = f32 ? 1e-3 * fmax(fabs(an), 1.0) : 1e-6 * fabs(an) + 1e-7;
      cr_expect(fabs(fd - an) <= tol,
                "%s: d loss / d %s[%lld]: analytic %.10g, central difference %.10g", name,
                f.name[i], (long long)e, an, fd);
    }
    checked_tensors++;
  }
  cr_assert_eq(checked_tensors, f.n - 1, "%s: %d gradients exported for %d fed inputs", name,
               checked_tensors, f.n - 1);
  ap_arena_free(a);
  ap_graph_free(g);
}

static void grad_check(const char *name) { grad_check_eps(name, 0.25); }

#define GRAD_TEST(case) \
  Test(grad_check, case) { grad_check(#case); }

GRAD_TEST(gemm)
GRAD_TEST(gemm_trans_alpha_beta)
GRAD_TEST(gemm_transa)
GRAD_TEST(gemm_f32)
GRAD_TEST(matmul_batched_broadcast)
GRAD_TEST(matmul_1d)
GRAD_TEST(matmul_f32)
GRAD_TEST(conv)
GRAD_TEST(conv_groups_strides_pads_dilations)
GRAD_TEST(conv_1d)
GRAD_TEST(conv_f32)
GRAD_TEST(conv_groups_f32)
GRAD_TEST(relu)
GRAD_TEST(sigmoid)
GRAD_TEST(tanh)
GRAD_TEST(gelu_none)
GRAD_TEST(gelu_tanh)
GRAD_TEST(maxpool_pads_ceil)
GRAD_TEST(maxpool_dilations)
GRAD_TEST(averagepool_pads_ceil)
GRAD_TEST(averagepool_count_include_pad)
GRAD_TEST(global_average_pool)
GRAD_TEST(global_max_pool)
GRAD_TEST(batch_norm)
GRAD_TEST(add_broadcast)
GRAD_TEST(sub_broadcast)
GRAD_TEST(mul_broadcast)
GRAD_TEST(mul_broadcast_both)
GRAD_TEST(mul_square)
GRAD_TEST(flatten)
GRAD_TEST(exp_sqrt_log_neg)
GRAD_TEST(unsqueeze_dropout_expand_squeeze)
GRAD_TEST(div_broadcast)
GRAD_TEST(pow_broadcast)
GRAD_TEST(erf_abs_reciprocal)
GRAD_TEST(clip)
GRAD_TEST(pad_modes)
GRAD_TEST(pad_attributes)
GRAD_TEST(tile_depth_space)
GRAD_TEST(gather_scatter)
GRAD_TEST(normalizations)
GRAD_TEST(group_norm_per_channel)
GRAD_TEST(einsum)
GRAD_TEST(resize_nearest_linear)
GRAD_TEST(leaky_relu_prelu)
GRAD_TEST(elu_selu_celu)
GRAD_TEST(hard_sigmoid_swish)
GRAD_TEST(softplus_softsign_mish)
GRAD_TEST(thresholded_relu_sin_cos)
GRAD_TEST(sum_max_min_broadcast)
GRAD_TEST(where_broadcast)
GRAD_TEST(reduce_sum_mean_max)
GRAD_TEST(reduce_min_prod_l1_l2_lse_ssq)
GRAD_TEST(reduce_axes_input_noop)
GRAD_TEST(cumsum_trilu)
GRAD_TEST(top_k_one_hot)
GRAD_TEST(lrn)
GRAD_TEST(lrn_even_size)
GRAD_TEST(conv_transpose)
GRAD_TEST(gather_repeated_negative)
GRAD_TEST(reshape)
GRAD_TEST(transpose)
GRAD_TEST(concat)
GRAD_TEST(split)
GRAD_TEST(slice_negative_steps)
GRAD_TEST(softmax_axis1)
GRAD_TEST(softmax_last)
GRAD_TEST(softmax_opset11)
GRAD_TEST(logsoftmax_axis0)
GRAD_TEST(logsoftmax_last)
GRAD_TEST(layer_norm_last)
GRAD_TEST(layer_norm_axis1)
GRAD_TEST(shortcut)
/* The training program computes Conv, Add and Sigmoid in one kernel
 * (codegen/fuse.c). A Sigmoid's curvature makes 0.25 too coarse a step
 * (0.5% off, fused or not); its float32 loss is small enough for 0.02. */
Test(grad_check, conv_add_sigmoid) {
  grad_check_eps("conv_add_sigmoid", 0.02);
  if (getenv("ACCPAR_NO_FUSION"))
    return;
  char cmd[1024];
  fmt(cmd, sizeof cmd, "grep -q 'fused add sigmoid Conv' '%s/conv_add_sigmoid/prog/dev0.c'",
      WORK_DIR);
  cr_assert_eq(system(cmd), 0, "the program does not fuse the convolution's chain");
}
GRAD_TEST(branches)
GRAD_TEST(branches_f32)
GRAD_TEST(shared_gemm_f32)
GRAD_TEST(cast_f32)
GRAD_TEST(masked_softmax)
GRAD_TEST(layer_norm_decomposed)
GRAD_TEST(gelu_tanh_exported)
GRAD_TEST(attention)
GRAD_TEST(embedding_tied)
GRAD_TEST(lstm_through_time)
GRAD_TEST(lstm_bidirectional_batchwise_yc)
GRAD_TEST(gru_bidirectional)
GRAD_TEST(gru_linear_before_reset_reverse_yh)
GRAD_TEST(rnn_through_time)

/* ---- the loss and the update ---------------------------------------------- */

/* Runs a program, parsing the "step S loss L" lines it prints into losses
 * (at most cap); the number of lines. */
static int run_losses(const char *cmd, double *losses, int cap) {
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  char line[256];
  int n = 0, step;
  double l;
  while (fgets(line, sizeof line, p))
    if (sscanf(line, "step %d loss %lf", &step, &l) == 2 && n < cap) {
      cr_assert_eq(step, n + 1, "step %d printed as step %d", n + 1, step);
      losses[n++] = l;
    }
  cr_assert_eq(pclose(p), 0, "%s failed", cmd);
  return n;
}

static void prepare_case(const char *name, char *dir, size_t cap) {
  fmt(dir, cap, WORK_DIR "/%s", name);
  make_dirs(dir);
  cr_assert_eq(sh(PYTHON " '" MODELS_PY "' '%s' %s", dir, name), 0, "grad_models.py %s failed",
               name);
}

/* Mean softmax cross-entropy over the rows of z [n, c] against labels. */
static double cross_entropy(const double *z, const int64_t *labels, int n, int c, double *dz) {
  double total = 0;
  for (int r = 0; r < n; r++) {
    double top = z[r * c], sum = 0;
    for (int j = 1; j < c; j++)
      top = fmax(top, z[r * c + j]);
    for (int j = 0; j < c; j++)
      sum += exp(z[r * c + j] - top);
    total += top + log(sum) - z[r * c + labels[r]];
    for (int j = 0; dz && j < c; j++)
      dz[r * c + j] = (exp(z[r * c + j] - top) / sum - (j == labels[r])) / n;
  }
  return total / n;
}

Test(loss, softmax_cross_entropy_value_and_gradient) {
  char dir[512], model[640], prog[640], in[640], out[640];
  prepare_case("ce_identity", dir, sizeof dir);
  fmt(model, sizeof model, "%s/ce_identity.onnx", dir);
  fmt(prog, sizeof prog, "%s/prog", dir);
  fmt(in, sizeof in, "%s/in", dir);
  fmt(out, sizeof out, "%s/out", dir);
  make_dirs(in);
  make_dirs(out);
  cg_train_opts o = {.model_name = "ce", .loss = CG_LOSS_SOFTMAX_CE, .grad_inputs = true,
                     .export_grads = true};
  ap_graph *g = compile_train(model, prog, &o, 0, "-O1");
  ap_arena *a = ap_arena_new();
  feed f = {.n = 2, .name = {"x", "labels"}};
  f.t[0] = new_tensor(a, AP_DT_DOUBLE, 2, (const int64_t[]){4, 5});
  random_fill(&f.t[0]);
  for (int64_t i = 0; i < 20; i++) /* logits of several magnitudes */
    ((double *)f.t[0].data)[i] *= 1 + i % 7;
  f.t[1] = new_tensor(a, AP_DT_INT64, 1, (const int64_t[]){4});
  const int64_t labels[4] = {3, 0, 4, 3};
  memcpy(f.t[1].data, labels, sizeof labels);
  write_input(in, &f, 0);
  write_input(in, &f, 1);
  run_program(prog, in, out, "--steps 1");
  double want_dz[20];
  double want = cross_entropy(f.t[0].data, labels, 4, 5, want_dz);
  double got = read_loss(a, out, 1);
  cr_expect(fabs(got - want) <= 1e-12 * fabs(want), "loss %.17g, expected %.17g", got, want);
  const char *gname = NULL;
  ap_tensor dz = read_output(a, out, 2, &gname);
  cr_assert_str_eq(gname, "grad:x");
  for (int i = 0; i < 20; i++)
    cr_expect(fabs(((double *)dz.data)[i] - want_dz[i]) <= 1e-15,
              "d loss / d z[%d] = %.17g, expected %.17g", i, ((double *)dz.data)[i], want_dz[i]);
  /* A label outside [0, classes) is refused by the program. */
  ((int64_t *)f.t[1].data)[2] = 5;
  write_input(in, &f, 1);
  cr_expect_neq(sh("'%s/model' --inputs '%s' > /dev/null 2>&1", prog, in), 0,
                "a label of 5 with 5 classes was accepted");
  ap_arena_free(a);
  ap_graph_free(g);
}

/* L = sum(w * (x W^T + b)) is linear in W and b, with gradients G_W = w^T x
 * and G_b = column sums of w that do not depend on them; so after k plain
 * SGD steps L = L1 - k lr |G|^2, and with momentum mu the third step's
 * loss is L1 - lr (2 + mu) |G|^2 (v1 = G, v2 = (1 + mu) G). */
static void sgd_check(double momentum) {
  char dir[512], model[640], prog[640], in[640], out[640];
  prepare_case("sgd_gemm", dir, sizeof dir);
  fmt(model, sizeof model, "%s/sgd_gemm.onnx", dir);
  fmt(prog, sizeof prog, "%s/prog_%g", dir, momentum);
  fmt(in, sizeof in, "%s/in_%g", dir, momentum); /* the two checks run side by side */
  fmt(out, sizeof out, "%s/out_%g", dir, momentum);
  make_dirs(in);
  make_dirs(out);
  cg_train_opts o = {.model_name = "sgd", .loss = CG_LOSS_WEIGHTED_SUM, .momentum = momentum,
                     .export_grads = true};
  ap_graph *g = compile_train(model, prog, &o, 0, "-O1");
  int wv = ap_graph_find(g, "W"), bv = ap_graph_find(g, "bias");
  cr_assert(wv >= 0 && bv >= 0 && g->values[wv].data && g->values[bv].data);
  const double *W = g->values[wv].data, *bias = g->values[bv].data;
  ap_arena *a = ap_arena_new();
  feed f = {.n = 2, .name = {"x", "loss_weights"}};
  f.t[0] = new_tensor(a, AP_DT_DOUBLE, 2, (const int64_t[]){3, 4});
  f.t[1] = new_tensor(a, AP_DT_DOUBLE, 2, (const int64_t[]){3, 5});
  random_fill(&f.t[0]);
  random_fill(&f.t[1]);
  write_input(in, &f, 0);
  write_input(in, &f, 1);
  const double *x = f.t[0].data, *w = f.t[1].data;
  double l1 = 0, gw[20] = {0}, gb[5] = {0}, norm2 = 0;
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 5; j++) {
      double y = bias[j];
      for (int k = 0; k < 4; k++) {
        y += x[r * 4 + k] * W[j * 4 + k];
        gw[j * 4 + k] += w[r * 5 + j] * x[r * 4 + k];
      }
      gb[j] += w[r * 5 + j];
      l1 += w[r * 5 + j] * y;
    }
  for (int i = 0; i < 20; i++)
    norm2 += gw[i] * gw[i];
  for (int i = 0; i < 5; i++)
    norm2 += gb[i] * gb[i];
  const double lr = (double)0.05f; /* the program's rate is a float */
  char cmd[2048];
  double losses[3];
  fmt(cmd, sizeof cmd, "'%s/model' --inputs '%s' --outputs '%s' --steps 3 --lr 0.05", prog, in,
      out);
  cr_assert_eq(run_losses(cmd, losses, 3), 3);
  double want[3] = {l1, l1 - lr * norm2,
                    momentum ? l1 - lr * (2 + momentum) * norm2 : l1 - 2 * lr * norm2};
  for (int s = 0; s < 3; s++)
    cr_expect(fabs(losses[s] - want[s]) <= 1e-6 * (1 + fabs(want[s])),
              "momentum %g, step %d: loss %.9g, expected %.9g", momentum, s + 1, losses[s],
              want[s]);
  double last = read_loss(a, out, 1);
  cr_expect(fabs(last - want[2]) <= 1e-12 * (1 + fabs(want[2])),
            "momentum %g: the last loss %.17g, expected %.17g", momentum, last, want[2]);
  /* The exported gradients of the trainable weights are the hand ones. */
  const char *n1 = NULL, *n2 = NULL;
  ap_tensor dw = read_output(a, out, 2, &n1), db = read_output(a, out, 3, &n2);
  cr_assert_str_eq(n1, "grad:W");
  cr_assert_str_eq(n2, "grad:bias");
  for (int i = 0; i < 20; i++)
    cr_expect(fabs(((double *)dw.data)[i] - gw[i]) <= 1e-12, "dW[%d]", i);
  for (int i = 0; i < 5; i++)
    cr_expect(fabs(((double *)db.data)[i] - gb[i]) <= 1e-12, "db[%d]", i);
  ap_arena_free(a);
  ap_graph_free(g);
}

Test(update, sgd_matches_hand_computed_steps) { sgd_check(0); }
Test(update, sgd_with_momentum_matches_hand_computed_steps) { sgd_check(0.9); }

/* A language model's loss: the logits [2, 3, 5] against labels [2, 3] (one
 * per token), the mean over the labels that are not -100; an ignored
 * position has no error. A label of -100 is accepted, -5 refused. */
Test(loss, per_token_cross_entropy_ignores_minus_100) {
  char dir[512], model[640], prog[640], in[640], out[640];
  prepare_case("ce_per_token", dir, sizeof dir);
  fmt(model, sizeof model, "%s/ce_per_token.onnx", dir);
  fmt(prog, sizeof prog, "%s/prog", dir);
  fmt(in, sizeof in, "%s/in", dir);
  fmt(out, sizeof out, "%s/out", dir);
  make_dirs(in);
  make_dirs(out);
  cg_train_opts o = {.model_name = "ce3", .loss = CG_LOSS_SOFTMAX_CE, .grad_inputs = true,
                     .export_grads = true};
  ap_graph *g = compile_train(model, prog, &o, 0, "-O1");
  ap_arena *a = ap_arena_new();
  feed f = {.n = 2, .name = {"x", "labels"}};
  f.t[0] = new_tensor(a, AP_DT_DOUBLE, 3, (const int64_t[]){2, 3, 5});
  random_fill(&f.t[0]);
  f.t[1] = new_tensor(a, AP_DT_INT64, 2, (const int64_t[]){2, 3});
  const int64_t labels[6] = {4, -100, 0, 2, 2, -100};
  memcpy(f.t[1].data, labels, sizeof labels);
  write_input(in, &f, 0);
  write_input(in, &f, 1);
  run_program(prog, in, out, "--steps 1");
  /* By hand: the four counted rows, each row's error divided by 4. */
  const double *z = f.t[0].data;
  double want = 0, want_dz[30] = {0};
  for (int r = 0; r < 6; r++) {
    if (labels[r] == -100)
      continue;
    double dz[5];
    want += cross_entropy(z + 5 * r, &labels[r], 1, 5, dz) / 4;
    for (int c = 0; c < 5; c++)
      want_dz[5 * r + c] = dz[c] / 4;
  }
  double got = read_loss(a, out, 1);
  cr_expect(fabs(got - want) <= 1e-12 * fabs(want), "loss %.17g, expected %.17g", got, want);
  const char *gname = NULL;
  ap_tensor dz = read_output(a, out, 2, &gname);
  cr_assert_str_eq(gname, "grad:x");
  for (int i = 0; i < 30; i++)
    cr_expect(fabs(((double *)dz.data)[i] - want_dz[i]) <= 1e-15,
              "d loss / d z[%d] = %.17g, expected %.17g", i, ((double *)dz.data)[i], want_dz[i]);
  ((int64_t *)f.t[1].data)[1] = -5;
  write_input(in, &f, 1);
  cr_expect_neq(sh("'%s/model' --inputs '%s' > /dev/null 2>&1", prog, in), 0,
                "a label of -5 was accepted");
  ap_arena_free(a);
  ap_graph_free(g);
}

/* ---- training the zoo's mlp and lenet5 ------------------------------------ */

static void train_zoo(const char *name, const int64_t *input_dims, int input_rank) {
  /* 20 steps at lr 0.02 on one fixed batch of 8, which every model starts to
   * memorise: the loss must fall by 0.2 (from ~log 10), in 17 steps of 19 at
   * least. */
  char dir[512], model[640], prog[640], infer[640], in[640], out[640];
  fmt(dir, sizeof dir, WORK_DIR "/zoo_%s", name);
  fmt(model, sizeof model, "%s/%s.onnx", dir, name);
  fmt(prog, sizeof prog, "%s/train", dir);
  fmt(infer, sizeof infer, "%s/infer", dir);
  fmt(in, sizeof in, "%s/in", dir);
  fmt(out, sizeof out, "%s/out", dir);
  make_dirs(in);
  make_dirs(out);
  struct stat st;
  cr_assert(stat(ZOO, &st) == 0, ZOO " is missing (build accpar-zoo)");
  cr_assert_eq(sh("'" ZOO "' --seed 1 --batch 8 -o '%s' %s > /dev/null", dir, name), 0);
  cg_train_opts o = {.model_name = name, .loss = CG_LOSS_SOFTMAX_CE};
  ap_graph *g = compile_train(model, prog, &o, 0, NULL);
  ap_graph_free(g);
  /* Fixed seeded data: images in [-1, 1), labels in [0, 10). */
  ap_arena *a = ap_arena_new();
  feed f = {.n = 2, .name = {"input", "labels"}};
  f.t[0] = new_tensor(a, AP_DT_FLOAT, input_rank, input_dims);
  random_fill(&f.t[0]);
  f.t[1] = new_tensor(a, AP_DT_INT64, 1, (const int64_t[]){8});
  int64_t labels[8];
  for (int i = 0; i < 8; i++)
    labels[i] = (int64_t)((uniform() + 1) * 5) % 10;
  memcpy(f.t[1].data, labels, sizeof labels);
  write_input(in, &f, 0);
  write_input(in, &f, 1);
  char cmd[2048];
  double losses[20];
  fmt(cmd, sizeof cmd, "'%s/model' --inputs '%s' --steps 20 --lr 0.02", prog, in);
  cr_assert_eq(run_losses(cmd, losses, 20), 20);
  /* The same data through the inference program of accparc, and the loss
   * computed here from its logits. */
  cr_assert_eq(sh("'%s' compile '%s' --devices cpu:1 --mode infer -o '%s' > /dev/null", ACCPARC,
                  model, infer),
               0);
  cr_assert_eq(sh("'%s/model' --inputs '%s' --outputs '%s' > /dev/null", infer, in, out), 0);
  ap_tensor logits = read_output(a, out, 0, NULL);
  cr_assert_eq(logits.numel, 80);
  double z[80];
  for (int i = 0; i < 80; i++)
    z[i] = ap_tensor_get_f64(&logits, i);
  double want = cross_entropy(z, labels, 8, 10, NULL);
  cr_expect(fabs(losses[0] - want) <= 1e-5 * (1 + want),
            "%s: first training loss %.6f, cross-entropy of the inference output %.6f", name,
            losses[0], want);
  int down = 0;
  for (int s = 1; s < 20; s++)
    down += losses[s] < losses[s - 1];
  cr_expect(losses[19] < losses[0] - 0.2 && down >= 17,
            "%s: losses do not decrease: first %.6f, last %.6f, %d of 19 steps down", name,
            losses[0], losses[19], down);
  ap_arena_free(a);
}

Test(train, zoo_mlp_loss_decreases_from_the_inference_loss) {
  train_zoo("mlp", (const int64_t[]){8, 784}, 2);
}

Test(train, zoo_lenet5_loss_decreases_from_the_inference_loss) {
  train_zoo("lenet5", (const int64_t[]){8, 1, 32, 32}, 4);
}

/* Residual shortcuts (gradients accumulate at every block input) and
 * BatchNormalization with frozen statistics. */
Test(train, zoo_resnet_small_loss_decreases_from_the_inference_loss) {
  train_zoo("resnet_small", (const int64_t[]){8, 3, 32, 32}, 4);
}

/* Four branches from one input joined by Concat. */
Test(train, zoo_inception_block_loss_decreases_from_the_inference_loss) {
  train_zoo("inception_block", (const int64_t[]){8, 192, 28, 28}, 4);
}
