/* Partitioned inference programs (docs/codegen.md, "The partitioned
 * program") on a real trained model: mnist-8's three test sets on a mixed
 * array, on cpu:4 and under MPI give the expected outputs and send, device
 * by device, the bytes predicted (passes/distribute.c); the plan's device
 * bytes are well formed. The sweep of every model, strategy and array is
 * test_differential.c. */
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
enum { JOBS = 2 };




static void mnist8_on_two_arrays(const char *backend) {
  fast_builds();
  mkdir(WORK_DIR, 0777);
  static const struct {
    const char *devices;
    int ndev;
  } arrays[] = {{"tpuv3:1,tpuv2:2", 3}, {"cpu:4", 4}};
  for (int a = 0; a < 2; a++) {
    char work[4096], cmd[16384], why[1024] = "";
    fmt(work, sizeof work, "%s/mnist-8-%d-%s", WORK_DIR, arrays[a].ndev, backend);
    fmt(cmd, sizeof cmd,
        "rm -rf '%s' && '%s' compile '%s/model.onnx' --devices %s --mode infer %s-o '%s' "
        ">'%s.log' 2>&1",
        work, ACCPARC, MNIST_DIR, arrays[a].devices, backend_option(backend), work, work);
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
      double moved;
      cr_assert(outputs_match(data, out, RTOL, ATOL, why, sizeof why), "mnist-8 on %s, set %d: %s",
                arrays[a].devices, set, why);
      cr_assert(bytes_as_predicted(report, arrays[a].ndev, &moved, why, sizeof why), "%s", why);
      cr_assert_gt(moved, 0, "mnist-8 on %s moved no bytes: is it partitioned?", arrays[a].devices);
    }
  }
}

static const char *const zoo_models[] = {"mlp", "lenet5", "resnet_small", "inception_block"};
static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
enum { N_ZOO = 4, N_STRATEGIES = 4 };

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

/* The same program runs under MPI, one rank per device, with the same
 * bytes (when MPI and its runtime archive are there). */
static void mnist8_under_mpi(const char *backend) {
  const char *lib = ACCPAR_BINARY_DIR "/runtime/libaccpar_rt_mpi.a";
  if (system("command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1") != 0 ||
      !exists(lib))
    cr_skip_test("no mpirun, mpicc or %s", lib);
  char work[4096];
  fmt(work, sizeof work, "%s/mnist-8-mpi-%s", WORK_DIR, backend);
  mkdir(WORK_DIR, 0777);
  char cmd[16384], why[1024] = "", out[4200];
  /* OpenMPI's start-up allocations in every rank (from dlopen'd components)
   * are never freed; leak checking stays on for the same programs under
   * the threads transport. */
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s' && CC=mpicc CFLAGS=-O1 ACCPAR_RT_LIB='%s' '%s' compile "
      "'%s/model.onnx' --devices tpuv3:1,tpuv2:2 %s-o '%s/prog' >'%s.log' 2>&1 && mkdir '%s/out' && "
      "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 3 "
      "'%s/prog/model' --transport mpi "
      "--inputs '%s/test_data_set_1' --outputs '%s/out' --report '%s/report.json' >>'%s.log' 2>&1",
      work, work, lib, ACCPARC, MNIST_DIR, backend_option(backend), work, work, work, work,
      MNIST_DIR, work, work, work);
  int st = system(cmd);
  if (st != 0)
    log_head(work, why, sizeof why);
  cr_assert_eq(st, 0, "mnist-8 under MPI failed: %s", why);
  char report[4200];
  fmt(report, sizeof report, "%s/report.json", work);
  double moved;
  fmt(out, sizeof out, "%s/out", work);
  cr_assert(outputs_match(MNIST_DIR "/test_data_set_1", out, RTOL, ATOL, why, sizeof why), "%s",
            why);
  cr_assert(bytes_as_predicted(report, 3, &moved, why, sizeof why), "%s", why);
  cr_assert_gt(moved, 0);
}

Test(partitioned, mnist8_on_a_mixed_array_and_on_cpu_4, .timeout = 600) {
  mnist8_on_two_arrays("c");
}

Test(partitioned, mnist8_on_a_mixed_array_and_on_cpu_4_llvm, .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  mnist8_on_two_arrays("llvm");
}

Test(partitioned, mnist8_under_mpi, .timeout = 300) {
  mnist8_under_mpi("c");
}

Test(partitioned, mnist8_under_mpi_llvm, .timeout = 300) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  mnist8_under_mpi("llvm");
}
