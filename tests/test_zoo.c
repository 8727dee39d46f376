/* accpar-zoo: every model is written, read back by accpar's own reader, and
 * compared with the architecture it claims to be: operator counts derived
 * from the papers' layer tables, parameter counts against the published
 * figures, input and output shapes. When Debian's python3 has onnx, every
 * file also goes through onnx.checker and strict shape inference. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accpar/accpar.h"
#include "ir/ir.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define PYTHON "/usr/bin/python3"

/* What a model must contain. Node counts follow from the architecture:
 * e.g. ResNet-50 has 16 bottlenecks of 3 convs, 4 projections and a stem
 * conv (53 convs, one BN each), 3 ReLUs per block plus the stem's (49). */
typedef struct expect {
  const char *model;
  int64_t params;      /* trainable elements: weights, biases, BN scale/shift */
  int64_t bn_stats;    /* BN running mean and variance elements */
  int conv, bn, relu, add, gemm, maxpool, avgpool, gap, flatten, dropout, concat;
  int in_rank;         /* of "input", batch included */
  int64_t in_dims[3];  /* after the batch */
  int64_t classes;     /* "output" is [batch, classes] */
} expect;

/* Published parameter counts: torchvision's model documentation (AlexNet,
 * VGG, ResNet: the same numbers as sum(p.numel() for p in m.parameters()));
 * the small models' counts are worked out in samples/README.md. */
static const expect zoo[] = {
    {"mlp", 235146, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0, 0, 0, 2, {784}, 10},
    {"mlp16k_3", 549928970, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0, 0, 2, {784}, 10},
    {"mlp16k_5", 1086832650, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 2, {784}, 10},
    {"lenet5", 61706, 0, 2, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 4, {1, 32, 32}, 10},
    {"alexnet", 61100840, 0, 5, 0, 7, 0, 3, 3, 0, 0, 1, 2, 0, 4, {3, 224, 224}, 1000},
    {"vgg11", 132863336, 0, 8, 0, 10, 0, 3, 5, 0, 0, 1, 2, 0, 4, {3, 224, 224}, 1000},
    {"vgg13", 133047848, 0, 10, 0, 12, 0, 3, 5, 0, 0, 1, 2, 0, 4, {3, 224, 224}, 1000},
    {"vgg16", 138357544, 0, 13, 0, 15, 0, 3, 5, 0, 0, 1, 2, 0, 4, {3, 224, 224}, 1000},
    {"vgg19", 143667240, 0, 16, 0, 18, 0, 3, 5, 0, 0, 1, 2, 0, 4, {3, 224, 224}, 1000},
    {"alexnet_paper", 62378344, 0, 5, 0, 7, 0, 3, 0, 0, 0, 1, 0, 0, 4, {3, 224, 224}, 1000},
    {"vgg11_paper", 132863336, 0, 8, 0, 10, 0, 3, 0, 0, 0, 1, 0, 0, 4, {3, 224, 224}, 1000},
    {"resnet18", 11689512, 9600, 20, 20, 17, 8, 1, 1, 0, 1, 1, 0, 0, 4, {3, 224, 224}, 1000},
    {"resnet34", 21797672, 17024, 36, 36, 33, 16, 1, 1, 0, 1, 1, 0, 0, 4, {3, 224, 224}, 1000},
    {"resnet50", 25557032, 53120, 53, 53, 49, 16, 1, 1, 0, 1, 1, 0, 0, 4, {3, 224, 224}, 1000},
    {"resnet101", 44549160, 105344, 104, 104, 100, 33, 1, 1, 0, 1, 1, 0, 0, 4, {3, 224, 224},
     1000},
    {"resnet152", 60192808, 151424, 155, 155, 151, 50, 1, 1, 0, 1, 1, 0, 0, 4, {3, 224, 224},
     1000},
    {"resnet_block", 3850, 96, 3, 3, 2, 1, 1, 0, 0, 1, 1, 0, 0, 4, {8, 16, 16}, 10},
    {"resnet_small", 78042, 672, 9, 9, 7, 3, 1, 0, 0, 1, 1, 0, 0, 4, {3, 32, 32}, 10},
    {"inception_block", 166266, 0, 6, 0, 6, 0, 1, 1, 0, 1, 1, 0, 1, 4, {192, 28, 28}, 10},
};
enum { N_ZOO = sizeof zoo / sizeof zoo[0] };

