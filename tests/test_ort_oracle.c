/* ONNX Runtime (tests/ort/run_ort.js) is the reference accpar's generated
 * executables are checked against. Before it can judge anything it is
 * judged itself: on a sample of ONNX's backend node tests and on mnist-8's
 * three test sets, its outputs must equal ONNX's expected outputs within
 * ONNX's own tolerances. The comparison code is checked to reject what it
 * must reject, run_ort.js to fail cleanly on bad input, and every zoo model
 * to run through it on seeded random inputs.
 *
 * Node.js and the npm packages come from scripts/setup-ort.sh. Without them
 * every test that runs ONNX Runtime fails, saying so: a reference that is
 * absent must not look like a reference that agrees. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <assert.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/ort_compare.h"

#define NODE_TESTS ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22"
#define NODE_TESTS_V112 ACCPAR_ONNX_TESTDATA "/node"
#define MNIST ACCPAR_SHARED_DIR "/models/mnist-8"
#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"

enum { MSG = 4096 };

static void require_ort(void) {
  char msg[MSG];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
}

static char *make_temp_dir(void) {
  char *dir = strdup("/tmp/accpar-ort-test-XXXXXX");
  cr_assert_not_null(dir);
  cr_assert_not_null(mkdtemp(dir), "cannot create a temporary folder");
  return dir;
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(path);
    else
      unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* Node tests whose expected outputs ONNX wrote by hand, rounded, so that
 * they hold fewer digits than the default tolerance asks for. Each is
 * compared with the tolerance of its rounding, and must fail with the
 * default one: an entry that stops being needed fails the suite. */
typedef struct loose {
  const char *folder;
  double atol;
  const char *reason;
} loose;

static const loose loose_tests[] = {
    {"test_averagepool_2d_ceil_last_window_starts_on_pad", 5e-5,
     "expected outputs given to 4 decimals (0.1511 for 1.3595/9 = 0.151056)"},
};

static const loose *find_loose(const char *name) {
  for (size_t i = 0; i < sizeof loose_tests / sizeof *loose_tests; i++)
    if (strcmp(loose_tests[i].folder, name) == 0)
      return &loose_tests[i];
  return NULL;
}

/* Runs ONNX Runtime on test_dir/model.onnx with the inputs of data_set and
 * compares with that data set's expected outputs at the default tolerance,
 * or at atol when atol > 0 (then also at the default, whose verdict goes
 * to *strict_ok). */
static bool run_test_folder_tol(const char *test_dir, const char *data_set, double atol,
                                bool *strict_ok, char *msg, size_t cap) {
  char model[4096], data[4096];
  snprintf(model, sizeof model, "%s/model.onnx", test_dir);
  snprintf(data, sizeof data, "%s/%s", test_dir, data_set);
  char *out = make_temp_dir();
  bool ok = ort_run(model, data, out, msg, cap);
  if (ok && atol > 0) {
    char strict_msg[MSG];
    *strict_ok = ort_compare_dirs(data, out, ORT_RTOL, ORT_ATOL, strict_msg, sizeof strict_msg);
    ok = ort_compare_dirs(data, out, ORT_RTOL, atol, msg, cap);
  } else if (ok) {
    ok = ort_compare_dirs(data, out, ORT_RTOL, ORT_ATOL, msg, cap);
  }
  remove_tree(out);
  free(out);
  return ok;
}

static bool run_test_folder(const char *test_dir, const char *data_set, char *msg, size_t cap) {
  return run_test_folder_tol(test_dir, data_set, 0, NULL, msg, cap);
}

/* ---- ONNX's node tests ---------------------------------------------------- */

/* A family of node tests: folders "test_" + a prefix, then the end of the
 * name or '_'. The expanded variants (the operator rewritten into smaller
 * ones by a function body) test ONNX's function definitions, not the
 * operator, and are left out. */
typedef struct family {
  const char *name;
  const char *prefixes[4];
  int min_folders; /* fewer means the data moved, which must not pass quietly */
} family;

