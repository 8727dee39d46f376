/* Partitioned training through the driver: data parallelism (--strategy dp)
 * on several devices gives the losses and the updated weights of the
 * one-device program, the bytes each device sends equal the program's
 * prediction, and that prediction is the plan's training-step bytes plus the
 * all-reduces of the parameters the cost model does not charge (biases and
 * BatchNormalization's scale and bias). Plans with type II/III layers are
 * refused in one line naming the layer. */
#define _GNU_SOURCE /* vasprintf */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "runtime/accpar_rt.h"
#include "tests/test_util.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK ACCPAR_BINARY_DIR "/tests/train_partitioned"

enum { MAX_DEV = 8, STEPS = 3, JOBS = 2 };
/* Sums over the batch split across devices change the order of float
 * additions: agreement to 1e-4 relative (plus 1e-6 absolute for elements
 * near zero). */
static const double RTOL = 1e-4, ATOL = 1e-6;

static const char *const models[] = {"mlp", "lenet5", "resnet_small", "inception_block"};
static const char *const arrays[] = {"cpu:2", "cpu:3", "cpu:4", "tpuv3:1,tpuv2:2",
                                     "tpuv3:2,tpuv2:2"};
static const int ndev[] = {2, 3, 4, 3, 4};
enum { N_MODELS = 4, N_ARRAYS = 5 };

static char *strdup_printf(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *strdup_printf(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s = NULL;
  cr_assert(vasprintf(&s, f, ap) >= 0);
  va_end(ap);
  return s;
}

/* A message, truncated if it must be. */
__attribute__((format(printf, 3, 4))) static void say(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, cap, f, ap);
  va_end(ap);
}




/* The numbers of the JSON array after "key": in the file at path. */
static int json_array(const char *path, const char *key, double *out, int cap) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  static char text[1 << 17];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  char quoted[64];
  fmt(quoted, sizeof quoted, "\"%s\":", key);
  char *p = strstr(text, quoted);
  if (!p || !(p = strchr(p, '[')))
    return -1;
  int n = 0;
  for (p++; *p && *p != ']' && n < cap;) {
    char *end;
    out[n++] = strtod(p, &end);
    if (end == p)
      return -1;
    p = end;
    while (*p == ',' || *p == ' ')
      p++;
  }
  return n;
}

static bool close_enough(double got, double want) {
  return fabs(got - want) <= ATOL + RTOL * fabs(want);
}

/* Every output_N.pb of want_dir (the logits, then the updated weights)
 * matches got_dir's; the count of outputs goes to *count. */
static bool outputs_close(const char *want_dir, const char *got_dir, int *count, char *why,
                          size_t cap) {
  *count = 0;
  for (int n = 0;; n++) {
    char want_path[4096], got_path[4096];
    fmt(want_path, sizeof want_path, "%s/output_%d.pb", want_dir, n);
    fmt(got_path, sizeof got_path, "%s/output_%d.pb", got_dir, n);
    if (!exists(want_path))
      return n > 0 || (say(why, cap, "%s holds no output", want_dir), false);
    ap_arena *a = ap_arena_new();
    ap_diag d = {0};
    ap_tensor got, want;
    cr_assert(a);
    bool ok = false;
    if (ap_read_tensor_pb(want_path, a, &want, NULL, &d) != AP_OK ||
        ap_read_tensor_pb(got_path, a, &got, NULL, &d) != AP_OK)
      say(why, cap, "%s", d.message);
    else if (got.numel != want.numel || got.dtype != want.dtype)
      say(why, cap, "%s: %lld elements, expected %lld", got_path, (long long)got.numel,
               (long long)want.numel);
    else {
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < want.numel; i++)
        if (!close_enough(ap_tensor_get_f64(&got, i), ap_tensor_get_f64(&want, i))) {
          if (first < 0)
            first = i;
          bad++;
        }
      ok = bad == 0;
      if (!ok)
        say(why, cap, "%s: %lld of %lld elements differ; first at %lld: %.9g, expected %.9g",
                 got_path, (long long)bad, (long long)want.numel, (long long)first,
                 ap_tensor_get_f64(&got, first), ap_tensor_get_f64(&want, first));
    }
    ap_arena_free(a);
    if (!ok)
      return false;
    (*count)++;
  }
}

