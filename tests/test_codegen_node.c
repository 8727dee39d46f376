/* Both backends (c, llvm) against ONNX's node tests and mnist-8: every folder of
 * node-v1.22, and Debian's v1.12 tests of the operators node-v1.22 does not
 * carry (tests/node_v112.h), is compiled (accparc compile --devices cpu:1 --mode infer),
 * built, run on its test_data_set_0 and compared with output_N.pb (floats
 * within rtol 1e-4 + atol 1e-5, integers and bools exactly). Tests in the
 * exclusion table must fail (and say why); any other must pass, so both a
 * regression and a fixed exclusion make the suite fail. */
#define _POSIX_C_SOURCE 200809L
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

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tests/node_v112.h"
#include "tests/test_util.h"

#define NODE_DIR ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22"
#define MNIST_DIR ACCPAR_SHARED_DIR "/models/mnist-8"
#define WORK_DIR ACCPAR_BINARY_DIR "/codegen_node"

static const double RTOL = 1e-4, ATOL = 1e-5;

/* Each entry fails today for the reason given (dir: the folder it is in). */
static const struct {
  const char *dir;
  const char *name;
  const char *reason;
} excluded[] = {
    {NODE_DIR, "test_identity_opt", "optional input: accpar handles tensors only"},
    {NODE_DIR, "test_identity_sequence", "sequence input: accpar handles tensors only"},
    {NODE_DIR, "test_averagepool_2d_ceil_last_window_starts_on_pad",
     "the expected output is rounded to 4 decimals (0.1511 for the exact mean 0.15106)"},
    {NODE_DIR, "test_training_dropout", "training-mode Dropout draws its mask from numpy's RNG"},
    {NODE_DIR, "test_training_dropout_default",
     "training-mode Dropout draws its mask from numpy's RNG"},
    {NODE_DIR, "test_training_dropout_default_mask",
     "training-mode Dropout draws its mask from numpy's RNG"},
    {NODE_DIR, "test_training_dropout_mask", "training-mode Dropout draws its mask from numpy's RNG"},
    {NODE_V112_DIR, "test_if_seq", "sequence types: accpar handles tensors only"},
    {NODE_V112_DIR, "test_if_opt", "optional(sequence) types: accpar handles tensors only"},
    {NODE_V112_DIR, "test_mod_mixed_sign_float16", "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_einsum_batch_diagonal", "Einsum: a diagonal is not matmul-shaped (refused)"},
    {NODE_V112_DIR, "test_einsum_sum", "Einsum: a sum over an axis is not matmul-shaped (refused)"},
    {NODE_V112_DIR, "test_castlike_BFLOAT16_to_FLOAT",
     "the test data stores bfloat16 tensors as uint16, contradicting the model"},
    {NODE_V112_DIR, "test_castlike_BFLOAT16_to_FLOAT_expanded",
     "the test data stores bfloat16 tensors as uint16, contradicting the model"},
    {NODE_V112_DIR, "test_castlike_DOUBLE_to_FLOAT16",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_DOUBLE_to_FLOAT16_expanded",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT16_to_DOUBLE",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT16_to_DOUBLE_expanded",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT16_to_FLOAT",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT16_to_FLOAT_expanded",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_BFLOAT16",
     "the test data stores bfloat16 tensors as uint16, contradicting the model"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_BFLOAT16_expanded",
     "the test data stores bfloat16 tensors as uint16, contradicting the model"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_FLOAT16",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_FLOAT16_expanded",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_STRING",
     "string tensors are not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_FLOAT_to_STRING_expanded",
     "string tensors are not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_STRING_to_FLOAT",
     "string tensors are not supported by the code generator"},
    {NODE_V112_DIR, "test_castlike_STRING_to_FLOAT_expanded",
     "string tensors are not supported by the code generator"},
    {NODE_V112_DIR, "test_max_float16",
     "float16 is not supported by the code generator"},
    {NODE_V112_DIR, "test_min_float16",
     "float16 is not supported by the code generator"},
};
enum { N_EXCLUDED = sizeof excluded / sizeof excluded[0] };

static const char *exclusion(const char *dir, const char *name) {
  for (int i = 0; i < N_EXCLUDED; i++)
    if (strcmp(excluded[i].dir, dir) == 0 && strcmp(excluded[i].name, name) == 0)
      return excluded[i].reason;
  return NULL;
}





