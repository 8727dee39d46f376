/* Partitioned inference programs (docs/codegen.md, "The partitioned
 * program"): every device computes its box of every value and the
 * transfers the plan's layouts imply move the rest. Each program must give
 * the outputs of one device (the ONNX node tests' expected outputs, mnist-8's
 * three test sets, the zoo models' and light models' single-device outputs)
 * and its --report must show, device by device, bytes_sent equal to
 * predicted_bytes (the plan's forward bytes, passes/distribute.c); mnist-8
 * also under MPI. The plan's per-device bytes of a training step must add up
 * to the cost model's comm_bytes on two devices, where both count the same
 * conversions. */
#define _GNU_SOURCE /* vasprintf */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accpar/plan.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tests/test_util.h"

#define NODE_DIR ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22"
#define MNIST_DIR ACCPAR_SHARED_DIR "/models/mnist-8"
#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK_DIR ACCPAR_BINARY_DIR "/codegen_partitioned"

static const double RTOL = 1e-4, ATOL = 1e-5;
enum { JOBS = 2, MAX_DEV = 8 };

/* The node tests that fail on one device too (test_codegen_node.c says why). */
static const char *const excluded[] = {
    "test_identity_opt",
    "test_identity_sequence",
    "test_averagepool_2d_ceil_last_window_starts_on_pad",
    "test_training_dropout",
    "test_training_dropout_default",
    "test_training_dropout_default_mask",
    "test_training_dropout_mask",
};

static bool is_excluded(const char *name) {
  for (size_t i = 0; i < sizeof excluded / sizeof excluded[0]; i++)
    if (strcmp(excluded[i], name) == 0)
      return true;
  return false;
}





/* bytes_sent equals predicted_bytes on every device of the report; *moved
 * gets the bytes of all devices. */
static bool bytes_as_predicted(const char *report, int ndev, unsigned long long *moved,
                               char *why, size_t cap) {
  double sent[MAX_DEV], predicted[MAX_DEV];
  int ns = json_array(report, "bytes_sent", sent, MAX_DEV);
  int np = json_array(report, "predicted_bytes", predicted, MAX_DEV);
  *moved = 0;
  if (ns != ndev || np != ndev) {
    fmt(why, cap, "%s: %d bytes_sent and %d predicted_bytes entries for %d devices", report, ns,
        np, ndev);
    return false;
  }
  for (int i = 0; i < ndev; i++) {
    *moved += (unsigned long long)sent[i];
    if (sent[i] != predicted[i]) {
      fmt(why, cap, "%s: device %d sent %.0f bytes, predicted %.0f", report, i, sent[i],
          predicted[i]);
      return false;
    }
  }
  return true;
}

static void log_head(const char *work, char *buf, size_t cap) {
  char path[4096];
  fmt(path, sizeof path, "%s.log", work);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f)
    fclose(f);
  for (char *p = buf; *p; p++)
    if (*p == '\n')
      *p = ' ';
}