/* Bytes device dev of n sends per step to all-reduce the trainable
 * parameters the cost model leaves out: float initializers a node reads
 * other than a layer's weight (input 1 of Conv, Gemm, MatMul) and
 * BatchNormalization's running statistics (inputs 3 and 4). */
static uint64_t uncharged_bytes(const char *model, int n, int dev) {
  ap_graph *g;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(model, &g, &d), AP_OK, "%s", d.message);
  bool *counted = calloc((size_t)g->n_values + 1, sizeof *counted);
  cr_assert(counted);
  uint64_t total = 0;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *nd = &g->nodes[ni];
    for (int i = 0; i < nd->n_in; i++) {
      int v = nd->in[i];
      if (v < 0 || counted[v])
        continue;
      const ap_value *val = &g->values[v];
      if (val->kind != AP_VAL_WEIGHT || !val->data || val->dtype != AP_DT_FLOAT)
        continue;
      bool layer_weight = i == 1 && (nd->op == AP_OP_CONV || nd->op == AP_OP_GEMM ||
                                     nd->op == AP_OP_MATMUL);
      bool statistics = nd->op == AP_OP_BATCH_NORM && (i == 3 || i == 4);
      if (layer_weight || statistics)
        continue;
      counted[v] = true;
      total += aprt_allreduce_bytes(n, ap_numel(val->rank, val->dims), NULL, dev);
    }
  }
  free(counted);
  ap_graph_free(g);
  return total;
}

static void make_models(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
  /* Batch 12: every device of every array gets a share. */
  cr_assert_eq(system("'" ZOO "' --seed 2 --batch 12 -o '" WORK "' mlp lenet5 resnet_small "
                      "inception_block >/dev/null"),
               0);
  setenv("CFLAGS", "-O1", 1);
}

/* Compile for devices with --strategy dp, run 3 steps on the seeded data,
 * write the outputs and the report, and the plan's JSON beside. */
static char *job(const char *model, const char *devices, const char *work) {
  return strdup_printf(
      "rm -rf '%s' && mkdir -p '%s/out' && "
      "'%s' compile '" WORK "/%s.onnx' --devices %s --strategy dp --mode train -o '%s/prog' "
      ">'%s.log' 2>&1 && "
      "'%s/prog/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/out' --report "
      "'%s/report.json' >>'%s.log' 2>&1 && "
      "{ [ %s = cpu:1 ] || '%s' plan '" WORK "/%s.onnx' --devices %s --strategy dp --format json "
      ">'%s/plan.json' 2>>'%s.log'; }",
      work, work, ACCPARC, model, devices, work, work, work, STEPS, work, work, work, devices,
      ACCPARC, model, devices, work, work);
}