/* Starts sh -c cmd; returns the child's pid. */
static pid_t start(const char *cmd) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Compile, build and run of model on data into work/out; the messages go to
 * work.log. */
static char *job_command(const char *backend, const char *model, const char *data,
                         const char *work) {
  char *cmd = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&cmd, &len);
  cr_assert(f);
  fprintf(f,
          "rm -rf '%s' && mkdir -p '%s/out' && "
          "'%s' compile '%s' --devices cpu:1 --mode infer %s--inputs '%s' -o '%s' >'%s.log' 2>&1 && "
          "'%s/model' --inputs '%s' --outputs '%s/out' >>'%s.log' 2>&1",
          work, work, ACCPARC, model, backend_option(backend), data, work, work, work, data, work,
          work);
  fclose(f);
  return cmd;
}


/* Under the sanitizers the C backend runs every third node test and every
 * test with an operator none before it had: the sanitizers look for memory
 * errors in the compiler and the runtime, which every operator's emitter
 * exercises once, and the whole suite took five of the sanitized pass's
 * seventeen minutes. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED_C 1
#else
#define SANITIZED_C 0
#endif

/* Whether the model at path has an operator not yet in seen (" A B ... "),
 * adding its operators there. */
static bool new_operator(const char *path, char *seen, size_t size) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  if (ap_load_onnx(path, &g, &d) != AP_OK)
    return true;
  bool added = false;
  for (int i = 0; i < g->n_nodes; i++) {
    char key[128];
    fmt(key, sizeof key, " %s ", g->nodes[i].op_type);
    if (strstr(seen, key))
      continue;
    cr_assert_lt(strlen(seen) + strlen(key), size, "too many operators");
    strcat(seen, key + 1);
    added = true;
  }
  ap_graph_free(g);
  return added;
}

typedef struct node_test {
  char name[256];
  pid_t pid;
  int status;
} node_test;

static int by_name(const void *a, const void *b) {
  return strcmp(((const node_test *)a)->name, ((const node_test *)b)->name);
}

static bool every_test(const char *name) { return strncmp(name, "test_", 5) == 0; }

/* Compiles with backend, runs and compares the folders of node_dir that pick
 * selects (at least min_tests of them); work files go to WORK_DIR-backend/tag. */