static char *strdup_printf(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *strdup_printf(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char *s = NULL;
  cr_assert(vasprintf(&s, f, ap) >= 0);
  va_end(ap);
  return s;
}

/* Compile (with extra options), build and run on data into work/out with a
 * report at work/report.json; messages to work.log. */
static char *job(const char *model, const char *devices, const char *extra, const char *data,
                 const char *work) {
  return strdup_printf(
      "rm -rf '%s' && mkdir -p '%s/out' && "
      "'%s' compile '%s' --devices %s %s --mode infer -o '%s/prog' >'%s.log' 2>&1 && "
      "'%s/prog/model' --inputs '%s' --outputs '%s/out' --report '%s/report.json' >>'%s.log' 2>&1",
      work, work, ACCPARC, model, devices, extra, work, work, work, data, work, work, work);
}


Test(partitioned, node_tests_on_tpuv3_1_tpuv2_2, .timeout = 1800) {
  setenv("CFLAGS", "-O1", 1);
  mkdir(WORK_DIR, 0777);
  mkdir(WORK_DIR "/node", 0777);
  DIR *dir = opendir(NODE_DIR);
  cr_assert(dir, "cannot open %s: %s", NODE_DIR, strerror(errno));
  char **names = NULL, **cmds = NULL;
  int n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    char model[4096];
    fmt(model, sizeof model, "%s/%s/model.onnx", NODE_DIR, e->d_name);
    if (e->d_name[0] == '.' || !exists(model) || is_excluded(e->d_name))
      continue;
    /* The layer tests once more with owt, whose fully-connected layers are
     * type II: partial sums resolved between the devices. */
    bool layer = strncmp(e->d_name, "test_gemm", 9) == 0 ||
                 strncmp(e->d_name, "test_matmul", 11) == 0 ||
                 strncmp(e->d_name, "test_conv", 9) == 0;
    for (int owt = 0; owt <= layer; owt++) {
      if (n == cap) {
        cap = cap ? 2 * cap : 512;
        names = realloc(names, (size_t)cap * sizeof *names);
        cmds = realloc(cmds, (size_t)cap * sizeof *cmds);
        cr_assert(names && cmds);
      }
      names[n] = strdup_printf("%s%s", e->d_name, owt ? "@owt" : "");
      char data[4096], work[4096], extra[4200];
      fmt(data, sizeof data, "%s/%s/test_data_set_0", NODE_DIR, e->d_name);
      fmt(work, sizeof work, "%s/node/%s", WORK_DIR, names[n]);
      fmt(extra, sizeof extra, "--inputs '%s'%s", data, owt ? " --strategy owt" : "");
      cmds[n++] = job(model, "tpuv3:1,tpuv2:2", extra, data, work);
    }
  }
  closedir(dir);
  cr_assert_gt(n, 280, "only %d node test programs from %s", n, NODE_DIR);
  int *status = calloc((size_t)n, sizeof *status);
  cr_assert(status);
  run_all(cmds, n, JOBS, status);
  int passed = 0, failed = 0, moving = 0;
  for (int i = 0; i < n; i++) {
    char data[4096], work[4096], out[4200], report[4200], why[1024] = "", test[256];
    fmt(test, sizeof test, "%s", names[i]);
    *strchrnul(test, '@') = 0;
    fmt(data, sizeof data, "%s/%s/test_data_set_0", NODE_DIR, test);
    fmt(work, sizeof work, "%s/node/%s", WORK_DIR, names[i]);
    fmt(out, sizeof out, "%s/out", work);
    fmt(report, sizeof report, "%s/report.json", work);
    unsigned long long moved = 0;
    bool ok = ran(status[i]);
    if (!ok)
      log_head(work, why, sizeof why);
    ok = ok && outputs_match(data, out, RTOL, ATOL, why, sizeof why) &&
         bytes_as_predicted(report, 3, &moved, why, sizeof why);
    if (ok) {
      passed++;
      moving += moved > 0;
    } else {
      cr_log_error("%s: %s", names[i], why);
      failed++;
    }
    free(names[i]);
    free(cmds[i]);
  }
  printf("partitioned node tests (tpuv3:1,tpuv2:2): %d passed, %d failed, %d moved bytes\n",
         passed, failed, moving);
  fflush(stdout);
  free(names);
  free(cmds);
  free(status);
  cr_assert_eq(failed, 0, "%d node tests failed on tpuv3:1,tpuv2:2 (see above)", failed);
  cr_assert_geq(moving, 5, "only %d node test programs moved bytes", moving);
}

