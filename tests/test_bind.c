/* Binding what a model leaves open (ir/bind.c, ir/rebatch.c).
 *
 * Symbolic dimensions: a model with two (batch_size, samples) compiles
 * with --inputs binding every dim from the files, or with --dim, and its
 * programs equal ONNX Runtime on one device and a mixed array; a program fed
 * another shape refuses naming the input.
 *
 * Re-batching models exported at batch 1: the nine light architectures of
 * ONNX's tests carry their batch of 1 in constant Reshape shapes. Bound to
 * another batch, they plan with every strategy, and their programs at batch
 * 4 (one device and a mixed array) return ONNX's expected batch-1 output for
 * each of four copies of the light input. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "accpar/accpar.h"
#include "ir/ir.h"
#include "ort_compare.h"
#include "test_util.h"

#define TWO_DIMS ACCPAR_SOURCE_DIR "/tests/golden/models/two_dims.onnx"

#define LIGHT ACCPAR_SHARED_DIR "/onnx-tests/light"
#define WORK ACCPAR_BINARY_DIR "/tests/bind"

/* Under the sanitizers, a representative few. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static const char *const light[] = {"light_bvlc_alexnet", "light_squeezenet",
                                    "light_inception_v1", "light_densenet121",
                                    "light_zfnet512",     "light_shufflenet",
                                    "light_inception_v2", "light_resnet50",
                                    "light_vgg19"};
enum { N_LIGHT = sizeof light / sizeof light[0] };

static void make_work(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
}

Test(rebatch, light_models_plan_at_batch_512_with_every_strategy, .init = make_work,
     .timeout = 600) {
  static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
  int n = SANITIZED ? 2 : N_LIGHT;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 4; s++) {
      char cmd[8192];
      fmt(cmd, sizeof cmd,
          "'%s' plan '%s/%s.onnx' --devices tpuv3:64,tpuv2:64 --batch 512 --strategy %s "
          "> '%s/plan.txt' 2> '%s/plan.err'",
          ACCPARC, LIGHT, light[i], strategies[s], WORK, WORK);
      cr_expect_eq(system(cmd), 0, "%s with %s does not plan at batch 512", light[i],
                   strategies[s]);
    }
}

/* dump names each constant it rewrote; the flatten now keeps the batch. */
Test(rebatch, dump_names_every_rewritten_constant, .init = make_work) {
  char cmd[8192];
  fmt(cmd, sizeof cmd, "'%s' dump '%s/light_bvlc_alexnet.onnx' --batch 4 > '%s/dump.txt'",
      ACCPARC, LIGHT, WORK);
  cr_assert_eq(system(cmd), 0);
  FILE *f = fopen(WORK "/dump.txt", "r");
  cr_assert(f);
  char line[4096];
  int rewrites = 0;
  bool flat = false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "rebatched ", 10) == 0) {
      rewrites++;
      cr_expect_str_eq(line, "rebatched OC2_DUMMY_1[0]: 1 -> 4 (node 'n15', Reshape)\n");
    }
    flat |= strstr(line, "-> %r15: float32[4,9216]") != NULL;
  }
  fclose(f);
  cr_expect_eq(rewrites, 1);
  cr_expect(flat, "the flattened activation is not [4,9216]");
}

/* A Reshape whose shape has two places the batch could be (leading 1s) is
 * refused in one line naming the node, not guessed. */
Test(rebatch, an_ambiguous_shape_is_refused) {
  ap_graph *g = ap_graph_new("amb.onnx");
  int x = ap_graph_add_value(g, "x", AP_VAL_INPUT);
  int s = ap_graph_add_value(g, "s", AP_VAL_WEIGHT);
  int y = ap_graph_add_value(g, "y", AP_VAL_NODE);
  cr_assert(x >= 0 && s >= 0 && y >= 0);
  g->values[x].dtype = AP_DT_FLOAT;
  g->values[x].rank = 2;
  g->values[x].dims[0] = 1;
  g->values[x].dims[1] = 8;
  ap_tensor t = {.dtype = AP_DT_INT64, .rank = 1, .dims = {3}, .numel = 3,
                 .data = (int64_t[]){1, 1, 8}};
  cr_assert(ap_value_set_constant(g, s, &t));
  g->values[s].kind = AP_VAL_WEIGHT;
  int n = ap_graph_add_node(g, "flat", "", "Reshape", 2, 1, 0);
  cr_assert_geq(n, 0);
  g->nodes[n].in[0] = x;
  g->nodes[n].in[1] = s;
  g->nodes[n].out[0] = y;
  cr_assert(ap_graph_add_input(g, x) && ap_graph_add_input(g, s) && ap_graph_add_output(g, y));
  g->opset = 17;
  ap_diag d = {0};
  cr_assert_eq(ap_bind_batch(g, 4, &d), AP_ERR_INVALID);
  cr_expect(strstr(d.message, "node 'flat' (Reshape)") != NULL, "%s", d.message);
  cr_expect(strstr(d.message, "two entries of the shape could carry the batch") != NULL, "%s",
            d.message);
  ap_graph_free(g);
}