static void node_suite(const char *backend, const char *node_dir, bool (*pick)(const char *),
                       int min_tests, const char *tag) {
  /* The programs are tiny: -O1 builds them several times faster than -O3.
   * LLVM's default<O3> is fast enough on them, and every operator's kernels
   * go through it here. */
  fast_builds();
  unsetenv("ACCPAR_LLVM_PASSES");
  char work_dir[4096];
  fmt(work_dir, sizeof work_dir, "%s-%s", WORK_DIR, backend);
  mkdir(work_dir, 0777);
  fmt(work_dir, sizeof work_dir, "%s-%s/%s", WORK_DIR, backend, tag);
  mkdir(work_dir, 0777);
  DIR *dir = opendir(node_dir);
  cr_assert(dir, "cannot open %s: %s", node_dir, strerror(errno));
  node_test *tests = NULL;
  int n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    char model[4096];
    fmt(model, sizeof model, "%s/%s/model.onnx", node_dir, e->d_name);
    if (e->d_name[0] == '.' || !pick(e->d_name) || !exists(model))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 512;
      tests = realloc(tests, (size_t)cap * sizeof *tests);
      cr_assert(tests);
    }
    memset(&tests[n], 0, sizeof tests[n]);
    fmt(tests[n++].name, sizeof tests[0].name, "%s", e->d_name);
  }
  closedir(dir);
  cr_assert_geq(n, min_tests, "only %d node tests found in %s", n, node_dir);
  qsort(tests, (size_t)n, sizeof *tests, by_name);
  /* The subset this backend runs (all of them but under the sanitizers). */
  int kept = 0;
  char seen[8192] = " ", model_path[4096];
  for (int i = 0; i < n; i++) {
    fmt(model_path, sizeof model_path, "%s/%s/model.onnx", node_dir, tests[i].name);
    if (backend_runs(backend, i) && (!SANITIZED_C || i % 3 == 0 ||
                                     new_operator(model_path, seen, sizeof seen)))
      tests[kept++] = tests[i];
  }
  n = kept;

  /* Two jobs at a time: the suite's budget is two cores. */
  enum { JOBS = 2 };
  int next = 0, running = 0;
  while (next < n || running) {
    while (running < JOBS && next < n) {
      char model[4096], data[4096], work[4096];
      fmt(model, sizeof model, "%s/%s/model.onnx", node_dir, tests[next].name);
      fmt(data, sizeof data, "%s/%s/test_data_set_0", node_dir, tests[next].name);
      fmt(work, sizeof work, "%s/%s", work_dir, tests[next].name);
      char *cmd = job_command(backend, model, data, work);
      tests[next].pid = start(cmd);
      free(cmd);
      cr_assert_gt(tests[next].pid, 0, "fork failed");
      next++;
      running++;
    }
    int status;
    pid_t done = wait(&status);
    cr_assert_gt(done, 0, "wait failed: %s", strerror(errno));
    for (int i = 0; i < n; i++)
      if (tests[i].pid == done)
        tests[i].status = status;
    running--;
  }

  int passed = 0, n_excluded = 0, failed = 0;
  for (int i = 0; i < n; i++) {
    char data[4096], work[4096], out[4200], why[1024] = "";
    fmt(data, sizeof data, "%s/%s/test_data_set_0", node_dir, tests[i].name);
    fmt(work, sizeof work, "%s/%s", work_dir, tests[i].name);
    fmt(out, sizeof out, "%s/out", work);
    bool ran = WIFEXITED(tests[i].status) && WEXITSTATUS(tests[i].status) == 0;
    if (!ran)
      log_head(work, why, sizeof why);
    bool ok = ran && outputs_match(data, out, RTOL, ATOL, why, sizeof why);
    const char *reason = exclusion(node_dir, tests[i].name);
    if (reason && ok) {
      cr_log_error("%s: excluded (%s) but passes: remove it from the exclusion table",
                   tests[i].name, reason);
      failed++;
    } else if (reason) {
      n_excluded++;
    } else if (!ok) {
      cr_log_error("%s: %s", tests[i].name, why);
      failed++;
    } else {
      passed++;
    }
  }
  for (int i = 0; i < N_EXCLUDED; i++) {
    char model[4096];
    if (strcmp(excluded[i].dir, node_dir) != 0)
      continue;
    fmt(model, sizeof model, "%s/%s/model.onnx", node_dir, excluded[i].name);
    if (!exists(model)) {
      cr_log_error("excluded test %s does not exist", excluded[i].name);
      failed++;
    }
  }
  printf("codegen node tests %s (%s): %d passed, %d excluded\n", tag, backend, passed,
         n_excluded);
  fflush(stdout);
  free(tests);
  cr_assert_eq(failed, 0, "%d node tests failed with the %s backend (see above)", failed, backend);
}

Test(codegen_node, every_node_test_compiles_runs_and_matches, .timeout = 1800) {
  node_suite("c", NODE_DIR, every_test, 250, "v1.22");
}

Test(codegen_node, every_node_test_compiles_runs_and_matches_llvm, .timeout = 1800) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  node_suite("llvm", NODE_DIR, every_test, 250, "v1.22");
}

Test(codegen_node, debian_v1_12_tests_of_the_added_operators, .timeout = 1800) {
  if (!exists(NODE_V112_DIR))
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", NODE_V112_DIR);
  node_suite("c", NODE_V112_DIR, node_v112_selected, 80, "v1.12");
}

Test(codegen_node, debian_v1_12_tests_of_the_added_operators_llvm, .timeout = 1800) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  if (!exists(NODE_V112_DIR))
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", NODE_V112_DIR);
  node_suite("llvm", NODE_V112_DIR, node_v112_selected, 80, "v1.12");
}