Test(partitioned, mnist8_on_a_mixed_array_and_on_cpu_4, .timeout = 600) {
  setenv("CFLAGS", "-O1", 1);
  mkdir(WORK_DIR, 0777);
  static const struct {
    const char *devices;
    int ndev;
  } arrays[] = {{"tpuv3:1,tpuv2:2", 3}, {"cpu:4", 4}};
  for (int a = 0; a < 2; a++) {
    char work[4096], cmd[16384], why[1024] = "";
    fmt(work, sizeof work, "%s/mnist-8-%d", WORK_DIR, arrays[a].ndev);
    fmt(cmd, sizeof cmd,
        "rm -rf '%s' && '%s' compile '%s/model.onnx' --devices %s --mode infer -o '%s' >'%s.log' 2>&1",
        work, ACCPARC, MNIST_DIR, arrays[a].devices, work, work);
    int st = system(cmd);
    if (st != 0)
      log_head(work, why, sizeof why);
    cr_assert_eq(st, 0, "compiling mnist-8 for %s failed: %s", arrays[a].devices, why);
    for (int set = 0; set < 3; set++) {
      char data[4096], out[4200], report[4300];
      fmt(data, sizeof data, "%s/test_data_set_%d", MNIST_DIR, set);
      fmt(out, sizeof out, "%s/out%d", work, set);
      fmt(report, sizeof report, "%s/report%d.json", work, set);
      fmt(cmd, sizeof cmd,
          "mkdir -p '%s' && '%s/model' --inputs '%s' --outputs '%s' --report '%s' >>'%s.log' 2>&1",
          out, work, data, out, report, work);
      st = system(cmd);
      if (st != 0)
        log_head(work, why, sizeof why);
      cr_assert_eq(st, 0, "running mnist-8 on %s, set %d failed: %s", arrays[a].devices, set, why);
      unsigned long long moved;
      cr_assert(outputs_match(data, out, RTOL, ATOL, why, sizeof why), "mnist-8 on %s, set %d: %s",
                arrays[a].devices, set, why);
      cr_assert(bytes_as_predicted(report, arrays[a].ndev, &moved, why, sizeof why), "%s", why);
      cr_assert_gt(moved, 0, "mnist-8 on %s moved no bytes: is it partitioned?", arrays[a].devices);
    }
  }
}

static const char *const zoo_models[] = {"mlp", "lenet5", "resnet_small", "inception_block"};
static const char *const zoo_arrays[] = {"cpu:2", "cpu:3", "cpu:4", "tpuv3:1,tpuv2:2",
                                         "tpuv3:2,tpuv2:2"};
static const int zoo_ndev[] = {2, 3, 4, 3, 4};
static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
enum { N_ZOO = 4, N_ARRAYS = 5, N_STRATEGIES = 4 };

/* The zoo's models at batch 8 in WORK/sub and one input for each
 * (input_0.pb in WORK/sub/in_MODEL), values from a fixed sequence. */
static void zoo_setup(const char *sub) {
  char cmd[8192];
  mkdir(WORK_DIR, 0777);
  fmt(cmd, sizeof cmd, "rm -rf '%s/%s' && mkdir -p '%s/%s' && '%s' --batch 8 -o '%s/%s' "
      "mlp lenet5 resnet_small inception_block >'%s/%s.log' 2>&1",
      WORK_DIR, sub, WORK_DIR, sub, ZOO, WORK_DIR, sub, WORK_DIR, sub);
  cr_assert_eq(system(cmd), 0, "accpar-zoo failed (see %s/%s.log)", WORK_DIR, sub);
  for (int m = 0; m < N_ZOO; m++) {
    char path[4096], dir[4096];
    fmt(path, sizeof path, "%s/%s/%s.onnx", WORK_DIR, sub, zoo_models[m]);
    ap_graph *g;
    ap_diag d = {0};
    cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
    const ap_value *x = &g->values[g->inputs[0]];
    ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = x->rank};
    memcpy(t.dims, x->dims, sizeof t.dims);
    t.numel = ap_numel(x->rank, x->dims);
    float *data = malloc((size_t)t.numel * sizeof *data);
    cr_assert(data);
    uint64_t state = 12345;
    for (int64_t i = 0; i < t.numel; i++) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      data[i] = (float)((double)(state >> 11) / (double)(1ull << 53) * 2 - 1);
    }
    t.data = data;
    fmt(dir, sizeof dir, "%s/%s/in_%s", WORK_DIR, sub, zoo_models[m]);
    mkdir(dir, 0777);
    fmt(path, sizeof path, "%s/input_0.pb", dir);
    cr_assert_eq(ap_write_tensor_pb(path, &t, x->name, &d), AP_OK, "%s", d.message);
    free(data);
    ap_graph_free(g);
  }
}