/* The transformers: parameters (HF's GPT2LMHeadModel and
 * BertForSequenceClassification, torchvision's vit_b_16, each the sum of
 * p.numel() over the model's parameters; the tiny ones worked out in
 * samples/README.md), the operators their exports carry, their inputs. */
typedef struct tf_expect {
  const char *model;
  int64_t params;
  int opset;
  const char *ops[12];   /* operator types the graph must contain */
  const char *inputs[3]; /* the fed inputs, in order */
} tf_expect;

static const tf_expect tf[] = {
    {"gpt2_tiny", 118528, 13,
     {"Gather", "Range", "Split", "Where", "Slice", "Softmax", "Tanh", "Pow", "ReduceMean",
      "Transpose", "Concat", "MatMul"},
     {"input_ids"}},
    {"gpt2", 124439808, 13,
     {"Gather", "Range", "Split", "Where", "Slice", "Softmax", "Tanh", "Pow", "ReduceMean",
      "Transpose", "Concat", "MatMul"},
     {"input_ids"}},
    {"bert_tiny", 122946, 17,
     {"Gather", "LayerNormalization", "Erf", "Cast", "Sub", "Unsqueeze", "Softmax", "Gemm",
      "Slice", "Reshape", "Concat", "MatMul"},
     {"input_ids", "attention_mask", "token_type_ids"}},
    {"bert", 109483778, 17,
     {"Gather", "LayerNormalization", "Erf", "Cast", "Sub", "Unsqueeze", "Softmax", "Gemm",
      "Slice", "Reshape", "Concat", "MatMul"},
     {"input_ids", "attention_mask", "token_type_ids"}},
    {"vit_tiny", 81226, 17,
     {"Conv", "Expand", "Concat", "Split", "LayerNormalization", "Erf", "Slice", "Squeeze",
      "Softmax", "Gemm", "Transpose", "MatMul"},
     {"pixel_values"}},
    {"vit", 86567656, 17,
     {"Conv", "Expand", "Concat", "Split", "LayerNormalization", "Erf", "Slice", "Squeeze",
      "Softmax", "Gemm", "Transpose", "MatMul"},
     {"pixel_values"}},
};
enum { N_TF = sizeof tf / sizeof tf[0] };

/* The models small enough to be written with their weights in a test. */
static const char *const small_models[] = {"mlp", "lenet5", "resnet_block", "resnet_small",
                                           "inception_block"};
enum { N_SMALL = sizeof small_models / sizeof small_models[0] };

static const expect *find_expect(const char *model) {
  for (int i = 0; i < N_ZOO; i++)
    if (strcmp(zoo[i].model, model) == 0)
      return &zoo[i];
  cr_assert_fail("no expectations for model %s", model);
  return NULL;
}

static char *make_tmpdir(void) {
  char *dir = strdup("/tmp/accpar-zoo-XXXXXX");
  cr_assert_not_null(dir);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
  return dir;
}

/* Runs cmd through the shell; its exit status, or -1 if it did not exit. */
static int run(const char *cmd) {
  int st = system(cmd);
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void remove_tmpdir(char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(run(cmd), 0);
  free(dir);
}

static void run_zoo(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s > /dev/null", ZOO, args);
  cr_assert_eq(run(cmd), 0, "failed: %s", cmd);
}

static char *model_path(const char *dir, const char *model) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, model);
  return path;
}

static long file_size(const char *path) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s was not written", path);
  return (long)st.st_size;
}

static ap_graph *load(const char *path) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  ap_status s = ap_load_onnx(path, &g, &d);
  cr_assert_eq(s, AP_OK, "ap_load_onnx: %s", d.message);
  return g;
}

/* A weight is a value some node reads that no node produces, other than the
 * data input: an initializer, or a graph input under --no-weights. */