/* input_0.pb of batch 4: four copies of arange(n) / n, the input ONNX's
 * expected light outputs are for. */
static void four_copies(const char *name, const char *dir) {
  char path[4096];
  fmt(path, sizeof path, "%s/%s.onnx", LIGHT, name);
  ap_graph *g;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  const ap_value *x = NULL;
  for (int i = 0; i < g->n_inputs && !x; i++)
    if (g->values[g->inputs[i]].kind == AP_VAL_INPUT)
      x = &g->values[g->inputs[i]];
  cr_assert(x && x->dims[0] == 1, "%s: no batch-1 input", name);
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = x->rank};
  memcpy(t.dims, x->dims, sizeof t.dims);
  t.dims[0] = 4;
  int64_t per = ap_numel(x->rank, x->dims);
  t.numel = 4 * per;
  float *data = malloc((size_t)t.numel * sizeof *data);
  cr_assert(data);
  for (int64_t i = 0; i < t.numel; i++)
    data[i] = (float)((double)(i % per) / (double)per);
  t.data = data;
  mkdir(dir, 0777);
  fmt(path, sizeof path, "%s/input_0.pb", dir);
  cr_assert_eq(ap_write_tensor_pb(path, &t, x->name, &d), AP_OK, "%s", d.message);
  free(data);
  ap_graph_free(g);
}

/* Every row of got_path against the batch-1 expected output. */
static bool rows_match(const char *got_path, const char *want_path, char *why, size_t cap) {
  ap_arena *a = ap_arena_new();
  ap_diag d = {0};
  ap_tensor got, want;
  cr_assert(a);
  cr_assert_eq(ap_read_tensor_pb(want_path, a, &want, NULL, &d), AP_OK, "%s", d.message);
  bool ok = ap_read_tensor_pb(got_path, a, &got, NULL, &d) == AP_OK;
  if (!ok)
    fmt(why, cap, "%s", d.message);
  else if (got.numel != 4 * want.numel || got.dims[0] != 4 || want.dims[0] != 1)
    ok = false, fmt(why, cap, "%s: %lld elements, %lld rows; expected 4 rows of %lld", got_path,
                    (long long)got.numel, (long long)got.dims[0], (long long)want.numel);
  for (int64_t i = 0; ok && i < got.numel; i++) {
    double gv = ap_tensor_get_f64(&got, i), wv = ap_tensor_get_f64(&want, i % want.numel);
    if (fabs(gv - wv) > 1e-5 + 1e-3 * fabs(wv))
      ok = false, fmt(why, cap, "%s: row %lld element %lld is %.9g, expected %.9g", got_path,
                      (long long)(i / want.numel), (long long)(i % want.numel), gv, wv);
  }
  ap_arena_free(a);
  return ok;
}

/* The light models' weights are all 0.02, so their logits are equal and
 * huge: a summation order that differs by an ulp, as a partitioned layer's
 * does, moves their final Softmax anywhere (test_differential says more).
 * Partitioned programs are compared on the logits: the model up to its final
 * Softmax, written to path. */
static void logits_model(const char *name, const char *path) {
  char src[4096];
  fmt(src, sizeof src, "%s/%s.onnx", LIGHT, name);
  ap_graph *g;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(src, &g, &d), AP_OK, "%s", d.message);
  int y = g->outputs[0], p = g->values[y].producer;
  cr_assert(p >= 0 && g->nodes[p].op == AP_OP_SOFTMAX, "%s does not end in Softmax", name);
  g->outputs[0] = g->nodes[p].in[0];
  g->values[g->outputs[0]].is_graph_output = true;
  g->values[y].is_graph_output = false;
  g->nodes[p].dead = true;
  cr_assert(ap_graph_compact(g));
  cr_assert_eq(ap_write_onnx(g, path, &d), AP_OK, "%s", d.message);
  ap_graph_free(g);
}

/* One program: compile model at batch 4 on devices into WORK/tag, run it on
 * in (a shell command for run_all). */
static char *job(const char *tag, const char *model, const char *devices, const char *in) {
  return xprintf("d='%s/%s' && rm -rf \"$d\" && mkdir -p \"$d/out\" && "
                 "'%s' compile '%s' --batch 4 --devices %s -o \"$d/prog\" > \"$d.log\" 2>&1 && "
                 "\"$d/prog/model\" --inputs '%s' --outputs \"$d/out\" >> \"$d.log\" 2>&1",
                 WORK, tag, ACCPARC, model, devices, in);
}