Test(train_partitioned, dp_equals_one_device_on_2_3_4_devices, .init = make_models,
     .timeout = 1800) {
  enum { N = N_MODELS * (1 + N_ARRAYS) };
  char *cmds[N];
  char works[N][4096];
  int status[N] = {0}, n = 0;
  for (int m = 0; m < N_MODELS; m++) {
    fmt(works[n], sizeof works[n], "%s/%s-cpu1", WORK, models[m]);
    cmds[n] = job(models[m], "cpu:1", works[n]);
    n++;
    for (int a = 0; a < N_ARRAYS; a++) {
      fmt(works[n], sizeof works[n], "%s/%s-%s", WORK, models[m], arrays[a]);
      cmds[n] = job(models[m], arrays[a], works[n]);
      n++;
    }
  }
  run_all(cmds, n, JOBS, status);
  int agree = 0, weights = 0;
  for (int m = 0; m < N_MODELS; m++) {
    int ref = m * (1 + N_ARRAYS);
    cr_assert(ran(status[ref]), "%s on cpu:1 failed (see %s.log)", models[m], works[ref]);
    char report[4200], out[4200];
    double want[STEPS + 1];
    fmt(report, sizeof report, "%s/report.json", works[ref]);
    cr_assert_eq(json_array(report, "losses", want, STEPS + 1), STEPS, "%s", report);
    for (int a = 0; a < N_ARRAYS; a++) {
      int j = ref + 1 + a;
      const char *w = works[j];
      cr_expect(ran(status[j]), "%s on %s failed (see %s.log)", models[m], arrays[a], w);
      if (!ran(status[j]))
        continue;
      double got[STEPS + 1], sent[MAX_DEV], predicted[MAX_DEV], plan[MAX_DEV];
      fmt(report, sizeof report, "%s/report.json", w);
      cr_assert_eq(json_array(report, "losses", got, STEPS + 1), STEPS, "%s", report);
      bool same = true;
      for (int s = 0; s < STEPS; s++) {
        cr_expect(close_enough(got[s], want[s]), "%s on %s: step %d loss %.9g, one device %.9g",
                  models[m], arrays[a], s + 1, got[s], want[s]);
        same &= close_enough(got[s], want[s]);
      }
      char why[1024] = "", ref_out[4200];
      int count;
      fmt(out, sizeof out, "%s/out", w);
      fmt(ref_out, sizeof ref_out, "%s/out", works[ref]);
      bool match = outputs_close(ref_out, out, &count, why, sizeof why);
      cr_expect(match, "%s on %s: %s", models[m], arrays[a], why);
      /* The logits and at least one weight per layer. */
      cr_expect_geq(count, 4, "%s on %s: %d outputs", models[m], arrays[a], count);
      int nd = ndev[a];
      cr_assert_eq(json_array(report, "bytes_sent", sent, MAX_DEV), nd, "%s", report);
      cr_assert_eq(json_array(report, "predicted_bytes", predicted, MAX_DEV), nd, "%s", report);
      fmt(report, sizeof report, "%s/plan.json", w);
      cr_assert_eq(json_array(report, "device_step_bytes", plan, MAX_DEV), nd, "%s", report);
      char model[4200];
      fmt(model, sizeof model, "%s/%s.onnx", WORK, models[m]);
      bool bytes = true;
      for (int dev = 0; dev < nd; dev++) {
        cr_expect_eq(sent[dev], predicted[dev], "%s on %s: device %d sent %.0f bytes, predicted %.0f",
                     models[m], arrays[a], dev, sent[dev], predicted[dev]);
        cr_expect_gt(sent[dev], 0, "%s on %s: device %d sent nothing", models[m], arrays[a], dev);
        /* The program all-reduces every trainable parameter; the plan's
         * step charges the layers' weights only. */
        double extra = (double)uncharged_bytes(model, nd, dev);
        cr_expect_eq(predicted[dev], STEPS * (plan[dev] + extra),
                     "%s on %s: device %d predicts %.0f bytes for %d steps; the plan's step "
                     "%.0f plus %.0f uncharged, times %d, is %.0f",
                     models[m], arrays[a], dev, predicted[dev], STEPS, plan[dev], extra, STEPS,
                     STEPS * (plan[dev] + extra));
        bytes &= sent[dev] == predicted[dev] && predicted[dev] == STEPS * (plan[dev] + extra);
      }
      agree += same && match && bytes;
      weights += match ? count : 0;
    }
  }
  for (int i = 0; i < n; i++)
    free(cmds[i]);
  cr_log_info("dp training: %d of %d model x array runs agree with one device (%d outputs "
              "compared)", agree, N_MODELS * N_ARRAYS, weights);
  cr_expect_eq(agree, N_MODELS * N_ARRAYS);
}