static const family families[] = {
    {"conv", {"conv", "basic_conv", "convtranspose"}, 17},
    {"gemm", {"gemm"}, 11},
    {"matmul", {"matmul"}, 7},
    {"pool", {"maxpool", "averagepool", "globalaveragepool"}, 41},
    {"batchnorm", {"batchnorm"}, 4},
    {"softmax", {"softmax", "logsoftmax"}, 14},
    {"layer_normalization", {"layer_normalization"}, 19},
    {"relu", {"relu"}, 1},
    {"add", {"add"}, 8},
    {"concat", {"concat"}, 12},
    /* Dropout's mask is the only bool output of the v1.22 sample. */
    {"dropout", {"dropout_default"}, 5},
};

static bool in_family(const family *f, const char *name) {
  if (strncmp(name, "test_", 5) != 0 || strstr(name, "_expanded"))
    return false;
  const char *rest = name + 5;
  for (int i = 0; i < 4 && f->prefixes[i]; i++) {
    size_t len = strlen(f->prefixes[i]);
    if (strncmp(rest, f->prefixes[i], len) == 0 && (rest[len] == '\0' || rest[len] == '_'))
      return true;
  }
  return false;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_family(const family *f) {
  require_ort();
  DIR *dir = opendir(NODE_TESTS);
  cr_assert_not_null(dir, "cannot open %s", NODE_TESTS);
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (!in_family(f, e->d_name))
      continue;
    names = realloc(names, (n + 1) * sizeof *names);
    cr_assert_not_null(names);
    names[n++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, n, sizeof *names, compare_names);
  cr_assert_geq(n, (size_t)f->min_folders, "%s: %zu test folders in %s, expected at least %d",
                f->name, n, NODE_TESTS, f->min_folders);
  int failed = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096], msg[MSG];
    snprintf(path, sizeof path, "%s/%s", NODE_TESTS, names[i]);
    const loose *l = find_loose(names[i]);
    bool strict_ok = false;
    if (!run_test_folder_tol(path, "test_data_set_0", l ? l->atol : 0, &strict_ok, msg,
                             sizeof msg)) {
      cr_log_error("%s: %s", names[i], msg);
      failed++;
    } else if (l && strict_ok) {
      cr_log_error("%s: passes at the default tolerance; remove it from loose_tests (%s)",
                   names[i], l->reason);
      failed++;
    }
    free(names[i]);
  }
  free(names);
  cr_assert_eq(failed, 0, "%s: ONNX Runtime disagrees with ONNX on %d of %zu node tests",
               f->name, failed, n);
  cr_log_info("%s: %zu node tests agree", f->name, n);
}

