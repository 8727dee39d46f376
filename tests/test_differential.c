/* The differential sweep: a partitioned program computes what one device
 * computes. Every model the tests know (the zoo's, the light
 * architectures, ONNX's node tests with more than one input) is compiled
 * with every strategy for arrays of 2, 3 and 4 devices, homogeneous and
 * mixed, and each program must give the outputs of the reference (the
 * one-device program, itself checked against ONNX Runtime here, or ONNX's
 * expected outputs) and send, device by device, exactly the bytes its plan
 * predicts.
 *
 * Programs whose generated sources are byte-identical to one already run
 * (a node test with no layer plans alike under every strategy) would give
 * the same outputs: they are generated and compared, not built again.
 * Under the sanitizers a representative part of the sweep runs. */
#define _GNU_SOURCE /* vasprintf */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tests/node_v112.h"
#include "tests/ort_compare.h"
#include "tests/test_util.h"

#define NODE_DIR ACCPAR_SHARED_DIR "/onnx-tests/node-v1.22"
#define LIGHT_DIR ACCPAR_SHARED_DIR "/onnx-tests/light"
#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK_DIR ACCPAR_BINARY_DIR "/differential"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static const double RTOL = 1e-4, ATOL = 1e-5;
enum { JOBS = 2 };

static const char *const all_arrays[] = {"cpu:2", "cpu:3", "cpu:4", "tpuv3:1,tpuv2:2",
                                         "tpuv3:2,tpuv2:2"};
static const int all_ndev[] = {2, 3, 4, 3, 4};
static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
enum { N_ARRAYS = 5, N_STRATEGIES = 4 };


/* One model of a sweep: its file, its input folder, and the folder of its
 * expected outputs (NULL: the one-device program's, checked against ONNX
 * Runtime when ort is set). */
typedef struct model {
  char *name, *path, *data, *expected;
  bool ort;
} model;

/* One configuration's results. */
typedef struct run {
  int model, array, strategy;
  char *work;
  uint64_t hash; /* of its generated sources */
  int same_as;   /* an earlier run with identical sources, or -1 */
} run;

/* FNV-1a of every file the compiler wrote into dir (sorted by name), but
 * the line of main.c naming the folder itself. */
static uint64_t hash_sources(const char *dir) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, alphasort);
  cr_assert_geq(n, 0, "cannot list %s: %s", dir, strerror(errno));
  uint64_t h = 1469598103934665603u;
  for (int i = 0; i < n; i++) {
    const char *nm = names[i]->d_name;
    bool source = strstr(nm, ".c") || strstr(nm, ".h") || strcmp(nm, "weights.bin") == 0;
    if (source && nm[0] != '.') {
      char path[4096];
      fmt(path, sizeof path, "%s/%s", dir, nm);
      FILE *f = fopen(path, "rb");
      cr_assert(f, "cannot read %s", path);
      for (const char *p = nm; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211u;
      char line[8192];
      if (strcmp(nm, "weights.bin") == 0) {
        for (size_t got; (got = fread(line, 1, sizeof line, f)) > 0;)
          for (size_t j = 0; j < got; j++)
            h = (h ^ (unsigned char)line[j]) * 1099511628211u;
      } else { /* the line naming the weights' own path differs from folder to folder */
        while (fgets(line, sizeof line, f))
          if (!strstr(line, ".incbin"))
            for (const char *p = line; *p; p++)
              h = (h ^ (unsigned char)*p) * 1099511628211u;
      }
      fclose(f);
    }
    free(names[i]);
  }
  free(names);
  return h;
}



/* The backend the sweep builds its programs with (both print the same
 * lowered program, so the C sources written with --no-build tell which
 * configurations give the same program, whichever backend builds it). */
static const char *sweep_backend = "c";

/* The strategies the sweep plans with (bit s: strategies[s]). */
static unsigned sweep_strategies = (1u << N_STRATEGIES) - 1;