Test(partitioned, zoo_models_with_every_strategy_on_2_3_4_devices, .timeout = 1800) {
  setenv("CFLAGS", "-O1", 1);
  zoo_setup("zoo");
  enum { N = N_ZOO * (1 + N_ARRAYS * N_STRATEGIES) };
  char *cmds[N];
  int status[N] = {0}, n = 0;
  /* The single-device programs first: their outputs are the reference. */
  for (int m = 0; m < N_ZOO; m++) {
    char model[4096], data[4096], work[4096];
    fmt(model, sizeof model, "%s/zoo/%s.onnx", WORK_DIR, zoo_models[m]);
    fmt(data, sizeof data, "%s/zoo/in_%s", WORK_DIR, zoo_models[m]);
    fmt(work, sizeof work, "%s/zoo/%s-cpu1", WORK_DIR, zoo_models[m]);
    cmds[n++] = job(model, "cpu:1", "", data, work);
  }
  run_all(cmds, n, JOBS, status);
  for (int m = 0; m < N_ZOO; m++) {
    char work[4096], why[1024] = "";
    fmt(work, sizeof work, "%s/zoo/%s-cpu1", WORK_DIR, zoo_models[m]);
    if (!ran(status[m]))
      log_head(work, why, sizeof why);
    cr_assert(ran(status[m]), "%s on cpu:1: %s", zoo_models[m], why);
    free(cmds[m]);
  }
  n = 0;
  for (int m = 0; m < N_ZOO; m++)
    for (int a = 0; a < N_ARRAYS; a++)
      for (int s = 0; s < N_STRATEGIES; s++) {
        char model[4096], data[4096], work[4096], extra[64];
        fmt(model, sizeof model, "%s/zoo/%s.onnx", WORK_DIR, zoo_models[m]);
        fmt(data, sizeof data, "%s/zoo/in_%s", WORK_DIR, zoo_models[m]);
        fmt(work, sizeof work, "%s/zoo/%s-%s-%s", WORK_DIR, zoo_models[m], zoo_arrays[a],
            strategies[s]);
        fmt(extra, sizeof extra, "--strategy %s", strategies[s]);
        status[n] = 0;
        cmds[n++] = job(model, zoo_arrays[a], extra, data, work);
      }
  run_all(cmds, n, JOBS, status);
  int i = 0, failed = 0, moving = 0;
  for (int m = 0; m < N_ZOO; m++)
    for (int a = 0; a < N_ARRAYS; a++)
      for (int s = 0; s < N_STRATEGIES; s++, i++) {
        char work[4096], ref[4200], out[4200], report[4200], why[1024] = "";
        fmt(work, sizeof work, "%s/zoo/%s-%s-%s", WORK_DIR, zoo_models[m], zoo_arrays[a],
            strategies[s]);
        fmt(ref, sizeof ref, "%s/zoo/%s-cpu1/out", WORK_DIR, zoo_models[m]);
        fmt(out, sizeof out, "%s/out", work);
        fmt(report, sizeof report, "%s/report.json", work);
        unsigned long long moved = 0;
        bool ok = ran(status[i]);
        if (!ok)
          log_head(work, why, sizeof why);
        ok = ok && outputs_match(ref, out, RTOL, ATOL, why, sizeof why) &&
             bytes_as_predicted(report, zoo_ndev[a], &moved, why, sizeof why);
        if (!ok) {
          cr_log_error("%s on %s with %s: %s", zoo_models[m], zoo_arrays[a], strategies[s], why);
          failed++;
        }
        moving += moved > 0;
        free(cmds[i]);
      }
  printf("partitioned zoo programs: %d of %d as on one device with bytes as predicted, "
         "%d moved bytes\n", n - failed, n, moving);
  fflush(stdout);
  cr_assert_eq(failed, 0, "%d zoo programs failed (see above)", failed);
  /* dp splits the batch only: nothing moves in inference; the others must. */
  cr_assert_geq(moving, N_ZOO * N_ARRAYS, "only %d of %d programs moved bytes", moving, n);
}

