/* ONNX's own backend node tests as an oracle for shape inference and
 * folding. For every test folder of a supported operator: load model.onnx,
 * bind test_data_set_0/input_N.pb as constants, run the pipeline, and check
 * each graph output's dtype and shape against output_N.pb. Where folding made
 * an output constant, its values are compared too (rtol 1e-4, atol 1e-5):
 * an independent check of the folding kernels.
 *
 * The exclusion table below is part of the test: an excluded folder that
 * passes fails the suite, so every entry must keep earning its place. Also
 * covered: the nine light/ architectures and mnist-8, whose outputs are
 * checked for shape after the pipeline runs on their declared inputs. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* Operators whose tests are run, as folder-name prefixes ("test_" + prefix,
 * then the end of the name, '_' or a digit: test_and2d). */
static const char *const op_prefixes[] = {
    "conv", "basic_conv", "convtranspose", "gemm", "matmul", "relu", "sigmoid", "tanh",
    "maxpool", "averagepool", "globalaveragepool", "batchnorm", "lrn", "add", "sub", "mul",
    "div", "sum", "flatten", "reshape", "transpose", "concat", "split", "slice", "softmax",
    "logsoftmax", "layer_normalization", "gelu", "identity", "dropout", "training_dropout",
    "constant", "constantofshape", "shape", "cast", "reduce_mean", "reduce_sum",
    "reduce_max", "unsqueeze", "squeeze", "gather", "clip",
    "leakyrelu", "prelu", "elu", "selu", "celu", "hardsigmoid", "hardswish", "softplus",
    "softsign", "thresholdedrelu", "mish", "sin", "cos", "floor", "ceil", "round", "sign",
    "isnan", "isinf", "mod", "greater_equal", "less_equal", "not", "and", "or", "xor",
    "edge_pad", "reflect_pad", /* test_constant_pad: "constant" */
    "tile", "depthtospace", "spacetodepth", "resize", "upsample",
    "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2", "reduce_log_sum_exp", "argmax",
    "argmin", "cumsum", "tril", "triu", "onehot", "top_k",
    "gather_elements", "gathernd", "scatter_elements", "scatternd", "instancenorm", "mvn",
    "einsum",
    "lstm", "gru", "rnn", "simple_rnn", "if", "loop11",
    /* original operators whose tests only Debian's v1.12 data carries */
    "exp", "log", "sqrt", "neg", "abs", "reciprocal", "erf", "castlike", "pow", "max", "min",
    "where", "less", "greater", "equal", "globalmaxpool", "expand", "size", "range",
};

typedef struct exclusion {
  const char *suite;  /* "v1.22", "v1.12" or "*" */
  const char *folder;
  const char *reason;
} exclusion;

static const exclusion exclusions[] = {
    {"*", "test_identity_opt", "optional(sequence) types: accpar handles tensors only"},
    {"*", "test_identity_sequence", "sequence types: accpar handles tensors only"},
    {"v1.12", "test_if_seq", "sequence types: accpar handles tensors only"},
    {"v1.12", "test_if_opt", "optional(sequence) types: accpar handles tensors only"},
    /* ONNX <= 1.12 wrote bfloat16 test tensors with data_type UINT16; the
     * models declare bfloat16, so the data contradicts the model. */
    {"v1.12", "test_cast_BFLOAT16_to_FLOAT", "input data stored as uint16, model says bfloat16"},
    {"v1.12", "test_cast_FLOAT_to_BFLOAT16", "expected output stored as uint16, not bfloat16"},
    {"v1.12", "test_castlike_BFLOAT16_to_FLOAT", "input data stored as uint16, model says bfloat16"},
    {"v1.12", "test_castlike_BFLOAT16_to_FLOAT_expanded", "input data stored as uint16, model says bfloat16"},
    {"v1.12", "test_castlike_FLOAT_to_BFLOAT16", "'like' stored as uint16, model says bfloat16"},
    {"v1.12", "test_castlike_FLOAT_to_BFLOAT16_expanded", "'like' stored as uint16, model says bfloat16"},
    {"v1.12", "test_einsum_batch_diagonal", "Einsum: a diagonal is not matmul-shaped (refused)"},
    {"v1.12", "test_einsum_sum", "Einsum: a sum over an axis is not matmul-shaped (refused)"},
};

static bool selected(const char *name) {
  if (strncmp(name, "test_", 5) != 0)
    return false;
  const char *rest = name + 5;
  for (size_t i = 0; i < sizeof op_prefixes / sizeof *op_prefixes; i++) {
    size_t len = strlen(op_prefixes[i]);
    if (strncmp(rest, op_prefixes[i], len) == 0 &&
        (rest[len] == '\0' || rest[len] == '_' || isdigit((unsigned char)rest[len])))
      return true;
  }
  return false;
}