static char *compile_cmd(const model *m, const char *devices, const char *strategy,
                         const char *work, bool build) {
  return xprintf("rm -rf '%s' && mkdir -p '%s' && '%s' compile '%s' --devices %s --strategy %s "
                 "--mode infer --inputs '%s' %s-o '%s/prog' >'%s.log' 2>&1",
                 work, work, ACCPARC, m->path, devices, strategy, m->data,
                 build ? backend_option(sweep_backend) : "--no-build ", work, work);
}

static char *run_cmd(const model *m, const char *work) {
  return xprintf("mkdir -p '%s/out' && '%s/prog/model' --inputs '%s' --outputs '%s/out' "
                 "--report '%s/report.json' >>'%s.log' 2>&1",
                 work, work, m->data, work, work, work);
}

static void run_jobs(char **cmds, int n, int *status) {
  run_all(cmds, n, JOBS, status);
  for (int i = 0; i < n; i++)
    free(cmds[i]);
}

/* The sweep of models over the arrays in `arrays` (indices into
 * all_arrays) with every strategy. Returns the number of failures; logs
 * each. */
static int sweep(const char *tag, model *models, int n_models, const int *arrays, int n_arr) {
  fast_builds();
  mkdir(WORK_DIR, 0777);
  char *base = xprintf("%s/%s-%s", WORK_DIR, tag, sweep_backend);
  mkdir(base, 0777);
  int failed = 0;
  /* References: the one-device programs of models without expected outputs. */
  char **cmds = calloc((size_t)n_models * 2 + 1, sizeof *cmds);
  int *status = calloc((size_t)n_models * N_ARRAYS * N_STRATEGIES + 1, sizeof *status);
  cr_assert(cmds && status);
  int n = 0;
  for (int i = 0; i < n_models; i++)
    if (!models[i].expected) {
      char *work = xprintf("%s/%s-cpu1", base, models[i].name);
      char *c1 = compile_cmd(&models[i], "cpu:1", "dp", work, true), *c2 = run_cmd(&models[i], work);
      cmds[n++] = xprintf("%s && %s", c1, c2);
      free(c1);
      free(c2);
      models[i].expected = xprintf("%s/out", work);
      free(work);
    }
  run_jobs(cmds, n, status);
  n = 0;
  for (int i = 0; i < n_models; i++) {
    if (strstr(models[i].expected, "-cpu1/out") == NULL)
      continue;
    char why[2048] = "";
    if (!ran(status[n])) {
      char *work = xprintf("%s/%s-cpu1", base, models[i].name);
      log_head(work, why, sizeof why);
      free(work);
      cr_log_error("%s on cpu:1: %s", models[i].name, why);
      failed++;
    } else if (models[i].ort &&
               !ort_check(models[i].path, models[i].data, models[i].expected, ORT_RTOL,
                          ORT_ATOL, why, sizeof why)) {
      cr_log_error("%s on cpu:1 against ONNX Runtime: %s", models[i].name, why);
      failed++;
    }
    n++;
  }
  /* Every configuration's sources, then builds and runs of the distinct ones. */
  int total = n_models * n_arr * N_STRATEGIES;
  run *runs = calloc((size_t)total + 1, sizeof *runs);
  char **gen = calloc((size_t)total + 1, sizeof *gen);
  cr_assert(runs && gen);
  n = 0;
  for (int i = 0; i < n_models; i++)
    for (int a = 0; a < n_arr; a++)
      for (int s = 0; s < N_STRATEGIES; s++) {
        if (!(sweep_strategies >> s & 1))
          continue;
        run *r = &runs[n];
        *r = (run){.model = i, .array = arrays[a], .strategy = s, .same_as = -1};
        r->work = xprintf("%s/%s-%s-%s", base, models[i].name, all_arrays[arrays[a]], strategies[s]);
        gen[n++] = compile_cmd(&models[i], all_arrays[arrays[a]], strategies[s], r->work, false);
      }
  run_jobs(gen, n, status);
  int built = 0;
  for (int k = 0; k < n; k++) {
    run *r = &runs[k];
    if (!ran(status[k])) {
      char why[2048];
      log_head(r->work, why, sizeof why);
      cr_log_error("%s on %s with %s: compile failed: %s", models[r->model].name,
                   all_arrays[r->array], strategies[r->strategy], why);
      failed++;
      r->same_as = -2;
      continue;
    }
    char *prog = xprintf("%s/prog", r->work);
    r->hash = hash_sources(prog);
    free(prog);
    for (int j = 0; j < k && r->same_as < 0; j++)
      if (runs[j].same_as == -1 && runs[j].hash == r->hash)
        r->same_as = j;
    if (r->same_as < 0) {
      char *c1 = compile_cmd(&models[r->model], all_arrays[r->array], strategies[r->strategy],
                             r->work, true);
      char *c2 = run_cmd(&models[r->model], r->work);
      gen[built++] = xprintf("%s && %s", c1, c2);
      free(c1);
      free(c2);
    }
  }
  run_jobs(gen, built, status);
  int b = 0, moving = 0, distinct = 0;
  for (int k = 0; k < n; k++) {
    run *r = &runs[k];
    if (r->same_as != -1)
      continue;
    distinct++;
    const model *m = &models[r->model];
    char why[2048] = "", out[4200], report[4200];
    fmt(out, sizeof out, "%s/out", r->work);
    fmt(report, sizeof report, "%s/report.json", r->work);
    double moved = 0;
    bool ok = ran(status[b++]);
    if (!ok)
      log_head(r->work, why, sizeof why);
    ok = ok && outputs_match(m->expected, out, RTOL, ATOL, why, sizeof why) &&
         bytes_as_predicted(report, all_ndev[r->array], &moved, why, sizeof why);
    if (!ok) {
      cr_log_error("%s on %s with %s: %s", m->name, all_arrays[r->array],
                   strategies[r->strategy], why);
      failed++;
    }
    moving += moved > 0;
  }
  printf("differential %s (%s): %d configurations, %d distinct programs built and run, %d moved "
         "bytes, %d failures\n",
         tag, sweep_backend, n, distinct, moving, failed);
  fflush(stdout);
  for (int k = 0; k < n; k++)
    free(runs[k].work);
  free(runs);
  free(gen);
  free(cmds);
  free(status);
  free(base);
  return failed;
}