static void mnist8_three_test_sets(const char *backend) {
  char work[4096];
  fmt(work, sizeof work, "%s/mnist-8-%s", WORK_DIR, backend);
  mkdir(WORK_DIR, 0777);
  char cmd[8192];
  fmt(cmd, sizeof cmd,
           "rm -rf '%s' && '%s' compile '%s/model.onnx' --devices cpu:1 --mode infer %s-o '%s' "
           ">'%s.log' 2>&1",
           work, ACCPARC, MNIST_DIR, backend_option(backend), work, work);
  char why[1024] = "";
  int st = system(cmd);
  if (st != 0)
    log_head(work, why, sizeof why);
  cr_assert_eq(st, 0, "compiling mnist-8 (%s) failed: %s", backend, why);
  for (int set = 0; set < 3; set++) {
    char data[4096], out[4200];
    fmt(data, sizeof data, "%s/test_data_set_%d", MNIST_DIR, set);
    fmt(out, sizeof out, "%s/out%d", work, set);
    fmt(cmd, sizeof cmd, "mkdir -p '%s' && '%s/model' --inputs '%s' --outputs '%s' >>'%s.log' 2>&1",
             out, work, data, out, work);
    st = system(cmd);
    if (st != 0)
      log_head(work, why, sizeof why);
    cr_assert_eq(st, 0, "running mnist-8 (%s) on set %d failed: %s", backend, set, why);
    cr_assert(outputs_match(data, out, RTOL, ATOL, why, sizeof why), "mnist-8 (%s) set %d: %s",
              backend, set, why);
  }
}

Test(codegen_node, mnist8_reproduces_its_three_test_sets, .timeout = 600) {
  mnist8_three_test_sets("c");
}

Test(codegen_node, mnist8_reproduces_its_three_test_sets_llvm, .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  mnist8_three_test_sets("llvm");
}

/* mnist-8 on tpuv3:1,tpuv2:2 (exchanges between three devices): the LLVM
 * program gives the C program's outputs (rtol 1e-5) and sends the same
 * bytes, and `accparc run` gives the LLVM program's outputs and bytes while
 * writing nothing but what it is asked for. */
Test(codegen_node, accparc_run_and_both_backends_agree_on_a_mixed_array, .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  const char *work = WORK_DIR "/agree";
  const char *data = MNIST_DIR "/test_data_set_1";
  mkdir(WORK_DIR, 0777);
  char cmd[16384], why[1024] = "";
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/c/out' '%s/llvm/out' '%s/run/out' && "
      "for b in c llvm; do '%s' compile '%s/model.onnx' --devices tpuv3:1,tpuv2:2 --backend $b "
      "-o '%s/'$b/prog && '%s/'$b/prog/model --inputs '%s' --outputs '%s/'$b/out "
      "--report '%s/'$b/report.json || exit 1; done >'%s.log' 2>&1 && "
      "cd '%s/run' && '%s' run '%s/model.onnx' --devices tpuv3:1,tpuv2:2 --inputs '%s' "
      "--outputs out --report report.json >>'%s.log' 2>&1",
      work, work, work, work, ACCPARC, MNIST_DIR, work, work, data, work, work, work, work, ACCPARC,
      MNIST_DIR, data, work);
  int st = system(cmd);
  if (st != 0)
    log_head(work, why, sizeof why);
  cr_assert_eq(st, 0, "%s", why);
  char a[4200], b[4200];
  fmt(a, sizeof a, "%s/c/out", work);
  fmt(b, sizeof b, "%s/llvm/out", work);
  cr_assert(outputs_match(a, b, 1e-5, 1e-6, why, sizeof why), "llvm against c: %s", why);
  fmt(a, sizeof a, "%s/run/out", work);
  cr_assert(outputs_match(b, a, 1e-6, 0, why, sizeof why), "run against llvm: %s", why);
  cr_assert(outputs_match(data, a, RTOL, ATOL, why, sizeof why), "run: %s", why);
  double sent[3][3];
  const char *dirs[] = {"c", "llvm", "run"};
  for (int k = 0; k < 3; k++) {
    fmt(a, sizeof a, "%s/%s/report.json", work, dirs[k]);
    double moved;
    cr_assert(bytes_as_predicted(a, 3, &moved, why, sizeof why), "%s", why);
    cr_assert_gt(moved, 0);
    cr_assert_eq(json_array(a, "bytes_sent", sent[k], 3), 3);
  }
  for (int dev = 0; dev < 3; dev++)
    cr_assert(sent[0][dev] == sent[1][dev] && sent[1][dev] == sent[2][dev],
              "device %d: c %.0f, llvm %.0f, run %.0f bytes", dev, sent[0][dev], sent[1][dev],
              sent[2][dev]);
  /* run wrote its outputs and report, nothing else. */
  fmt(cmd, sizeof cmd, "test \"$(ls -A '%s/run')\" = \"out\nreport.json\"", work);
  cr_assert_eq(system(cmd), 0, "accparc run wrote more than its outputs and report");
}