static bool is_weight(const ap_graph *g, int v, const bool *produced) {
  return !produced[v] && strcmp(g->values[v].name, "input") != 0;
}

/* Checks g against e: operator counts, parameters, input and output. When
 * with_data, every weight carries finite, non-constant data; otherwise none
 * does and each is a graph input with a full shape. */
static void check_model(const ap_graph *g, const expect *e, int64_t batch, bool with_data) {
  int counts[AP_OP_COUNT + 1] = {0};
  bool *produced = calloc((size_t)g->n_values + 1, sizeof *produced);
  bool *seen = calloc((size_t)g->n_values + 1, sizeof *seen);
  cr_assert(produced && seen);
  for (int n = 0; n < g->n_nodes; n++) {
    counts[g->nodes[n].op]++;
    for (int k = 0; k < g->nodes[n].n_out; k++)
      if (g->nodes[n].out[k] >= 0)
        produced[g->nodes[n].out[k]] = true;
  }
  int expected_nodes = e->conv + e->bn + e->relu + e->add + e->gemm + e->maxpool + e->avgpool +
                       e->gap + e->flatten + e->dropout + e->concat;
  cr_expect_eq(g->n_nodes, expected_nodes, "%s: %d nodes, expected %d", e->model, g->n_nodes,
               expected_nodes);
  static const struct {
    ap_op op;
    size_t offset;
  } ops[] = {
      {AP_OP_CONV, offsetof(expect, conv)},
      {AP_OP_BATCH_NORM, offsetof(expect, bn)},
      {AP_OP_RELU, offsetof(expect, relu)},
      {AP_OP_ADD, offsetof(expect, add)},
      {AP_OP_GEMM, offsetof(expect, gemm)},
      {AP_OP_MAX_POOL, offsetof(expect, maxpool)},
      {AP_OP_AVERAGE_POOL, offsetof(expect, avgpool)},
      {AP_OP_GLOBAL_AVERAGE_POOL, offsetof(expect, gap)},
      {AP_OP_FLATTEN, offsetof(expect, flatten)},
      {AP_OP_DROPOUT, offsetof(expect, dropout)},
      {AP_OP_CONCAT, offsetof(expect, concat)},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    int want = *(const int *)((const char *)e + ops[i].offset);
    cr_expect_eq(counts[ops[i].op], want, "%s: %d %s nodes, expected %d", e->model,
                 counts[ops[i].op], ap_op_table[ops[i].op].name, want);
  }

  int64_t params = 0, bn_stats = 0;
  for (int n = 0; n < g->n_nodes; n++) {
    const ap_node *node = &g->nodes[n];
    for (int k = 0; k < node->n_in; k++) {
      int v = node->in[k];
      if (v < 0 || seen[v] || !is_weight(g, v, produced))
        continue;
      seen[v] = true;
      const ap_value *val = &g->values[v];
      cr_assert(ap_value_shape_known(val), "%s: weight %s has no shape", e->model, val->name);
      int64_t numel = ap_numel(val->rank, val->dims);
      /* BN inputs 3 and 4 are the running statistics: buffers, which the
       * published counts leave out. */
      if (node->op == AP_OP_BATCH_NORM && k >= 3)
        bn_stats += numel;
      else
        params += numel;
      if (with_data) {
        cr_assert_eq(val->kind, AP_VAL_WEIGHT, "%s: %s is not an initializer", e->model,
                     val->name);
        cr_assert_not_null(val->data, "%s: %s has no data", e->model, val->name);
        const float *x = val->data;
        bool varies = numel == 1;
        for (int64_t i = 0; i < numel; i++) {
          cr_assert(isfinite(x[i]) && fabsf(x[i]) < 4.0f, "%s: %s[%lld] = %g", e->model,
                    val->name, (long long)i, (double)x[i]);
          varies |= x[i] != x[0];
        }
        cr_expect(varies, "%s: %s is constant", e->model, val->name);
      } else {
        cr_expect_null(val->data, "%s: %s has data under --no-weights", e->model, val->name);
        cr_expect(val->is_graph_input, "%s: %s is not a graph input", e->model, val->name);
      }
    }
  }
  cr_expect_eq(params, e->params, "%s: %lld parameters, published %lld", e->model,
               (long long)params, (long long)e->params);
  cr_expect_eq(bn_stats, e->bn_stats, "%s: %lld BN statistics, expected %lld", e->model,
               (long long)bn_stats, (long long)e->bn_stats);

  /* The data input comes first, so that --batch binds it. */
  cr_assert_geq(g->n_inputs, 1);
  const ap_value *in = &g->values[g->inputs[0]];
  cr_expect_str_eq(in->name, "input");
  cr_expect_eq(in->dtype, AP_DT_FLOAT);
  cr_assert_eq(in->rank, e->in_rank, "%s: input rank %d", e->model, in->rank);
  for (int k = 1; k < e->in_rank; k++)
    cr_expect_eq(in->dims[k], e->in_dims[k - 1], "%s: input dim %d is %lld", e->model, k,
                 (long long)in->dims[k]);
  cr_assert_eq(g->n_outputs, 1);
  const ap_value *out = &g->values[g->outputs[0]];
  cr_expect_str_eq(out->name, "output");
  cr_expect_eq(out->dtype, AP_DT_FLOAT);
  cr_assert_eq(out->rank, 2, "%s: output rank %d", e->model, out->rank);
  cr_expect_eq(out->dims[1], e->classes);
  if (batch > 0) {
    cr_expect_eq(in->dims[0], batch);
    cr_expect_eq(out->dims[0], batch);
  } else {
    cr_expect_eq(in->dims[0], -1);
    cr_expect(in->sym[0] && strcmp(in->sym[0], "N") == 0, "%s: input batch is not \"N\"",
              e->model);
    cr_expect(out->sym[0] && strcmp(out->sym[0], "N") == 0, "%s: output batch is not \"N\"",
              e->model);
  }
  free(produced);
  free(seen);
}