static void free_models(model *m, int n) {
  for (int i = 0; i < n; i++) {
    free(m[i].name);
    free(m[i].path);
    free(m[i].data);
    free(m[i].expected);
  }
}

/* ---- the zoo ---- */

static const char *const zoo_models[] = {"mlp",          "lenet5",          "resnet_block",
                                         "resnet_small", "inception_block", "gpt2_tiny",
                                         "bert_tiny",    "vit_tiny"};
enum { N_ZOO = sizeof zoo_models / sizeof zoo_models[0] };

static void zoo_sweep(const char *backend) {
  sweep_backend = backend;
  char dir[4096], cmd[8192];
  fmt(dir, sizeof dir, "%s/zoo-models-%s", WORK_DIR, backend);
  mkdir(WORK_DIR, 0777);
  fmt(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' --batch 8 --inputs -o '%s'", dir,
      dir, ZOO, dir);
  for (int i = 0; i < N_ZOO; i++) {
    size_t len = strlen(cmd);
    fmt(cmd + len, sizeof cmd - len, " %s", zoo_models[i]);
  }
  size_t len = strlen(cmd);
  fmt(cmd + len, sizeof cmd - len, " >'%s.log' 2>&1", dir);
  cr_assert_eq(system(cmd), 0, "accpar-zoo failed (see %s.log)", dir);
  model m[N_ZOO];
  for (int i = 0; i < N_ZOO; i++)
    m[i] = (model){.name = xprintf("%s", zoo_models[i]),
                   .path = xprintf("%s/%s.onnx", dir, zoo_models[i]),
                   .data = xprintf("%s/%s_data", dir, zoo_models[i]),
                   .ort = true};
  static const int every[] = {0, 1, 2, 3, 4}, some[] = {1, 3};
  /* Under the sanitizers: a CNN and a transformer (lenet5 ... gpt2_tiny). */
  model sub[2] = {m[1], m[5]};
  int failed = SANITIZED ? sweep("zoo", sub, 2, some, 2) : sweep("zoo", m, N_ZOO, every, N_ARRAYS);
  if (SANITIZED) /* the sweep set the references of the copies */
    m[1].expected = sub[0].expected, m[5].expected = sub[1].expected;
  free_models(m, N_ZOO);
  cr_assert_eq(failed, 0, "%d zoo configurations failed with %s (see above)", failed, backend);
}