/* --emit-llvm: the same input gives the same module, byte for byte. */
Test(codegen_node, emit_llvm_is_deterministic, .timeout = 300) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  const char *work = WORK_DIR "/emit_llvm";
  mkdir(WORK_DIR, 0777);
  char cmd[16384];
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && for i in 1 2; do '%s' compile '%s/model.onnx' --devices cpu:4 "
      "--backend llvm --emit-llvm --no-build -o '%s' && cp '%s/model.ll' '%s.'$i.ll || exit 1; "
      "done >'%s.log' 2>&1 && cmp '%s.1.ll' '%s.2.ll' && grep -q 'define internal void @cgk_0' "
      "'%s.1.ll' && grep -q 'define internal i32 @ap_device_3' '%s.1.ll'",
      work, ACCPARC, MNIST_DIR, work, work, work, work, work, work, work, work);
  cr_assert_eq(system(cmd), 0, "two --emit-llvm runs differ or lack kernels (see %s.log)", work);
}

/* The number after `key` in the file at path, or -1. */
static long long number_after(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  char line[4096];
  long long v = -1;
  while (v < 0 && fgets(line, sizeof line, f)) {
    char *at = strstr(line, key);
    if (at)
      v = strtoll(at + strlen(key), NULL, 10);
  }
  fclose(f);
  return v;
}

static int count_lines_starting(const char *path, const char *prefix) {
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s", path);
  char line[65536];
  int n = 0;
  while (fgets(line, sizeof line, f))
    n += strncmp(line, prefix, strlen(prefix)) == 0;
  fclose(f);
  return n;
}

/* ResNet-50 repeats its blocks: far fewer kernels than calls, and an arena
 * much smaller than every activation side by side. Its 53 convolutions
 * compute their BatchNormalization, residual Add and Relu in their
 * epilogues (codegen/fuse.c), so it makes 94 calls, not 180. The kernels
 * packing its weights, called once before the steps (on the first run),
 * are not counted among them. */
Test(codegen_node, identical_kernels_are_emitted_once_and_buffers_are_reused, .timeout = 300) {
  const char *work = WORK_DIR "/resnet50";
  mkdir(WORK_DIR, 0777);
  char cmd[8192];
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && '%s' compile '%s/onnx-tests/light/light_resnet50.onnx' --devices cpu:1 "
      "--no-build -o '%s' >'%s.log' 2>&1",
      work, ACCPARC, ACCPAR_SHARED_DIR, work, work);
  cr_assert_eq(system(cmd), 0, "compiling light_resnet50 failed (see %s.log)", work);
  char kernels[4096], dev[4096];
  fmt(kernels, sizeof kernels, "%s/kernels.c", work);
  fmt(dev, sizeof dev, "%s/dev0.c", work);
  int defined = count_lines_starting(kernels, "void cgk_") -
                count_lines_starting(kernels, "/* pack ");
  int called = count_lines_starting(dev, "  cgk_");
  cr_assert_gt(called, 90, "only %d kernel calls", called);
  cr_assert_lt(2 * defined, called, "%d kernels for %d calls", defined, called);
  long long arena = number_after(dev, "arena of "), unshared = number_after(dev, " * (");
  cr_assert_gt(arena, 0);
  cr_assert_lt(2 * arena, unshared, "arena %lld bytes, %lld without reuse", arena, unshared);
}

/* An input bound at compile time fixed a shape: feeding another tensor there
 * must stop the program with an error, not compute with the wrong shape. */