/* The plan's per-device bytes (what the programs send: passes/distribute.c)
 * are defined for every device of the array and no other, and a training
 * step sends at least its forward pass; that the programs send exactly
 * these bytes is test_train_partitioned's and the partitioned inference
 * tests' business. */
Test(partitioned, plan_device_bytes_on_two_devices, .timeout = 300) {
  zoo_setup("zoo-plan");
  static const char *const pairs[] = {"cpu:2", "tpuv3:1,tpuv2:1"};
  for (int m = 0; m < N_ZOO; m++)
    for (int a = 0; a < 2; a++)
      for (int s = 0; s < N_STRATEGIES; s++) {
        char path[4096];
        fmt(path, sizeof path, "%s/zoo-plan/%s.onnx", WORK_DIR, zoo_models[m]);
        ap_graph *g;
        ap_diag d = {0};
        ap_devices dv;
        ap_plan_opts o = {.devices = &dv};
        cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
        cr_assert_eq(ap_run_pipeline(g, NULL, &d), AP_OK, "%s", d.message);
        cr_assert_eq(ap_devices_parse(pairs[a], &dv, &d), AP_OK, "%s", d.message);
        cr_assert(ap_strategy_parse(strategies[s], &o.strategy));
        cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
        double step = 0;
        for (int dev = 0; dev < 2; dev++) {
          double b = ap_plan_device_bytes(g, dev, true), f = ap_plan_device_bytes(g, dev, false);
          cr_assert_geq(f, 0);
          cr_assert_geq(b, f, "%s on %s with %s: a training step sends less than its forward "
                        "pass", zoo_models[m], pairs[a], strategies[s]);
          step += b;
        }
        cr_assert_gt(step, 0, "%s on %s with %s: a step on two devices sends nothing",
                     zoo_models[m], pairs[a], strategies[s]);
        cr_assert_eq(ap_plan_device_bytes(g, 2, false), -1);
        cr_assert_eq(ap_plan_device_bytes(g, 2, true), -1);
        ap_graph_free(g);
      }
}

/* Batch 1 leaves no batch to split: the light models are planned along
 * their channels (types II and III, Concat and LRN across split channels,
 * Flatten of a channel split) and must still give the one-device outputs. */