/* One test per family, so that a failure names its family. */
#define FAMILY_TEST(test, index)                                         \
  Test(node_tests, test, .timeout = 600) {                               \
    cr_assert_str_eq(families[index].name, #test, "families[] order"); \
    run_family(&families[index]);                                        \
  }
FAMILY_TEST(conv, 0)
FAMILY_TEST(gemm, 1)
FAMILY_TEST(matmul, 2)
FAMILY_TEST(pool, 3)
FAMILY_TEST(batchnorm, 4)
FAMILY_TEST(softmax, 5)
FAMILY_TEST(layer_normalization, 6)
FAMILY_TEST(relu, 7)
FAMILY_TEST(add, 8)
FAMILY_TEST(concat, 9)
FAMILY_TEST(dropout, 10)
static_assert(sizeof families / sizeof families[0] == 11, "a family without its FAMILY_TEST");

/* Element types the v1.22 sample leaves out (float16, float64, strings,
 * bool inputs), from Debian's ONNX 1.12 tests. */
static const char *const dtype_tests[] = {
    "test_cast_DOUBLE_to_FLOAT16", "test_cast_FLOAT16_to_DOUBLE", "test_cast_STRING_to_FLOAT",
    "test_equal_bcast",            "test_not_2d",                 "test_where_example",
    "test_argmax_default_axis_example",
};

Test(node_tests, element_types, .timeout = 300) {
  require_ort();
  int failed = 0;
  size_t n = sizeof dtype_tests / sizeof *dtype_tests;
  for (size_t i = 0; i < n; i++) {
    char path[4096], msg[MSG];
    snprintf(path, sizeof path, "%s/%s", NODE_TESTS_V112, dtype_tests[i]);
    if (!run_test_folder(path, "test_data_set_0", msg, sizeof msg)) {
      cr_log_error("%s: %s", dtype_tests[i], msg);
      failed++;
    }
  }
  cr_assert_eq(failed, 0, "ONNX Runtime disagrees with ONNX on %d of %zu tests in %s", failed,
               n, NODE_TESTS_V112);
}

/* ---- mnist-8 ---------------------------------------------------------------- */

Test(mnist, three_test_sets, .timeout = 300) {
  require_ort();
  for (int s = 0; s < 3; s++) {
    char set[32], msg[MSG];
    snprintf(set, sizeof set, "test_data_set_%d", s);
    cr_expect(run_test_folder(MNIST, set, msg, sizeof msg), "mnist-8 %s: %s", set, msg);
  }
}

/* ort_check is the entry point of the end-to-end tests: it must accept
 * outputs that match ONNX Runtime's and reject ones that do not. */
Test(mnist, ort_check_accepts_and_rejects, .timeout = 300) {
  require_ort();
  char msg[MSG];
  const char *set = MNIST "/test_data_set_0";
  cr_assert(ort_check(MNIST "/model.onnx", set, set, ORT_RTOL, ORT_ATOL, msg, sizeof msg), "%s",
            msg);
  /* The inputs of set 0 against the outputs of set 1: a different digit. */
  cr_assert_not(ort_check(MNIST "/model.onnx", set, MNIST "/test_data_set_1", ORT_RTOL, ORT_ATOL,
                          msg, sizeof msg));
  cr_assert_not_null(strstr(msg, "elements differ"), "unexpected message: %s", msg);
}

/* ---- the comparison itself -------------------------------------------------- */

/* Writes want_dir/output_0.pb (mnist-8's set 0) into a new folder with
 * element 3 changed by delta (or its shape cut to 5 elements). */
static char *perturbed_copy(double delta, bool cut_shape) {
  char *dir = make_temp_dir();
  ap_arena *a = ap_arena_new();
  cr_assert_not_null(a);
  ap_diag d = {0};
  ap_tensor t;
  const char *name;
  cr_assert_eq(ap_read_tensor_pb(MNIST "/test_data_set_0/output_0.pb", a, &t, &name, &d), AP_OK,
               "%s", d.message);
  cr_assert_eq(t.dtype, AP_DT_FLOAT);
  ap_tensor_set_f64(&t, 3, ap_tensor_get_f64(&t, 3) + delta);
  if (cut_shape) {
    t.dims[t.rank - 1] = 5;
    t.numel = 5;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/output_0.pb", dir);
  cr_assert_eq(ap_write_tensor_pb(path, &t, name, &d), AP_OK, "%s", d.message);
  ap_arena_free(a);
  return dir;
}

Test(compare, tolerance_both_ways) {
  const char *want = MNIST "/test_data_set_0";
  char msg[MSG];
  cr_assert(ort_compare_dirs(want, want, 0, 0, msg, sizeof msg), "%s", msg);

  ap_arena *a = ap_arena_new();
  ap_diag d = {0};
  ap_tensor t;
  cr_assert_eq(ap_read_tensor_pb(MNIST "/test_data_set_0/output_0.pb", a, &t, NULL, &d), AP_OK);
  double x = ap_tensor_get_f64(&t, 3);
  ap_arena_free(a);
  double allowed = ORT_ATOL + ORT_RTOL * fabs(x);

  char *inside = perturbed_copy(0.5 * allowed, false);
  cr_expect(ort_compare_dirs(want, inside, ORT_RTOL, ORT_ATOL, msg, sizeof msg),
            "a change of half the tolerance was rejected: %s", msg);
  remove_tree(inside);
  free(inside);

  char *outside = perturbed_copy(2 * allowed, false);
  cr_expect_not(ort_compare_dirs(want, outside, ORT_RTOL, ORT_ATOL, msg, sizeof msg),
                "a change of twice the tolerance was accepted");
  cr_expect_not_null(strstr(msg, "1 of 10 elements differ"), "unexpected message: %s", msg);
  cr_expect_not_null(strstr(msg, "element 3 "), "unexpected message: %s", msg);
  remove_tree(outside);
  free(outside);
}

Test(compare, shape_count_and_name) {
  const char *want = MNIST "/test_data_set_0";
  char msg[MSG];
  char *cut = perturbed_copy(0, true);
  cr_expect_not(ort_compare_dirs(want, cut, ORT_RTOL, ORT_ATOL, msg, sizeof msg));
  cr_expect_not_null(strstr(msg, "shape [1,5], expected [1,10]"), "unexpected message: %s", msg);

  /* An extra output file. */
  char path[4096];
  snprintf(path, sizeof path, "%s/output_1.pb", cut);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fclose(f);
  cr_expect_not(ort_compare_dirs(want, cut, ORT_RTOL, ORT_ATOL, msg, sizeof msg));
  cr_expect_not_null(strstr(msg, "output file(s)"), "unexpected message: %s", msg);
  remove_tree(cut);
  free(cut);

  /* Same values under another name: the outputs would be in another order. */
  char *renamed = make_temp_dir();
  ap_arena *a = ap_arena_new();
  ap_diag d = {0};
  ap_tensor t;
  cr_assert_eq(ap_read_tensor_pb(MNIST "/test_data_set_0/output_0.pb", a, &t, NULL, &d), AP_OK);
  snprintf(path, sizeof path, "%s/output_0.pb", renamed);
  cr_assert_eq(ap_write_tensor_pb(path, &t, "another_output", &d), AP_OK, "%s", d.message);
  ap_arena_free(a);
  ort_msg(msg, sizeof msg, "none");
  /* mnist-8's expected output is unnamed, so the names are not compared... */
  cr_expect(ort_compare_dirs(want, renamed, ORT_RTOL, ORT_ATOL, msg, sizeof msg), "%s", msg);
  /* ...but ONNX Runtime names its outputs, and a different name is caught. */
  char *ort_out = make_temp_dir();
  require_ort();
  cr_assert(ort_run(MNIST "/model.onnx", want, ort_out, msg, sizeof msg), "%s", msg);
  cr_expect_not(ort_compare_dirs(ort_out, renamed, ORT_RTOL, ORT_ATOL, msg, sizeof msg));
  cr_expect_not_null(strstr(msg, "tensor 'another_output', expected 'Plus214_Output_0'"),
                     "unexpected message: %s", msg);
  remove_tree(ort_out);
  free(ort_out);
  remove_tree(renamed);
  free(renamed);
}

/* ---- run_ort.js on bad input -------------------------------------------------- */

/* Runs run_ort.js and expects it to fail with one line containing want. */
static void expect_failure(const char *model, const char *in_dir, const char *want) {
  char msg[MSG];
  char *out = make_temp_dir();
  cr_expect_not(ort_run(model, in_dir, out, msg, sizeof msg), "run_ort.js accepted %s on %s",
                model, in_dir);
  cr_expect_not_null(strstr(msg, want), "message '%s' lacks '%s'", msg, want);
  cr_expect_null(strchr(msg, '\n'), "message is not one line: %s", msg);
  cr_expect_eq(ort_count_outputs(out), 0, "outputs were written despite the error");
  remove_tree(out);
  free(out);
}

Test(run_ort, fails_cleanly, .timeout = 300) {
  require_ort();
  char *in = make_temp_dir();
  /* No input file for the model's only input. */
  expect_failure(MNIST "/model.onnx", in, "input_0.pb is missing: the model's input 0 is 'Input3'");

  /* Not a TensorProto. */
  char path[4096];
  snprintf(path, sizeof path, "%s/input_0.pb", in);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fputs("\xff\xff\xff not protobuf", f);
  fclose(f);
  expect_failure(MNIST "/model.onnx", in, "not a serialized TensorProto");

  /* A tensor named after another input: the files are in the wrong order. */
  snprintf(path, sizeof path, "cp " NODE_TESTS "/test_relu/test_data_set_0/input_0.pb %s/",
           in);
  cr_assert_eq(system(path), 0);
  expect_failure(MNIST "/model.onnx", in, "tensor 'x' given for the model's input 0, 'Input3'");

  /* More input files than the model has inputs. */
  snprintf(path, sizeof path, "cp " MNIST "/test_data_set_0/input_0.pb %s/input_0.pb && cp "
                              MNIST "/test_data_set_0/input_0.pb %s/input_1.pb", in, in);
  cr_assert_eq(system(path), 0);
  expect_failure(MNIST "/model.onnx", in, "the model takes only 1 input(s)");

  /* A tensor of another rank than the input's: ONNX Runtime's complaint. */
  expect_failure(NODE_TESTS "/test_relu/model.onnx", MNIST "/test_data_set_0",
                 "ONNX Runtime run failed: Invalid rank for input: x");

  /* Not a model. */
  snprintf(path, sizeof path, "%s/input_0.pb", in);
  expect_failure(path, in, "ONNX Runtime cannot load the model");
  expect_failure("/nonexistent/model.onnx", in, "no such model file");
  remove_tree(in);
  free(in);
}

/* ---- the zoo on random inputs --------------------------------------------------- */

typedef struct zoo_case {
  const char *model;
  int batch;
  int classes;
} zoo_case;

static const zoo_case zoo_cases[] = {
    {"mlp", 2, 10},          {"lenet5", 2, 10},          {"resnet_small", 2, 10},
    {"resnet_block", 2, 10}, {"inception_block", 2, 10}, {"resnet18", 1, 1000},
};

/* Writes the model with seeded weights, seeded inputs, and runs ONNX
 * Runtime: the outputs must have the zoo's shape, be finite and depend on
 * the input, and two runs must agree bit for bit. */
static void run_zoo_case(const zoo_case *z) {
  require_ort();
  struct stat st;
  cr_assert_eq(stat(ZOO, &st), 0, "%s is not built (cmake --build ... --target accpar-zoo)", ZOO);
  char *dir = make_temp_dir();
  char cmd[8192], model[512], in[512], in2[512], out[512], out2[512], msg[MSG];
  snprintf(cmd, sizeof cmd, "'%s' --seed 5 --batch %d -o '%s' %s > /dev/null", ZOO, z->batch, dir,
           z->model);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
  snprintf(model, sizeof model, "%s/%s.onnx", dir, z->model);
  snprintf(in, sizeof in, "%s/in", dir);
  snprintf(in2, sizeof in2, "%s/in2", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(out2, sizeof out2, "%s/out2", dir);

  cr_assert(ort_make_inputs(model, in, 11, 0, msg, sizeof msg), "%s", msg);
  cr_assert(ort_run(model, in, out, msg, sizeof msg), "%s", msg);
  cr_assert(ort_run(model, in, out2, msg, sizeof msg), "%s", msg);
  cr_expect(ort_compare_dirs(out, out2, 0, 0, msg, sizeof msg), "two runs differ: %s", msg);

  ap_arena *a = ap_arena_new();
  ap_diag d = {0};
  ap_tensor t, t2;
  const char *name;
  char path[1024];
  snprintf(path, sizeof path, "%s/output_0.pb", out);
  cr_assert_eq(ap_read_tensor_pb(path, a, &t, &name, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(name, "output");
  cr_assert_eq(t.dtype, AP_DT_FLOAT);
  cr_assert_eq(t.rank, 2);
  cr_expect_eq(t.dims[0], z->batch);
  cr_expect_eq(t.dims[1], z->classes);
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < t.numel; i++) {
    double v = ap_tensor_get_f64(&t, i);
    cr_assert(isfinite(v), "%s: output element %lld is %g", z->model, (long long)i, v);
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  cr_expect_gt(hi, lo, "%s: every logit is %g", z->model, lo);

  /* Other inputs, other logits: the output is computed from the input. */
  cr_assert(ort_make_inputs(model, in2, 12, 0, msg, sizeof msg), "%s", msg);
  cr_assert(ort_run(model, in2, out2, msg, sizeof msg), "%s", msg);
  snprintf(path, sizeof path, "%s/output_0.pb", out2);
  cr_assert_eq(ap_read_tensor_pb(path, a, &t2, NULL, &d), AP_OK, "%s", d.message);
  bool differ = false;
  for (int64_t i = 0; i < t.numel && !differ; i++)
    differ = ap_tensor_get_f64(&t, i) != ap_tensor_get_f64(&t2, i);
  cr_expect(differ, "%s: seeds 11 and 12 give the same logits", z->model);
  ap_arena_free(a);
  remove_tree(dir);
  free(dir);
}

#define ZOO_TEST(test, index)                                            \
  Test(zoo, test, .timeout = 300) {                                      \
    cr_assert_str_eq(zoo_cases[index].model, #test, "zoo_cases[] order"); \
    run_zoo_case(&zoo_cases[index]);                                     \
  }
ZOO_TEST(mlp, 0)
ZOO_TEST(lenet5, 1)
ZOO_TEST(resnet_small, 2)
ZOO_TEST(resnet_block, 3)
ZOO_TEST(inception_block, 4)
ZOO_TEST(resnet18, 5)
static_assert(sizeof zoo_cases / sizeof zoo_cases[0] == 6, "a zoo case without its ZOO_TEST");

/* make_inputs.js: the same seed gives the same bytes, another seed other
 * bytes, and a symbolic batch dimension needs --batch. */
Test(zoo, make_inputs, .timeout = 300) {
  require_ort();
  char *dir = make_temp_dir();
  char cmd[8192], model[512], a[512], b[512], c[512], msg[MSG];
  snprintf(cmd, sizeof cmd, "'%s' --batch 0 -o '%s' lenet5 > /dev/null", ZOO, dir);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
  snprintf(model, sizeof model, "%s/lenet5.onnx", dir);
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  snprintf(c, sizeof c, "%s/c", dir);
  cr_expect_not(ort_make_inputs(model, a, 3, 0, msg, sizeof msg));
  cr_expect_not_null(strstr(msg, "symbolic dimension 'N': give --batch"), "%s", msg);
  cr_assert(ort_make_inputs(model, a, 3, 4, msg, sizeof msg), "%s", msg);
  cr_assert(ort_make_inputs(model, b, 3, 4, msg, sizeof msg), "%s", msg);
  cr_assert(ort_make_inputs(model, c, 4, 4, msg, sizeof msg), "%s", msg);
  snprintf(cmd, sizeof cmd, "cmp -s '%s/input_0.pb' '%s/input_0.pb'", a, b);
  cr_expect_eq(system(cmd), 0, "seed 3 twice gave different inputs");
  snprintf(cmd, sizeof cmd, "cmp -s '%s/input_0.pb' '%s/input_0.pb'", a, c);
  cr_expect_neq(system(cmd), 0, "seeds 3 and 4 gave the same inputs");

  ap_arena *ar = ap_arena_new();
  ap_diag d = {0};
  ap_tensor t;
  const char *name;
  snprintf(cmd, sizeof cmd, "%s/input_0.pb", a);
  cr_assert_eq(ap_read_tensor_pb(cmd, ar, &t, &name, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(name, "input");
  cr_expect_eq(t.rank, 4);
  cr_expect_eq(t.dims[0], 4);
  cr_expect_eq(t.dims[1], 1);
  cr_expect_eq(t.dims[2], 32);
  cr_expect_eq(t.dims[3], 32);
  double sum = 0;
  for (int64_t i = 0; i < t.numel; i++) {
    double v = ap_tensor_get_f64(&t, i);
    cr_assert(v >= -1 && v < 1, "element %lld is %g, outside [-1, 1)", (long long)i, v);
    sum += v;
  }
  cr_expect_lt(fabs(sum / (double)t.numel), 0.05, "mean %g is far from 0", sum / (double)t.numel);
  ap_arena_free(ar);
  remove_tree(dir);
  free(dir);
}