Test(codegen_node, a_bound_input_fed_differently_is_refused, .timeout = 120) {
  const char *work = WORK_DIR "/bound_input";
  const char *test = NODE_DIR "/test_reshape_reordered_all_dims/test_data_set_0";
  const char *other = NODE_DIR "/test_reshape_negative_dim/test_data_set_0";
  char cmd[16384];
  mkdir(WORK_DIR, 0777);
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/in' '%s/out' && cp '%s/input_0.pb' '%s/in/' && "
      "cp '%s/input_1.pb' '%s/in/' && CFLAGS=-O1 '%s' compile '%s/../model.onnx' --devices cpu:1 "
      "--inputs '%s' -o '%s/prog' >'%s.log' 2>&1",
      work, work, work, test, work, other, work, ACCPARC, test, test, work, work);
  cr_assert_eq(system(cmd), 0, "compiling failed (see %s.log)", work);
  fmt(cmd, sizeof cmd, "'%s/prog/model' --inputs '%s' --outputs '%s/out' >'%s.log' 2>&1", work,
      test, work, work);
  cr_assert_eq(system(cmd), 0, "the program fails on the data it was compiled for");
  fmt(cmd, sizeof cmd, "'%s/prog/model' --inputs '%s/in' --outputs '%s/out' >'%s.log' 2>&1",
      work, work, work, work);
  cr_assert_neq(system(cmd), 0, "the program ran with a different shape input");
  char why[1024];
  log_head(work, why, sizeof why);
  cr_assert(strstr(why, "differs from the tensor bound"), "unexpected message: %s", why);
}

/* Runs accparc with args; returns its exit status and its stderr in err. */
static int run_accparc(const char *args, const char *work, char *err, size_t cap) {
  char cmd[16384];
  fmt(cmd, sizeof cmd, "rm -rf '%s' && '%s' %s 2>'%s.log' >/dev/null", work, ACCPARC, args,
      work);
  int st = system(cmd);
  char path[4096];
  fmt(path, sizeof path, "%s.log", work);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(err, 1, cap - 1, f) : 0;
  err[n] = 0;
  if (f)
    fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* accparc args fails with status and one line holding needle, leaving no
 * program in work (each case its own: cases may run at once). */
static void expect_error(const char *work, const char *args, int status, const char *needle) {
  char err[4096], model[4096];
  mkdir(WORK_DIR, 0777);
  cr_assert_eq(run_accparc(args, work, err, sizeof err), status, "accparc %s: %s", args, err);
  cr_assert(strstr(err, needle), "accparc %s: '%s' not in: %s", args, needle, err);
  char *nl = strchr(err, '\n');
  cr_assert(nl && !nl[1], "accparc %s: not one line: %s", args, err);
  fmt(model, sizeof model, "%s/model", work);
  cr_assert(!exists(model), "accparc %s left a program behind", args);
}

/* Without LLVM, --backend llvm and run are refused in one line naming the
 * package; with it, what the LLVM options refuse is one line too. */
Test(codegen_node, llvm_refusals_are_one_line) {
  char args[8192];
  const char *model = MNIST_DIR "/model.onnx", *work = WORK_DIR "/error-llvm";
  if (!LLVM_BUILT) {
    fmt(args, sizeof args, "compile '%s' --devices cpu:1 --backend llvm -o '%s'", model,
        work);
    expect_error(work, args, 2, "llvm-15-dev");
    fmt(args, sizeof args, "run '%s' --devices cpu:1", model);
    expect_error(work, args, 2, "llvm-15-dev");
    return;
  }
  fmt(args, sizeof args, "compile '%s' --devices cpu:1 --emit-llvm -o '%s'", model, work);
  expect_error(work, args, 2, "--emit-llvm needs --backend llvm");
  fmt(args, sizeof args, "run '%s' --devices cpu:1 --transport mpi", model);
  expect_error(work, args, 2, "threads only");
  fmt(args, sizeof args, "run '%s/node/test_cast_FLOAT16_to_FLOAT/model.onnx' --devices cpu:1",
      ACCPAR_ONNX_TESTDATA);
  expect_error(work, args, 1, "element type float16 is not supported");
}

Test(codegen_node, what_the_c_backend_refuses_is_one_line_and_no_program) {
  char args[8192];
  const char *work = WORK_DIR "/error-c";
  fmt(args, sizeof args,
      "compile '%s/node/test_cast_FLOAT16_to_FLOAT/model.onnx' --devices cpu:1 -o '%s'",
      ACCPAR_ONNX_TESTDATA, work);
  expect_error(work, args, 1, "element type float16 is not supported by the C backend");
}
