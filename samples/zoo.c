/* accpar-zoo: writes the reference networks of the AccPar evaluation (and a
 * few small ones for demos and tests) as ONNX files, through accpar's own
 * writer.
 *
 *   accpar-zoo [--no-weights] [--seed S] [--batch N] [--seq N] [--inputs] -o DIR [MODEL...]
 *   accpar-zoo --list
 *
 * Without MODEL, every model is written. Exit status: 0, 1 when a model
 * cannot be built or written, 2 for a usage error. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "samples/zoo.h"

static const struct model {
  const char *name;
  void (*build)(zoo *z);
  const char *what;
} models[] = {
    {"mlp", zoo_mlp, "784-256-128-10 perceptron, input [N,784]"},
    {"mlp16k_3", zoo_mlp16k_3, "Altsplit's MLP: 784, 3 hidden layers of 16384, 10"},
    {"mlp16k_5", zoo_mlp16k_5, "Altsplit's MLP: 784, 5 hidden layers of 16384, 10"},
    {"lenet5", zoo_lenet5, "LeNet-5 (LeCun 1998) on 1x32x32, ReLU and average pooling"},
    {"alexnet", zoo_alexnet, "AlexNet, torchvision's single tower, 3x224x224"},
    {"vgg11", zoo_vgg11, "VGG configuration A, 3x224x224"},
    {"vgg13", zoo_vgg13, "VGG configuration B, 3x224x224"},
    {"vgg16", zoo_vgg16, "VGG configuration D, 3x224x224"},
    {"vgg19", zoo_vgg19, "VGG configuration E, 3x224x224"},
    {"alexnet_paper", zoo_alexnet_paper, "AlexNet as the published AccPar program declares it"},
    {"vgg11_paper", zoo_vgg11_paper, "VGG-11 as the published AccPar program declares it"},
    {"resnet18", zoo_resnet18, "ResNet-18, basic blocks, 3x224x224"},
    {"resnet34", zoo_resnet34, "ResNet-34, basic blocks, 3x224x224"},
    {"resnet50", zoo_resnet50, "ResNet-50, bottlenecks, 3x224x224"},
    {"resnet101", zoo_resnet101, "ResNet-101, bottlenecks, 3x224x224"},
    {"resnet152", zoo_resnet152, "ResNet-152, bottlenecks, 3x224x224"},
    {"resnet_block", zoo_resnet_block, "one basic block with a projection shortcut, 8x16x16"},
    {"resnet_small", zoo_resnet_small, "3 basic blocks (2 projections) on 3x32x32, 10 classes"},
    {"inception_block", zoo_inception_block, "Inception-v1 module 3a on 192x28x28"},
    {"gpt2_tiny", zoo_gpt2_tiny, "GPT-2 shaped: vocab 256, 2 layers, hidden 64, 4 heads, 16 tokens"},
    {"gpt2", zoo_gpt2, "GPT-2 small (HF GPT2LMHeadModel), 1024 tokens (--seq)"},
    {"bert_tiny", zoo_bert_tiny, "BERT shaped: vocab 256, 2 layers, hidden 64, 4 heads, 16 tokens"},
    {"bert", zoo_bert, "BERT-base classifier (HF), 128 tokens (--seq)"},
    {"vit_tiny", zoo_vit_tiny, "ViT shaped: 32x32 images, patch 8, 2 layers, hidden 64"},
    {"vit", zoo_vit, "ViT-B/16 (torchvision vit_b_16), 3x224x224"},
};
enum { N_MODELS = sizeof models / sizeof models[0] };

/* Errors are one line on stderr, as everywhere in accpar. */
static int usage_error(const char *message) {
  fprintf(stderr, "accpar-zoo: %s (accpar-zoo --help shows the usage)\n", message);
  return 2;
}

static int unknown(const char *what, const char *arg) {
  fprintf(stderr, "accpar-zoo: '%s': unknown %s\n", arg, what);
  return 2;
}

static const struct model *find_model(const char *name) {
  for (int i = 0; i < N_MODELS; i++)
    if (strcmp(models[i].name, name) == 0)
      return &models[i];
  return NULL;
}