Test(zoo, small_models_with_weights) {
  char *dir = make_tmpdir();
  char args[1024];
  snprintf(args, sizeof args, "-o '%s' mlp lenet5 resnet_block resnet_small inception_block",
           dir);
  run_zoo(args);
  for (int i = 0; i < N_SMALL; i++) {
    ap_graph *g = load(model_path(dir, small_models[i]));
    check_model(g, find_expect(small_models[i]), 1, true);
    ap_graph_free(g);
  }
  /* The quick start's inputs stay cheap. */
  cr_expect_lt(file_size(model_path(dir, "mlp")), 2L << 20);
  cr_expect_lt(file_size(model_path(dir, "lenet5")), 2L << 20);
  remove_tmpdir(dir);
}

Test(zoo, every_model_shapes_only, .timeout = 300) {
  char *dir = make_tmpdir();
  char args[1024];
  snprintf(args, sizeof args, "--no-weights -o '%s'", dir);
  run_zoo(args);
  for (int i = 0; i < N_ZOO; i++) {
    const char *path = model_path(dir, zoo[i].model);
    long size = file_size(path);
    /* Without initializers even VGG-19 is a few kilobytes of graph. */
    cr_expect_lt(size, 256L << 10, "%s: %ld bytes", zoo[i].model, size);
    ap_graph *g = load(path);
    check_model(g, &zoo[i], 1, false);
    ap_graph_free(g);
  }
  remove_tmpdir(dir);
}

Test(zoo, batch_sizes) {
  char *dir = make_tmpdir();
  char args[1024];
  snprintf(args, sizeof args, "--no-weights --batch 8 -o '%s' resnet18 mlp", dir);
  run_zoo(args);
  for (int i = 0; i < 2; i++) {
    const char *model = i ? "mlp" : "resnet18";
    ap_graph *g = load(model_path(dir, model));
    check_model(g, find_expect(model), 8, false);
    ap_graph_free(g);
  }
  snprintf(args, sizeof args, "--batch 0 -o '%s' resnet_small", dir);
  run_zoo(args);
  ap_graph *g = load(model_path(dir, "resnet_small"));
  check_model(g, find_expect("resnet_small"), 0, true);
  ap_graph_free(g);
  remove_tmpdir(dir);
}