Test(differential, zoo_models, .timeout = 2400) { zoo_sweep("c"); }

Test(differential, zoo_models_llvm, .timeout = 2400) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  zoo_sweep("llvm");
}

/* ---- ONNX's node tests ---- */

/* The node tests of node_dir that pick selects with several inputs
 * (broadcasts, operands that meet) or with one, their expected outputs the
 * reference. */
static void node_sweep(const char *node_dir, bool (*pick)(const char *), const char *tag,
                       int min_tests, bool several, const int *arrays, int n_arr) {
  struct dirent **names;
  int nn = scandir(node_dir, &names, NULL, alphasort);
  cr_assert_geq(nn, 0, "cannot open %s: %s", node_dir, strerror(errno));
  model *m = calloc((size_t)nn + 1, sizeof *m);
  cr_assert(m);
  int n = 0, seen = 0;
  for (int i = 0; i < nn; i++) {
    const char *t = names[i]->d_name;
    char in1[4096], model_path[4096];
    fmt(model_path, sizeof model_path, "%s/%s/model.onnx", node_dir, t);
    fmt(in1, sizeof in1, "%s/%s/test_data_set_0/input_1.pb", node_dir, t);
    /* Sequences, optionals and numpy's random training-mode Dropout fail on
     * one device too (test_codegen_node.c says why). */
    bool skip = strstr(t, "test_identity_opt") || strstr(t, "test_identity_sequence") ||
                strstr(t, "test_training_dropout") || strstr(t, "test_if_seq") ||
                strstr(t, "test_if_opt") ||
                strstr(t, "test_averagepool_2d_ceil_last_window_starts_on_pad") ||
                strstr(t, "test_mod_mixed_sign_float16") ||
                (strstr(t, "test_castlike") &&
                 (strstr(t, "FLOAT16") || strstr(t, "STRING"))) ||
                strstr(t, "test_max_float16") || strstr(t, "test_min_float16") ||
                strstr(t, "test_einsum_batch_diagonal") || strstr(t, "test_einsum_sum");
    if (t[0] != '.' && pick(t) && !skip && exists(model_path) && exists(in1) == several &&
        (!SANITIZED || seen++ % 8 == 0))
      m[n++] = (model){.name = xprintf("%s", t),
                       .path = xprintf("%s", model_path),
                       .data = xprintf("%s/%s/test_data_set_0", node_dir, t),
                       .expected = xprintf("%s/%s/test_data_set_0", node_dir, t)};
    free(names[i]);
  }
  free(names);
  cr_assert_geq(n, SANITIZED ? min_tests / 8 : min_tests, "only %d node tests", n);
  char *name = xprintf("%s-%s", tag, several ? "several" : "one");
  int failed = sweep(name, m, n, arrays, n_arr);
  free(name);
  free_models(m, n);
  free(m);
  cr_assert_eq(failed, 0, "%d node-test configurations failed (see above)", failed);
}

static bool every_test(const char *name) { return strncmp(name, "test_", 5) == 0; }

/* A node test is one operator: most are computed whole on every device
 * (only a Conv, Gemm or MatMul test is a layer that splits), so two mixed
 * arrays cover 3 and 4 devices and uneven splits; two devices and the
 * homogeneous arrays are swept by the zoo, the light models and the
 * operators between layers. More arrays would add time rather than cases
 * (CI's budget is tight). */
static const int node_arrays[] = {3, 4};
enum { N_NODE_ARRAYS = sizeof node_arrays / sizeof node_arrays[0] };

Test(differential, node_tests_with_several_inputs, .timeout = 2400) {
  node_sweep(NODE_DIR, every_test, "node", 100, true, node_arrays, N_NODE_ARRAYS);
}

Test(differential, node_tests_with_one_input, .timeout = 2400) {
  static const int some[] = {1, 3};
  node_sweep(NODE_DIR, every_test, "node", 100, false, some, 2);
}