Test(train_partitioned, type_ii_and_iii_layers_are_refused_in_one_line, .init = make_models) {
  static const char *const strategies[] = {"owt", "hypar", "accpar"};
  for (int s = 0; s < 3; s++) {
    char cmd[8192], err[4096];
    fmt(err, sizeof err, "%s/refused-%s.err", WORK, strategies[s]);
    fmt(cmd, sizeof cmd,
        "rm -rf '%s/refused' && '%s' compile '%s/mlp.onnx' --devices cpu:2 --strategy %s "
        "--mode train -o '%s/refused' 2>'%s'",
        WORK, ACCPARC, WORK, strategies[s], WORK, err);
    int st = system(cmd);
    /* A plan of type-I layers only trains; the others are refused. */
    char plan[8192];
    fmt(plan, sizeof plan,
        "'%s' plan '%s/mlp.onnx' --devices cpu:2 --strategy %s --format json | "
        "grep -q '\"types\": \\[\"I\\(I\\|II\\)\"\\]'",
        ACCPARC, WORK, strategies[s]);
    if (system(plan) != 0) {
      cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: a type-I plan must train",
                strategies[s]);
      continue;
    }
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: exit status %d", strategies[s],
              WEXITSTATUS(st));
    cr_expect(!exists(WORK "/refused/model"), "%s: a refused compile left a program",
              strategies[s]);
    FILE *f = fopen(err, "r");
    cr_assert(f);
    char line[2048] = "";
    int lines = 0;
    for (char buf[2048]; fgets(buf, sizeof buf, f); lines++)
      if (!lines)
        say(line, sizeof line, "%s", buf);
    fclose(f);
    cr_expect_eq(lines, 1, "%s: %d lines on stderr", strategies[s], lines);
    cr_expect(strstr(line, "mlp.onnx: node 'fc") && strstr(line, "(Gemm)") &&
                  strstr(line, "type II/III layers is not generated yet"),
              "%s: %s", strategies[s], line);
  }
}

Test(train_partitioned, dp_under_mpi_equals_threads, .init = make_models, .timeout = 600) {
  const char *lib = ACCPAR_BINARY_DIR "/runtime/libaccpar_rt_mpi.a";
  if (system("command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1") != 0 ||
      !exists(lib))
    cr_skip_test("no mpirun, mpicc or %s", lib);
  /* The same program under both transports: one process per device must
   * give the threads' losses, weights and bytes. */
  const char *w = WORK "/mpi";
  char cmd[16384];
  /* OpenMPI's start-up allocations in every rank (from dlopen'd components)
   * are never freed; leak checking stays on for the same programs under
   * the threads transport. */
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/threads' '%s/mpi' && CC=mpicc ACCPAR_RT_LIB='%s' '%s' compile "
      "'" WORK "/lenet5.onnx' --devices tpuv3:1,tpuv2:2 --strategy dp --mode train -o '%s/prog' "
      ">'%s.log' 2>&1 && '%s/prog/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/threads' "
      "--report '%s/threads.json' >>'%s.log' 2>&1 && ASAN_OPTIONS=detect_leaks=0 "
      "mpirun --allow-run-as-root --oversubscribe "
      "-np 3 '%s/prog/model' --transport mpi --steps %d --lr 0.05 --seed 4 --outputs '%s/mpi' "
      "--report '%s/mpi.json' >>'%s.log' 2>&1",
      w, w, w, lib, ACCPARC, w, w, w, STEPS, w, w, w, w, STEPS, w, w, w);
  cr_assert_eq(system(cmd), 0, "see %s.log", w);
  char a[4200], b[4200], why[1024] = "";
  double la[STEPS + 1], lb[STEPS + 1], sa[MAX_DEV], sb[MAX_DEV], pb[MAX_DEV];
  fmt(a, sizeof a, "%s/threads.json", w);
  fmt(b, sizeof b, "%s/mpi.json", w);
  cr_assert_eq(json_array(a, "losses", la, STEPS + 1), STEPS);
  cr_assert_eq(json_array(b, "losses", lb, STEPS + 1), STEPS);
  for (int s = 0; s < STEPS; s++)
    cr_expect(close_enough(lb[s], la[s]), "step %d: mpi %.9g, threads %.9g", s + 1, lb[s], la[s]);
  cr_assert_eq(json_array(a, "bytes_sent", sa, MAX_DEV), 3);
  cr_assert_eq(json_array(b, "bytes_sent", sb, MAX_DEV), 3);
  cr_assert_eq(json_array(b, "predicted_bytes", pb, MAX_DEV), 3);
  for (int dev = 0; dev < 3; dev++) {
    cr_expect_eq(sb[dev], pb[dev], "device %d under mpi: %.0f bytes, predicted %.0f", dev, sb[dev],
                 pb[dev]);
    cr_expect_eq(sb[dev], sa[dev], "device %d: mpi %.0f bytes, threads %.0f", dev, sb[dev],
                 sa[dev]);
  }
  int count;
  fmt(a, sizeof a, "%s/threads", w);
  fmt(b, sizeof b, "%s/mpi", w);
  cr_expect(outputs_close(a, b, &count, why, sizeof why), "%s", why);
}