static bool same_file(const char *a, const char *b) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
  return run(cmd) == 0;
}

Test(zoo, weights_follow_the_seed) {
  char *dir = make_tmpdir();
  char args[1024], a[512], b[512], c[512];
  for (int i = 0; i < 3; i++) {
    /* Runs 0 and 1 share seed 7 but not the set of models written with it. */
    snprintf(args, sizeof args, "--seed %d -o '%s/%d' %s lenet5", i == 2 ? 8 : 7, dir, i,
             i == 1 ? "mlp" : "");
    run_zoo(args);
  }
  snprintf(a, sizeof a, "%s/0/lenet5.onnx", dir);
  snprintf(b, sizeof b, "%s/1/lenet5.onnx", dir);
  snprintf(c, sizeof c, "%s/2/lenet5.onnx", dir);
  cr_expect(same_file(a, b), "the same seed gave different weights");
  cr_expect(!same_file(a, c), "seeds 7 and 8 gave the same weights");
  cr_expect_eq(file_size(a), file_size(c));
  remove_tmpdir(dir);
}

Test(zoo, usage_errors) {
  char *dir = make_tmpdir();
  char cmd[1024];
  static const struct {
    bool with_dir;    /* "-o DIR" comes first */
    const char *args;
  } bad[] = {{true, "nosuchmodel"},  {false, "mlp"},
             {true, "--batch -1 mlp"}, {true, "--seed x mlp"},
             {true, "--frobnicate mlp"}, {false, "-o"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "'%s' %s%s%s %s 2>/dev/null >/dev/null", ZOO,
             bad[i].with_dir ? "-o '" : "", bad[i].with_dir ? dir : "",
             bad[i].with_dir ? "'" : "", bad[i].args);
    cr_expect_eq(run(cmd), 2, "expected a usage error from: %s", cmd);
  }
  struct stat st;
  cr_expect_neq(stat(model_path(dir, "mlp"), &st), 0, "a failed run wrote a model");
  /* A sequence longer than the model's positions: that model cannot be
   * built, one line names the file. */
  snprintf(cmd, sizeof cmd,
           "'%s' --seq 64 -o '%s' gpt2_tiny 2>&1 >/dev/null | "
           "grep -qx '.*gpt2_tiny.onnx: --seq 64 is longer than the model.s 32 positions'",
           ZOO, dir);
  cr_expect_eq(run(cmd), 0, "no one-line error for --seq 64 on gpt2_tiny");
  snprintf(cmd, sizeof cmd, "'%s' --seq 64 -o '%s' gpt2_tiny >/dev/null 2>&1", ZOO, dir);
  cr_expect_eq(run(cmd), 1);
  cr_expect_neq(stat(model_path(dir, "gpt2_tiny"), &st), 0, "a failed run wrote a model");
  snprintf(cmd, sizeof cmd, "'%s' --list | grep -c . | grep -qx %d", ZOO, N_ZOO + N_TF);
  cr_expect_eq(run(cmd), 0, "--list does not name %d models", N_ZOO + N_TF);
  remove_tmpdir(dir);
}

/* onnx.checker, then strict shape inference, which also fails when the
 * declared output shape disagrees with the inferred one. */
static const char checker_py[] =
    "import onnx, sys\n"
    "for f in sys.argv[1:]:\n"
    "    m = onnx.load(f)\n"
    "    onnx.checker.check_model(m)\n"
    "    onnx.shape_inference.infer_shapes(m, strict_mode=True)\n"
    "    assert m.ir_version == 7 and m.opset_import[0].version == 13, f\n";

static bool have_python_onnx(void) {
  return access(PYTHON, X_OK) == 0 && run(PYTHON " -c 'import onnx' 2>/dev/null") == 0;
}