/* Debian's v1.12 tests of the operators node-v1.22 does not carry, on the
 * node arrays whatever their inputs. */
Test(differential, debian_v1_12_tests_of_the_added_operators, .timeout = 2400) {
  if (!exists(NODE_V112_DIR))
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", NODE_V112_DIR);
  node_sweep(NODE_V112_DIR, node_v112_first, "v1.12", 40, true, node_arrays, N_NODE_ARRAYS);
  node_sweep(NODE_V112_DIR, node_v112_first, "v1.12", 30, false, node_arrays, N_NODE_ARRAYS);
}

/* Debian's v1.12 tests of the original operators node-v1.22 has none of
 * (Exp, Less, Greater, Equal, Where, Expand...) on the mixed array: none is
 * a layer, so every device computes them whole; what the sweep adds to the
 * one-device suite is the replicated program. */
Test(differential, debian_v1_12_tests_of_the_original_operators, .timeout = 2400) {
  if (!exists(NODE_V112_DIR))
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", NODE_V112_DIR);
  static const int mixed[] = {3};
  node_sweep(NODE_V112_DIR, node_v112_originals, "v1.12-originals", 30, true, mixed, 1);
  node_sweep(NODE_V112_DIR, node_v112_originals, "v1.12-originals", 15, false, mixed, 1);
}

/* The reductions' and selections' tests (their _random variants) on a
 * homogeneous and a mixed array: every strategy splits what the axis rules
 * allow around the reduced, scanned or selected axis. */
Test(differential, debian_v1_12_tests_of_the_reductions, .timeout = 2400) {
  if (!exists(NODE_V112_DIR))
    cr_skip_test("%s is not installed (apt-get install libonnx-testdata)", NODE_V112_DIR);
  static const int some[] = {1, 3};
  node_sweep(NODE_V112_DIR, node_v112_reductions_swept, "v1.12-reductions", 20, true, some, 2);
  node_sweep(NODE_V112_DIR, node_v112_reductions_swept, "v1.12-reductions", 40, false, some, 2);
}

/* ---- the added operators between layers (tests/op_models.py) ---- */

Test(differential, operators_between_layers, .timeout = 2400) {
  const char *dir = WORK_DIR "/op-models";
  mkdir(WORK_DIR, 0777);
  mkdir(dir, 0777);
  char *cmd = xprintf("'%s' '%s/tests/op_models.py' '%s' >'%s.log' 2>&1", "/usr/bin/python3",
                      ACCPAR_SOURCE_DIR, dir, dir);
  cr_assert_eq(system(cmd), 0, "op_models.py failed (see %s.log)", dir);
  free(cmd);
  static const char *const names[] = {"ops_cnn", "ops_mlp", "ops_pad", "ops_depth_space",
                                      "ops_resize", "ops_reduce", "ops_scan_select",
                                      "ops_gather_scatter", "ops_norm", "ops_einsum",
                                      "ops_recurrent"};
  enum { N = sizeof names / sizeof names[0] };
  model m[N];
  for (int i = 0; i < N; i++)
    m[i] = (model){.name = xprintf("%s", names[i]),
                   .path = xprintf("%s/%s.onnx", dir, names[i]),
                   .data = xprintf("%s/%s_data", dir, names[i]),
                   .ort = true};
  /* 2, 3 and 4 devices, homogeneous and mixed: with eleven models the other
   * two arrays would double CI's longest entry; under the sanitizers, the
   * mixed array of three (the sanitizers look for memory errors, which the
   * uneven split exercises most) with dp and accpar, the two strategies whose
   * plans differ most (this was the sanitized pass's longest entry). */
  static const int everywhere[] = {0, 3, 4}, mixed[] = {3};
  if (SANITIZED)
    sweep_strategies = 1u << 0 | 1u << 3;
  int failed = SANITIZED ? sweep("ops", m, N, mixed, 1) : sweep("ops", m, N, everywhere, 3);
  free_models(m, N);
  cr_assert_eq(failed, 0, "%d configurations failed (see above)", failed);
}