/* On one device, every light model at batch 4 gives ONNX's expected batch-1
 * output four times; on a mixed array (a few of them, logits), the
 * one-device program's logits. */
Test(rebatch, batch_4_programs_repeat_the_batch_1_outputs, .init = make_work, .timeout = 1800) {
  static const bool mixed[N_LIGHT] = {[0] = true, [2] = true, [5] = true, [7] = true};
  int n = SANITIZED ? 1 : N_LIGHT;
  char *cmds[3 * N_LIGHT];
  int status[3 * N_LIGHT], k = 0, first[N_LIGHT];
  for (int i = 0; i < n; i++) {
    char in[4096], model[4096], logits[4096], tag[256];
    fmt(in, sizeof in, "%s/%s-in", WORK, light[i]);
    fmt(model, sizeof model, "%s/%s.onnx", LIGHT, light[i]);
    fmt(logits, sizeof logits, "%s/%s-logits.onnx", WORK, light[i]);
    four_copies(light[i], in);
    first[i] = k;
    fmt(tag, sizeof tag, "%s-cpu1", light[i]);
    cmds[k++] = job(tag, model, "cpu:1", in);
    if (mixed[i] || SANITIZED) {
      logits_model(light[i], logits);
      fmt(tag, sizeof tag, "%s-logits-cpu1", light[i]);
      cmds[k++] = job(tag, logits, "cpu:1", in);
      fmt(tag, sizeof tag, "%s-logits-mixed", light[i]);
      cmds[k++] = job(tag, logits, "tpuv3:1,tpuv2:2", in);
    }
  }
  run_all(cmds, k, 2, status);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    int j = first[i];
    char got[4096], want[4096], why[8192] = "";
    fmt(got, sizeof got, "%s/%s-cpu1/out/output_0.pb", WORK, light[i]);
    fmt(want, sizeof want, "%s/%s_output_0.pb", LIGHT, light[i]);
    if (!ran(status[j]) || !rows_match(got, want, why, sizeof why)) {
      failed++;
      cr_log_error("%s at batch 4 on cpu:1: %s (see %s.log)", light[i],
                   ran(status[j]) ? why : "compile or run failed", got);
    }
    if (!(mixed[i] || SANITIZED))
      continue;
    fmt(want, sizeof want, "%s/%s-logits-cpu1/out", WORK, light[i]);
    fmt(got, sizeof got, "%s/%s-logits-mixed/out", WORK, light[i]);
    if (!ran(status[j + 1]) || !ran(status[j + 2]) ||
        !outputs_match(want, got, 1e-4, 1e-5, why, sizeof why)) {
      failed++;
      cr_log_error("%s's logits at batch 4 on tpuv3:1,tpuv2:2: %s (see %s.log)", light[i],
                   ran(status[j + 1]) && ran(status[j + 2]) ? why : "compile or run failed", got);
    }
  }
  for (int j = 0; j < k; j++)
    free(cmds[j]);
  cr_assert_eq(failed, 0, "%d batch-4 checks failed", failed);
}

/* x: float32[batch_size, samples] -> Relu -> ReduceMean over samples. */
static void two_dims_input(const char *dir, int64_t n, int64_t samples) {
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = 2, .dims = {n, samples}, .numel = n * samples};
  float *data = malloc((size_t)t.numel * sizeof *data);
  cr_assert(data);
  for (int64_t i = 0; i < t.numel; i++)
    data[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  t.data = data;
  mkdir(dir, 0777);
  char path[4096];
  ap_diag d = {0};
  fmt(path, sizeof path, "%s/input_0.pb", dir);
  cr_assert_eq(ap_write_tensor_pb(path, &t, "x", &d), AP_OK, "%s", d.message);
  free(data);
}