Test(zoo, onnx_checker_accepts_every_model, .timeout = 600) {
  if (!have_python_onnx())
    cr_skip_test(PYTHON " with the onnx module is not available");
  char *dir = make_tmpdir();
  char args[1024], script[512], cmd[8192];
  snprintf(args, sizeof args, "--no-weights -o '%s/shapes'", dir);
  run_zoo(args);
  snprintf(args, sizeof args,
           "--batch 0 -o '%s/weights' mlp lenet5 resnet_block resnet_small inception_block", dir);
  run_zoo(args);
  snprintf(script, sizeof script, "%s/check.py", dir);
  FILE *f = fopen(script, "w");
  cr_assert_not_null(f);
  fputs(checker_py, f);
  fclose(f);
  for (int i = 0; i < N_ZOO; i++) {
    snprintf(cmd, sizeof cmd, "%s '%s' '%s/shapes/%s.onnx'", PYTHON, script, dir, zoo[i].model);
    cr_expect_eq(run(cmd), 0, "onnx rejects %s (--no-weights)", zoo[i].model);
  }
  for (int i = 0; i < N_SMALL; i++) {
    snprintf(cmd, sizeof cmd, "%s '%s' '%s/weights/%s.onnx'", PYTHON, script, dir,
             small_models[i]);
    cr_expect_eq(run(cmd), 0, "onnx rejects %s (with weights)", small_models[i]);
  }
  remove_tmpdir(dir);
}

/* The transformers, shapes only: parameters as published, the constructs
 * exporters write, the fed inputs; Debian's onnx checks them and infers
 * their shapes strictly at their opsets. */
Test(zoo, transformers, .timeout = 300) {
  char *dir = make_tmpdir();
  char args[1024], script[512], cmd[8192];
  snprintf(args, sizeof args, "--no-weights --batch 2 --seq 16 -o '%s'", dir);
  for (int i = 0; i < N_TF; i++) {
    size_t len = strlen(args);
    snprintf(args + len, sizeof args - len, " %s", tf[i].model);
  }
  run_zoo(args);
  for (int i = 0; i < N_TF; i++) {
    ap_graph *g = load(model_path(dir, tf[i].model));
    cr_expect_eq(g->opset, tf[i].opset, "%s: opset %lld", tf[i].model, (long long)g->opset);
    int64_t params = 0;
    int fed = 0;
    for (int k = 0; k < g->n_inputs; k++) {
      const ap_value *v = &g->values[g->inputs[k]];
      bool is_fed = false;
      for (int j = 0; j < 3 && tf[i].inputs[j]; j++)
        if (strcmp(v->name, tf[i].inputs[j]) == 0) {
          cr_expect_eq(fed, j, "%s: input '%s' is not in place %d", tf[i].model, v->name, j);
          is_fed = true;
        }
      if (is_fed)
        fed++;
      else if (v->kind == AP_VAL_INPUT && !v->data)
        params += ap_numel(v->rank, v->dims);
    }
    cr_expect_eq(params, tf[i].params, "%s: %lld parameters, published %lld", tf[i].model,
                 (long long)params, (long long)tf[i].params);
    for (int k = 0; k < 12 && tf[i].ops[k]; k++) {
      bool found = false;
      for (int n = 0; n < g->n_nodes && !found; n++)
        found = strcmp(g->nodes[n].op_type, tf[i].ops[k]) == 0;
      cr_expect(found, "%s: no %s node", tf[i].model, tf[i].ops[k]);
    }
    const ap_value *out = &g->values[g->outputs[0]];
    cr_expect_str_eq(out->name, "logits");
    ap_graph_free(g);
  }
  if (have_python_onnx()) {
    snprintf(script, sizeof script, "%s/check.py", dir);
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs("import onnx, sys\n"
          "m = onnx.load(sys.argv[1])\n"
          "onnx.checker.check_model(m)\n"
          "onnx.shape_inference.infer_shapes(m, strict_mode=True)\n",
          f);
    fclose(f);
    for (int i = 0; i < N_TF; i++) {
      snprintf(cmd, sizeof cmd, "%s '%s' '%s/%s.onnx'", PYTHON, script, dir, tf[i].model);
      cr_expect_eq(run(cmd), 0, "onnx rejects %s", tf[i].model);
    }
  }
  remove_tmpdir(dir);
}