static const exclusion *excluded(const char *suite, const char *name) {
  for (size_t i = 0; i < sizeof exclusions / sizeof *exclusions; i++)
    if ((strcmp(exclusions[i].suite, "*") == 0 || strcmp(exclusions[i].suite, suite) == 0) &&
        strcmp(exclusions[i].folder, name) == 0)
      return &exclusions[i];
  return NULL;
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool close_enough(double got, double want) {
  if (isnan(want))
    return isnan(got);
  if (isinf(want))
    return got == want;
  return fabs(got - want) <= 1e-5 + 1e-4 * fabs(want);
}

/* Compares graph output v with the expected tensor; why it differs in msg. */
static bool output_matches(const ap_graph *g, int v, const ap_tensor *want, bool *compared,
                           char *msg, size_t cap) {
  const ap_value *val = &g->values[v];
  *compared = false;
  if (val->dtype != want->dtype) {
    snprintf(msg, cap, "output '%s': dtype %s, expected %s", val->name,
             ap_dtype_name(val->dtype), ap_dtype_name(want->dtype));
    return false;
  }
  bool same = val->rank == want->rank;
  for (int i = 0; same && i < want->rank; i++)
    same = val->dims[i] == want->dims[i];
  if (!same) {
    char got_s[128] = "", want_s[128] = "";
    for (int i = 0; i < val->rank && i < AP_MAX_RANK; i++)
      snprintf(got_s + strlen(got_s), sizeof got_s - strlen(got_s), "%s%lld", i ? "," : "",
               (long long)val->dims[i]);
    for (int i = 0; i < want->rank; i++)
      snprintf(want_s + strlen(want_s), sizeof want_s - strlen(want_s), "%s%lld",
               i ? "," : "", (long long)want->dims[i]);
    snprintf(msg, cap, "output '%s': shape [%s] (rank %d), expected [%s]", val->name, got_s,
             val->rank, want_s);
    return false;
  }
  if (!val->data)
    return true;
  *compared = true;
  ap_tensor got = ap_value_tensor(val);
  for (int64_t i = 0; i < want->numel; i++) {
    bool ok;
    if (want->dtype == AP_DT_STRING)
      ok = strcmp(((char **)got.data)[i], ((char **)want->data)[i]) == 0;
    else if (ap_dtype_is_float(want->dtype))
      ok = close_enough(ap_tensor_get_f64(&got, i), ap_tensor_get_f64(want, i));
    else
      ok = ap_tensor_get_i64(&got, i) == ap_tensor_get_i64(want, i);
    if (!ok) {
      snprintf(msg, cap, "output '%s': folded element %lld is %g, expected %g", val->name,
               (long long)i,
               want->dtype == AP_DT_STRING ? 0.0 : ap_tensor_get_f64(&got, i),
               want->dtype == AP_DT_STRING ? 0.0 : ap_tensor_get_f64(want, i));
      return false;
    }
  }
  return true;
}

/* Runs one test folder; false with the reason in msg on failure. *folded
 * counts outputs whose values were compared; *status is the pipeline's. */
static bool run_folder(const char *dir, char *msg, size_t cap, int *folded,
                       ap_status *status) {
  char path[8192];
  ap_diag d = {0};
  ap_graph *g = NULL;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  *status = AP_OK;
  if ((*status = ap_load_onnx(path, &g, &d)) != AP_OK) {
    snprintf(msg, cap, "load: %.900s", d.message);
    return false;
  }
  /* A model without inputs (a lone Constant) has no input_0.pb to bind. */
  snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", dir);
  bool has_inputs = file_exists(path);
  snprintf(path, sizeof path, "%s/test_data_set_0", dir);
  if ((has_inputs && (*status = ap_bind_inputs_dir(g, path, &d)) != AP_OK) ||
      (*status = ap_run_pipeline(g, NULL, &d)) != AP_OK) {
    snprintf(msg, cap, "%.1000s", d.message);
    ap_graph_free(g);
    return false;
  }
  bool ok = true;
  ap_arena *a = ap_arena_new();
  cr_assert_not_null(a);
  for (int i = 0; ok && i < g->n_outputs; i++) {
    snprintf(path, sizeof path, "%s/test_data_set_0/output_%d.pb", dir, i);
    ap_tensor want;
    if (ap_read_tensor_pb(path, a, &want, NULL, &d) != AP_OK) {
      snprintf(msg, cap, "expected output: %.900s", d.message);
      ok = false;
      break;
    }
    bool compared;
    ok = output_matches(g, g->outputs[i], &want, &compared, msg, cap);
    *folded += compared;
  }
  ap_arena_free(a);
  ap_graph_free(g);
  return ok;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every selected folder of root; returns the number of failures. */
static int run_suite(const char *suite, const char *root) {
  DIR *dir = opendir(root);
  cr_assert_not_null(dir, "cannot open %s", root);
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (!selected(e->d_name))
      continue;
    names = realloc(names, (n + 1) * sizeof *names);
    cr_assert_not_null(names);
    names[n++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, n, sizeof *names, compare_names);
  int passed = 0, n_excluded = 0, failures = 0, folded = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096], msg[1024] = "";
    snprintf(path, sizeof path, "%s/%s", root, names[i]);
    ap_status st;
    bool ok = run_folder(path, msg, sizeof msg, &folded, &st);
    const exclusion *ex = excluded(suite, names[i]);
    if (ex && ok) {
      fprintf(stderr, "%s %s: excluded (%s) but passes; drop the exclusion\n", suite,
              names[i], ex->reason);
      failures++;
    } else if (ex) {
      n_excluded++;
    } else if (ok) {
      passed++;
    } else {
      fprintf(stderr, "%s %s: FAIL: %s\n", suite, names[i], msg);
      failures++;
    }
    free(names[i]);
  }
  free(names);
  printf("node tests %s: %d passed, %d excluded, %d failed (%d folded outputs compared by "
         "value)\n",
         suite, passed, n_excluded, failures, folded);
  fflush(stdout);
  cr_expect_gt(passed, 0, "no %s node test ran", suite);
  return failures;
}

