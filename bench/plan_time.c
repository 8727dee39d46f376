/* plan_time: how long the partition pass takes.
 *
 *   plan_time ZOO_DIR [--batch N] [--repeat R]
 *       times ap_partition (accpar) on ZOO_DIR/resnet{18,34,50,101,152}.onnx
 *       over 2..1024 devices and prints markdown tables: growth with layers
 *       at 1024 devices, and growth with devices for ResNet-152; then, when
 *       ZOO_DIR holds gpt2.onnx and bert.onnx, the transformers at batch 8
 *       over mixed TPU arrays.
 *   plan_time --measure-cpu
 *       measures this host's single-core float32 multiply-add rate and copy
 *       bandwidth: the figures of the "cpu" device preset.
 *
 * Loading and shape inference are outside the timed region; each figure is
 * the best of R runs (default 5).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accpar/plan.h"
#include "ir/ir.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static ap_graph *load(const char *dir, const char *model, int64_t batch) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, model);
  ap_diag d = {0};
  ap_graph *g = NULL;
  if (ap_load_onnx(path, &g, &d) != AP_OK || ap_bind_batch(g, batch, &d) != AP_OK ||
      ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d) != AP_OK) {
    fprintf(stderr, "plan_time: %s\n", d.message);
    ap_graph_free(g);
    return NULL;
  }
  return g;
}

/* Best time of `repeat` plans of g over the array spec; -1 on error. */
static double time_spec(ap_graph *g, const char *spec, int repeat, int *layers) {
  ap_devices dv;
  ap_diag d = {0};
  if (ap_devices_parse(spec, &dv, &d) != AP_OK)
    return -1;
  /* The search's sizes stay in the limits; memory capacity is not what is
   * measured here. */
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR, .mem_limit_bytes = 1e30};
  double best = 1e30;
  for (int r = 0; r < repeat; r++) {
    double t0 = now_s();
    if (ap_partition(g, &o, &d) != AP_OK) {
      fprintf(stderr, "plan_time: %s\n", d.message);
      return -1;
    }
    double t = now_s() - t0;
    best = t < best ? t : best;
  }
  ap_plan_summary s;
  ap_plan_get(g, &s);
  *layers = s.n_layers;
  return best;
}

/* The same over n devices of kind cpu. */
static double time_plan(ap_graph *g, int n, int repeat, int *layers) {
  char spec[64];
  snprintf(spec, sizeof spec, "cpu:%d", n);
  return time_spec(g, spec, repeat, layers);
}

static int measure_cpu(void) {
  enum { N = 256 };
  static float a[N][N], b[N][N], c[N][N];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      a[i][j] = (float)(i + j) / N;
      b[i][j] = (float)(i - j) / N;
    }
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now_s();
    memset(c, 0, sizeof c);
    for (int i = 0; i < N; i++) /* i-k-j order: the inner loop vectorises */
      for (int k = 0; k < N; k++) {
        float x = a[i][k];
        for (int j = 0; j < N; j++)
          c[i][j] += x * b[k][j];
      }
    double t = now_s() - t0;
    best = t < best ? t : best;
  }
  double flops = 2.0 * N * N * N / best;
  size_t bytes = (size_t)256 << 20;
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst)
    return 1;
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  double bbest = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now_s();
    memcpy(dst, src, bytes);
    double t = now_s() - t0;
    bbest = t < bbest ? t : bbest;
  }
  /* A copy reads and writes every byte. */
  double bw = 2.0 * (double)bytes / bbest;
  printf("# this host, one core (plan_time --measure-cpu); c[0][1] = %g\n", c[0][1] + dst[7]);
  printf("name = cpu\npeak_flops = %.3g\nmem_bw_bytes_s = %.3g\n", flops, bw);
  printf("mem_bytes = 4.29e9\nlink_bw_bytes_s = %.3g\nlink_latency_s = 5e-6\n", bw / 2);
  free(src);
  free(dst);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--measure-cpu") == 0)
    return measure_cpu();
  if (argc < 2) {
    fprintf(stderr, "usage: plan_time ZOO_DIR [--batch N] [--repeat R] | --measure-cpu\n");
    return 2;
  }
  const char *dir = argv[1];
  int64_t batch = 512;
  int repeat = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--batch") == 0)
      batch = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--repeat") == 0)
      repeat = atoi(argv[i + 1]);
  }
  if (batch < 1 || repeat < 1) {
    fprintf(stderr, "plan_time: --batch and --repeat must be positive\n");
    return 2;
  }
  static const char *const models[] = {"resnet18", "resnet34", "resnet50", "resnet101",
                                        "resnet152"};
  printf("Planning time of `accpar` (best of %d), batch %lld, 1024 devices (cpu:1024):\n\n",
         repeat, (long long)batch);
  printf("| model | layers | time (ms) | ms per layer |\n|---|---|---|---|\n");
  for (int m = 0; m < 5; m++) {
    ap_graph *g = load(dir, models[m], batch);
    if (!g)
      return 1;
    int layers = 0;
    double t = time_plan(g, 1024, repeat, &layers);
    ap_graph_free(g);
    if (t < 0)
      return 1;
    printf("| %s | %d | %.2f | %.3f |\n", models[m], layers, 1e3 * t, 1e3 * t / layers);
  }
  printf("\nResNet-152 against the number of devices:\n\n");
  printf("| devices | levels | time (ms) |\n|---|---|---|\n");
  ap_graph *g = load(dir, "resnet152", batch);
  if (!g)
    return 1;
  static const int counts[] = {1, 2, 8, 32, 128, 512, 1024, 4096};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    int layers = 0;
    double t = time_plan(g, counts[i], repeat, &layers);
    if (t < 0)
      return 1;
    ap_plan_summary s;
    ap_plan_get(g, &s);
    printf("| %d | %d | %.2f |\n", counts[i], s.n_levels, 1e3 * t);
  }
  ap_graph_free(g);
  char path[4096];
  snprintf(path, sizeof path, "%s/gpt2.onnx", dir);
  if (access(path, R_OK) != 0)
    return 0;
  printf("\nTransformers at batch 8 (GPT-2 small: 1024 tokens, BERT-base: 128):\n\n");
  printf("| model | devices | layers | time (ms) |\n|---|---|---|---|\n");
  static const char *const tfs[] = {"gpt2", "bert"};
  static const char *const arrays[] = {"tpuv3:4,tpuv2:4", "tpuv3:32,tpuv2:32",
                                       "tpuv3:64,tpuv2:64"};
  for (int m = 0; m < 2; m++) {
    if (!(g = load(dir, tfs[m], 8)))
      return 1;
    for (int a = 0; a < 3; a++) {
      int layers = 0;
      double t = time_spec(g, arrays[a], repeat, &layers);
      if (t < 0)
        return 1;
      printf("| %s | %s | %d | %.1f |\n", tfs[m], arrays[a], layers, 1e3 * t);
    }
    ap_graph_free(g);
  }
  return 0;
}