static bool parse_u64(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 0);
  if (errno || end == text || *end || *text == '-')
    return false;
  *out = v;
  return true;
}

/* DIR/MODEL_data/input_N.pb: seeded inputs for every fed input, in the
 * layout of ONNX's test data, so a compiled program can run without any
 * other tool: floats in [-1, 1); integers that index a table (token ids,
 * token types) inside it; other integers (attention masks) 1 but for the
 * last few positions of every other row. The stream differs from the
 * weights' so an input is not a copy of a weight. */
static int write_inputs(const ap_graph *g, const zoo_opts *opts, const char *dir,
                        const char *name) {
  size_t len = strlen(dir) + strlen(name) + sizeof "/_data/input_000.pb";
  char *path = malloc(len);
  if (!path) {
    fprintf(stderr, "accpar-zoo: out of memory\n");
    return 1;
  }
  snprintf(path, len, "%s/%s_data", dir, name);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create the directory: %s\n", path, strerror(errno));
    free(path);
    return 1;
  }
  zoo_rng rng;
  zoo_rng_seed(&rng, opts->seed, 0x1a7a);
  int rc = 0, k = 0;
  for (int i = 0; i < g->n_inputs && rc == 0; i++) {
    const ap_value *in = &g->values[g->inputs[i]];
    if (in->kind != AP_VAL_INPUT || in->data)
      continue;
    if (!ap_value_shape_known(in)) {
      fprintf(stderr, "accpar-zoo: %s: --inputs needs a fixed batch (--batch N, N > 0)\n", name);
      rc = 2;
      break;
    }
    ap_tensor t = {.dtype = in->dtype, .rank = in->rank};
    for (int a = 0; a < in->rank; a++)
      t.dims[a] = in->dims[a];
    t.numel = ap_numel(t.rank, t.dims);
    size_t es = ap_dtype_size(in->dtype);
    t.data = es && t.numel >= 0 ? calloc((size_t)t.numel + 1, es) : NULL;
    if (!t.data) {
      fprintf(stderr, "accpar-zoo: %s: cannot make a value for input '%s'\n", name, in->name);
      rc = 1;
      break;
    }
    int64_t rows = ap_value_index_rows(g, g->inputs[i]);
    int64_t last = in->rank ? in->dims[in->rank - 1] : 1;
    for (int64_t e = 0; e < t.numel; e++) {
      if (ap_dtype_is_float(in->dtype)) {
        ap_tensor_set_f64(&t, e, zoo_rng_uniform(&rng, -1.0f, 1.0f));
      } else if (rows > 0) {
        ap_tensor_set_f64(&t, e, (double)(zoo_rng_next(&rng) % (uint32_t)rows));
      } else { /* a mask: row r keeps all but its last (r % 2) * (r % 5) positions */
        int64_t row = e / last, at = e % last;
        ap_tensor_set_f64(&t, e, at < last - (row % 2) * (row % 5) ? 1 : 0);
      }
    }
    snprintf(path, len, "%s/%s_data/input_%d.pb", dir, name, k++);
    ap_diag diag = {0};
    if (ap_write_tensor_pb(path, &t, in->name, &diag) != AP_OK) {
      fprintf(stderr, "%s\n", diag.message);
      rc = 1;
    }
    free(t.data);
  }
  free(path);
  return rc;
}

/* Builds, checks and writes one model; prints one summary line. */
static int write_model(const struct model *m, const zoo_opts *opts, const char *dir) {
  size_t len = strlen(dir) + strlen(m->name) + sizeof "/.onnx";
  char *path = malloc(len);
  if (!path) {
    fprintf(stderr, "accpar-zoo: out of memory\n");
    return 1;
  }
  snprintf(path, len, "%s/%s.onnx", dir, m->name);
  zoo z;
  int rc = 1;
  ap_diag diag = {0};
  if (!zoo_begin(&z, m->name, path, opts)) {
    fprintf(stderr, "%s: out of memory\n", path);
    free(path);
    return 1;
  }
  m->build(&z);
  if (z.failed) {
    fprintf(stderr, "%s: %s\n", path, z.error ? z.error : "out of memory while building the model");
  } else if (ap_verify(z.g, &diag) != AP_OK || ap_write_onnx(z.g, path, &diag) != AP_OK) {
    fprintf(stderr, "%s\n", diag.message);
  } else {
    printf("%s: %d nodes, %" PRId64 " parameters, %" PRId64 " batch-norm statistics\n", path,
           z.g->n_nodes, z.params, z.bn_stats);
    rc = opts->inputs ? write_inputs(z.g, opts, dir, m->name) : 0;
  }
  ap_graph_free(z.g);
  free(path);
  return rc;
}