Test(dims, every_dim_bound_from_the_inputs_or_by_name, .init = make_work, .timeout = 300) {
  char msg[2048];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  two_dims_input(WORK "/dims-in", 3, 1600);
  cr_assert(ort_run(TWO_DIMS, WORK "/dims-in", WORK "/dims-ort", msg, sizeof msg), "%s", msg);
  static const char *const arrays[] = {"cpu:1", "tpuv3:1,tpuv2:2"};
  static const char *const binds[] = {"--inputs '" WORK "/dims-in'",
                                      "--dim batch_size=3 --dim samples=1600"};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      char cmd[8192], why[4096] = "";
      fmt(cmd, sizeof cmd,
          "d='%s/dims-%d-%d' && rm -rf \"$d\" && mkdir -p \"$d/out\" && "
          "'%s' compile '%s' --devices %s %s -o \"$d/prog\" > \"$d.log\" 2>&1 && "
          "\"$d/prog/model\" --inputs '%s/dims-in' --outputs \"$d/out\" >> \"$d.log\" 2>&1",
          WORK, a, b, ACCPARC, TWO_DIMS, arrays[a], binds[b], WORK);
      cr_assert_eq(system(cmd), 0, "%s", cmd);
      fmt(cmd, sizeof cmd, "%s/dims-%d-%d/out", WORK, a, b);
      cr_expect(outputs_match(WORK "/dims-ort", cmd, 1e-5, 1e-6, why, sizeof why),
                "%s with %s: %s", arrays[a], binds[b], why);
    }
  /* accparc run binds them the same way. */
  for (int b = 0; LLVM_BUILT && b < 2; b++) {
    char cmd[8192], why[4096] = "";
    fmt(cmd, sizeof cmd,
        "d='%s/dims-run-%d' && rm -rf \"$d\" && mkdir -p \"$d/out\" && "
        "'%s' run '%s' --devices tpuv3:1,tpuv2:2 %s --inputs '%s/dims-in' --outputs \"$d/out\" "
        "> \"$d.log\" 2>&1",
        WORK, b, ACCPARC, TWO_DIMS, binds[b], WORK);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    fmt(cmd, sizeof cmd, "%s/dims-run-%d/out", WORK, b);
    cr_expect(outputs_match(WORK "/dims-ort", cmd, 1e-5, 1e-6, why, sizeof why),
              "accparc run with %s: %s", binds[b], why);
  }
  /* Compiled for [3, 1600], fed [2, 1600]: one line naming the input. */
  two_dims_input(WORK "/dims-other", 2, 1600);
  char cmd[8192];
  fmt(cmd, sizeof cmd, "'%s/dims-0-1/prog/model' --inputs '%s/dims-other' 2> '%s/dims.err'",
      WORK, WORK, WORK);
  int st = system(cmd);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0, "a differently shaped input was accepted");
  FILE *f = fopen(WORK "/dims.err", "r");
  cr_assert(f);
  char line[4096] = "", extra[16];
  cr_assert(fgets(line, sizeof line, f));
  cr_expect(!fgets(extra, sizeof extra, f), "more than one line on stderr");
  fclose(f);
  cr_expect(strstr(line, "input 'x'") && strstr(line, "[3,1600]") && strstr(line, "[2,1600]"),
            "%s", line);
}

/* Values that meet the batch without coming from the input (a class token
 * expanded to the batch and concatenated, a ConstantOfShape padding, a
 * tiled token added) and a Slice of the whole batch: written at batch 1
 * and at batch 2, re-batched to 5, their programs equal ONNX Runtime on the
 * model written at batch 5. */
Test(rebatch, values_meeting_the_batch_follow_it, .init = make_work, .timeout = 600) {
  char msg[2048];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = 3, .dims = {5, 4, 8}, .numel = 160};
  float data[160];
  for (int i = 0; i < 160; i++)
    data[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  t.data = data;
  mkdir(WORK "/meet-in", 0777);
  ap_diag d = {0};
  cr_assert_eq(ap_write_tensor_pb(WORK "/meet-in/input_0.pb", &t, "x", &d), AP_OK, "%s",
               d.message);
  cr_assert(ort_run(ACCPAR_SOURCE_DIR "/tests/golden/models/meets_batch_b5.onnx",
                    WORK "/meet-in", WORK "/meet-ort", msg, sizeof msg), "%s", msg);
  static const int written[] = {1, 2};
  static const char *const arrays[] = {"cpu:1", "tpuv3:1,tpuv2:2"};
  for (int b = 0; b < 2; b++)
    for (int a = 0; a < 2; a++) {
      char cmd[8192], why[4096] = "";
      fmt(cmd, sizeof cmd,
          "d='%s/meet-%d-%d' && rm -rf \"$d\" && mkdir -p \"$d/out\" && "
          "'%s' compile '%s/tests/golden/models/meets_batch_b%d.onnx' --batch 5 --devices %s "
          "-o \"$d/prog\" > \"$d.log\" 2>&1 && "
          "\"$d/prog/model\" --inputs '%s/meet-in' --outputs \"$d/out\" >> \"$d.log\" 2>&1",
          WORK, b, a, ACCPARC, ACCPAR_SOURCE_DIR, written[b], arrays[a], WORK);
      cr_assert_eq(system(cmd), 0, "%s", cmd);
      fmt(cmd, sizeof cmd, "%s/meet-%d-%d/out", WORK, b, a);
      cr_expect(outputs_match(WORK "/meet-ort", cmd, 1e-5, 1e-6, why, sizeof why),
                "written at batch %d, on %s: %s", written[b], arrays[a], why);
    }
}