Test(node_tests, onnx_v1_22) {
  cr_expect_eq(run_suite("v1.22", ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22"), 0);
}

Test(node_tests, onnx_v1_12) {
  const char *root = ACCPAR_ONNX_TESTDATA "/node";
  struct stat st;
  if (stat(root, &st) != 0) {
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", root);
  }
  cr_expect_eq(run_suite("v1.12", root), 0);
}

/* The v1.12 package's other suites (models converted from PyTorch modules
 * and operators, and small hand-made models) mix supported and unsupported
 * operators. Every folder is run; one the pipeline rejects as unsupported
 * is counted, not failed, and every other must match its outputs. */
static int run_mixed_suite(const char *suite, const char *root, int *n_unsupported) {
  DIR *dir = opendir(root);
  if (!dir)
    return 0;
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (strncmp(e->d_name, "test_", 5) != 0)
      continue;
    names = realloc(names, (n + 1) * sizeof *names);
    cr_assert_not_null(names);
    names[n++] = strdup(e->d_name);
  }
  closedir(dir);
  qsort(names, n, sizeof *names, compare_names);
  int passed = 0, failures = 0, folded = 0;
  *n_unsupported = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096], data[8192], msg[1024] = "";
    bool fits = snprintf(path, sizeof path, "%s/%s", root, names[i]) < (int)sizeof path;
    snprintf(data, sizeof data, "%s/test_data_set_0/output_0.pb", path);
    if (fits && file_exists(data)) {
      ap_status st;
      if (run_folder(path, msg, sizeof msg, &folded, &st))
        passed++;
      else if (st == AP_ERR_UNSUPPORTED)
        ++*n_unsupported;
      else {
        fprintf(stderr, "%s %s: FAIL: %s\n", suite, names[i], msg);
        failures++;
      }
    }
    free(names[i]);
  }
  free(names);
  printf("node tests %s: %d passed, %d with unsupported operators, %d failed\n", suite,
         passed, *n_unsupported, failures);
  fflush(stdout);
  return failures;
}

Test(node_tests, onnx_v1_12_converted_models) {
  static const char *const suites[] = {"pytorch-converted", "pytorch-operator", "simple"};
  for (int i = 0; i < 3; i++) {
    char root[4096];
    int unsupported;
    snprintf(root, sizeof root, "%s/%s", ACCPAR_ONNX_TESTDATA, suites[i]);
    cr_expect_eq(run_mixed_suite(suites[i], root, &unsupported), 0);
  }
}

/* Loads a model with its declared inputs, runs the pipeline and checks that
 * output 0 has the expected dtype and shape. */
static void check_model(const char *model, const char *expected) {
  ap_diag d = {0};
  ap_graph *g = NULL;
  cr_assert_eq(ap_load_onnx(model, &g, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, NULL, &d), AP_OK, "%s", d.message);
  ap_arena *a = ap_arena_new();
  ap_tensor want;
  cr_assert_eq(ap_read_tensor_pb(expected, a, &want, NULL, &d), AP_OK, "%s", d.message);
  char msg[1024] = "";
  bool compared;
  cr_expect(output_matches(g, g->outputs[0], &want, &compared, msg, sizeof msg), "%s: %s",
            model, msg);
  ap_arena_free(a);
  ap_graph_free(g);
}

Test(models, light_architectures) {
  static const char *const names[] = {"bvlc_alexnet", "densenet121", "inception_v1",
                                      "inception_v2", "resnet50",    "shufflenet",
                                      "squeezenet",   "vgg19",       "zfnet512"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char model[4096], out[4096];
    snprintf(model, sizeof model, "%s/onnx-tests/light/light_%s.onnx", ACCPAR_SHARED_DIR,
             names[i]);
    snprintf(out, sizeof out, "%s/onnx-tests/light/light_%s_output_0.pb", ACCPAR_SHARED_DIR,
             names[i]);
    cr_assert(file_exists(model), "%s is missing", model);
    check_model(model, out);
  }
}

Test(models, mnist8) {
  check_model(ACCPAR_SHARED_DIR "/models/mnist-8/model.onnx",
              ACCPAR_SHARED_DIR "/models/mnist-8/test_data_set_0/output_0.pb");
}