/* The LLVM backend on tpuv3:1,tpuv2:2 (every strategy): each node test
 * with one input and with several. */
Test(differential, node_tests_on_a_mixed_array_llvm, .timeout = 2400) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  sweep_backend = "llvm";
  static const int mixed[] = {3};
  node_sweep(NODE_DIR, every_test, "node", 100, true, mixed, 1);
  node_sweep(NODE_DIR, every_test, "node", 100, false, mixed, 1);
}

/* ---- the light architectures, at their batch of 1 ---- */

/* The light models' weights are all 0.02, so their logits are equal and
 * huge (light_inception_v1's reach 2e14): a summation order that differs
 * by an ulp, as a partitioned layer's does, moves the final Softmax
 * anywhere. The sweep compares the logits instead (the model up to its
 * final Softmax, written to path), against the one-device program, whose
 * own output test_codegen_node checks against the expected file. */
static void without_final_softmax(const char *model_path, const char *path) {
  ap_graph *g;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(model_path, &g, &d), AP_OK, "%s", d.message);
  int y = g->outputs[0], p = g->values[y].producer;
  if (p >= 0 && g->nodes[p].op == AP_OP_SOFTMAX) {
    g->outputs[0] = g->nodes[p].in[0];
    g->values[g->outputs[0]].is_graph_output = true;
    g->values[y].is_graph_output = false;
    g->nodes[p].dead = true;
    cr_assert(ap_graph_compact(g));
  }
  cr_assert_eq(ap_write_onnx(g, path, &d), AP_OK, "%s", d.message);
  ap_graph_free(g);
}

/* The light models' expected outputs are for the input arange(n) / n. */
static void light_input(const char *model_path, const char *dir) {
  ap_graph *g;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(model_path, &g, &d), AP_OK, "%s", d.message);
  const ap_value *x = NULL;
  for (int i = 0; i < g->n_inputs && !x; i++)
    if (g->values[g->inputs[i]].kind == AP_VAL_INPUT)
      x = &g->values[g->inputs[i]];
  cr_assert(x, "%s has no input", model_path);
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = x->rank};
  memcpy(t.dims, x->dims, sizeof t.dims);
  t.numel = ap_numel(x->rank, x->dims);
  float *data = malloc((size_t)t.numel * sizeof *data);
  cr_assert(data);
  for (int64_t i = 0; i < t.numel; i++)
    data[i] = (float)((double)i / (double)t.numel);
  t.data = data;
  mkdir(dir, 0777);
  char path[4200];
  fmt(path, sizeof path, "%s/input_0.pb", dir);
  cr_assert_eq(ap_write_tensor_pb(path, &t, x->name, &d), AP_OK, "%s", d.message);
  free(data);
  ap_graph_free(g);
}

Test(differential, light_models, .timeout = 2400) {
  static const char *const light[] = {"light_bvlc_alexnet", "light_squeezenet",
                                      "light_inception_v1", "light_densenet121",
                                      "light_zfnet512", "light_shufflenet",
                                      "light_inception_v2", "light_resnet50", "light_vgg19"};
  enum { N_LIGHT = sizeof light / sizeof light[0] };
  mkdir(WORK_DIR, 0777);
  mkdir(WORK_DIR "/light-in", 0777);
  model m[N_LIGHT];
  int n = SANITIZED ? 2 : N_LIGHT;
  for (int i = 0; i < n; i++) {
    char original[4096];
    fmt(original, sizeof original, "%s/%s.onnx", LIGHT_DIR, light[i]);
    m[i] = (model){.name = xprintf("%s", light[i]),
                   .path = xprintf("%s/light-in/%s.onnx", WORK_DIR, light[i]),
                   .data = xprintf("%s/light-in/%s", WORK_DIR, light[i])};
    without_final_softmax(original, m[i].path);
    light_input(m[i].path, m[i].data);
  }
  /* Batch 1: dp leaves all but one device idle; the others split channels. */
  static const int arrays[] = {3, 2};
  int failed = sweep("light", m, n, arrays, SANITIZED ? 1 : 2);
  free_models(m, n);
  cr_assert_eq(failed, 0, "%d light-model configurations failed (see above)", failed);
}