int main(int argc, char **argv) {
  zoo_opts opts = {.batch = 1, .seed = 1, .weights = true};
  const char *dir = NULL;
  /* The models named, in command-line order; options may sit between them. */
  const struct model **chosen = calloc((size_t)argc, sizeof *chosen);
  int n_chosen = 0;
  if (!chosen) {
    fprintf(stderr, "accpar-zoo: out of memory\n");
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--list") == 0) {
      for (int k = 0; k < N_MODELS; k++)
        printf("%-16s %s\n", models[k].name, models[k].what);
      free(chosen);
      return 0;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: accpar-zoo [--no-weights] [--seed S] [--batch N] [--seq N] [--inputs] -o DIR\n"
             "                  [MODEL...]\n"
             "       accpar-zoo --list\n"
             "Writes DIR/MODEL.onnx for each MODEL (all of them when none is named).\n"
             "  --no-weights  weights become graph inputs with shapes and no data\n"
             "  --seed S      seed of the weights' PRNG (default 1)\n"
             "  --batch N     batch size of the input; 0 writes the symbolic size \"N\"\n"
             "                (default 1)\n"
             "  --seq N       tokens per sequence of the language models (default: the\n"
             "                model's, gpt2 1024, bert 128, the tiny ones 16)\n"
             "  --inputs      also write DIR/MODEL_data/input_N.pb, seeded inputs\n");
      free(chosen);
      return 0;
    }
    int rc = 0;
    if (strcmp(a, "--no-weights") == 0) {
      opts.weights = false;
    } else if (strcmp(a, "--inputs") == 0) {
      opts.inputs = true;
    } else if (strcmp(a, "--seed") == 0 || strcmp(a, "--batch") == 0 ||
               strcmp(a, "--seq") == 0 || strcmp(a, "-o") == 0) {
      uint64_t u;
      if (i + 1 >= argc)
        rc = usage_error(strcmp(a, "-o") == 0 ? "-o needs a directory"
                                              : "--seed, --batch and --seq need a value");
      else if (strcmp(a, "-o") == 0)
        dir = argv[++i];
      else if (!parse_u64(argv[++i], &u) || (strcmp(a, "--seed") != 0 && u > INT32_MAX))
        rc = usage_error("--seed, --batch and --seq take a non-negative integer");
      else if (strcmp(a, "--seed") == 0)
        opts.seed = u;
      else if (strcmp(a, "--seq") == 0)
        opts.seq = (int64_t)u;
      else
        opts.batch = (int64_t)u;
    } else if (a[0] == '-') {
      rc = unknown("option", a);
    } else if (!(chosen[n_chosen++] = find_model(a))) {
      rc = unknown("model (--list shows them)", a);
    }
    if (rc) {
      free(chosen);
      return rc;
    }
  }
  int rc = 0;
  if (!dir) {
    rc = usage_error("-o DIR is required");
  } else if (opts.inputs && opts.batch == 0) {
    rc = usage_error("--inputs needs a fixed batch (--batch N, N > 0)");
  } else if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create the directory: %s\n", dir, strerror(errno));
    rc = 1;
  } else if (n_chosen == 0) {
    for (int k = 0; k < N_MODELS && rc == 0; k++)
      rc = write_model(&models[k], &opts, dir);
  } else {
    for (int k = 0; k < n_chosen && rc == 0; k++)
      rc = write_model(chosen[k], &opts, dir);
  }
  free(chosen);
  return rc;
}