Test(partitioned, light_models_split_along_channels, .timeout = 900) {
  setenv("CFLAGS", "-O1", 1);
  mkdir(WORK_DIR, 0777);
  static const char *const models[] = {"light_squeezenet", "light_inception_v1",
                                       "light_densenet121", "light_bvlc_alexnet"};
  static const char *const arrays[] = {"cpu:1", "tpuv3:1,tpuv2:2", "cpu:4"};
  static const int ndev[] = {1, 3, 4};
  enum { M = 4, A = 3 };
  char dir[4096], path[4200];
  fmt(dir, sizeof dir, "%s/light-in", WORK_DIR);
  mkdir(dir, 0777);
  fmt(path, sizeof path, "%s/input_0.pb", dir);
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = 4, .dims = {1, 3, 224, 224}, .numel = 3 * 224 * 224};
  float *data = malloc((size_t)t.numel * sizeof *data);
  cr_assert(data);
  for (int64_t i = 0; i < t.numel; i++)
    data[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  t.data = data;
  ap_diag d = {0};
  cr_assert_eq(ap_write_tensor_pb(path, &t, "data_0", &d), AP_OK, "%s", d.message);
  free(data);
  char *cmds[M * A];
  int status[M * A] = {0};
  for (int m = 0; m < M; m++)
    for (int a = 0; a < A; a++) {
      char model[4096], work[4096];
      fmt(model, sizeof model, "%s/onnx-tests/light/%s.onnx", ACCPAR_SHARED_DIR, models[m]);
      fmt(work, sizeof work, "%s/light/%s-%d", WORK_DIR, models[m], ndev[a]);
      cmds[m * A + a] = job(model, arrays[a], "", dir, work);
    }
  mkdir(WORK_DIR "/light", 0777);
  run_all(cmds, M * A, JOBS, status);
  int failed = 0;
  for (int m = 0; m < M; m++)
    for (int a = 0; a < A; a++) {
      char work[4096], ref[4200], out[4200], report[4200], why[1024] = "";
      fmt(work, sizeof work, "%s/light/%s-%d", WORK_DIR, models[m], ndev[a]);
      fmt(ref, sizeof ref, "%s/light/%s-1/out", WORK_DIR, models[m]);
      fmt(out, sizeof out, "%s/out", work);
      fmt(report, sizeof report, "%s/report.json", work);
      unsigned long long moved = 0;
      bool ok = ran(status[m * A + a]);
      if (!ok)
        log_head(work, why, sizeof why);
      ok = ok && outputs_match(ref, out, RTOL, ATOL, why, sizeof why) &&
           bytes_as_predicted(report, ndev[a], &moved, why, sizeof why) &&
           (ndev[a] == 1 || moved > 0 || (fmt(why, sizeof why, "no bytes moved"), false));
      if (!ok) {
        cr_log_error("%s on %s: %s", models[m], arrays[a], why);
        failed++;
      }
      free(cmds[m * A + a]);
    }
  cr_assert_eq(failed, 0, "%d light-model programs failed (see above)", failed);
}

/* The same program runs under MPI, one rank per device, with the same
 * bytes (when MPI and its runtime archive are there). */
Test(partitioned, mnist8_under_mpi, .timeout = 300) {
  const char *lib = ACCPAR_BINARY_DIR "/runtime/libaccpar_rt_mpi.a";
  if (system("command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1") != 0 ||
      !exists(lib))
    cr_skip_test("no mpirun, mpicc or %s", lib);
  const char *work = WORK_DIR "/mnist-8-mpi";
  mkdir(WORK_DIR, 0777);
  char cmd[16384], why[1024] = "";
  /* OpenMPI's start-up allocations in every rank (from dlopen'd components)
   * are never freed; leak checking stays on for the same programs under
   * the threads transport. */
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s' && CC=mpicc CFLAGS=-O1 ACCPAR_RT_LIB='%s' '%s' compile "
      "'%s/model.onnx' --devices tpuv3:1,tpuv2:2 -o '%s/prog' >'%s.log' 2>&1 && mkdir '%s/out' && "
      "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 3 "
      "'%s/prog/model' --transport mpi "
      "--inputs '%s/test_data_set_1' --outputs '%s/out' --report '%s/report.json' >>'%s.log' 2>&1",
      work, work, lib, ACCPARC, MNIST_DIR, work, work, work, work, MNIST_DIR, work, work, work);
  int st = system(cmd);
  if (st != 0)
    log_head(work, why, sizeof why);
  cr_assert_eq(st, 0, "mnist-8 under MPI failed: %s", why);
  char report[4200];
  fmt(report, sizeof report, "%s/report.json", work);
  unsigned long long moved;
  cr_assert(outputs_match(MNIST_DIR "/test_data_set_1", WORK_DIR "/mnist-8-mpi/out", RTOL, ATOL, why,
                          sizeof why), "%s", why);
  cr_assert(bytes_as_predicted(report, 3, &moved, why, sizeof why), "%s", why);
  cr_assert_gt(moved, 0);
}
