/* bench-conv-price: the cost model's price of each convolution kernel beside
 * its measured time on this host.
 *
 *   bench-conv-price MODEL.onnx DEVICE_FILE [--batch N] [--samples S]
 *
 * Plans MODEL on one device of DEVICE_FILE (an `accparc calibrate` file of
 * this host) and, for every convolution layer of the plan, runs each kernel
 * a training step runs (forward; backward data unless its input is a graph
 * input; backward weights) on the whole layer, with the algorithm the kernel
 * library picks, and prints what ap_conv_kernel_s (passes/partition.c)
 * prices it at beside the fastest of S samples (default 7; a sample repeats
 * the kernel for at least 20 ms, timed by the thread's CPU time, as
 * calibrate times its figures). A row of the program's --report holds these
 * kernels and the layer's other work (its normalization, activation, the
 * traffic the model prices apart): this splits a row's miss by kernel.
 * Figures are measurements of this machine, not assertions; ctest runs none.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/kernels/kernels.h"
#include "passes/passes.h"

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct operands {
  const apk_conv2d *p;
  float *x, *w, *y, *dy, *dx, *dw, *work;
} operands;

static void run_kernel(const operands *o, int k) {
  if (k == APK_CONV_FORWARD)
    apk_conv2d_forward(o->p, o->x, o->w, NULL, o->y, o->work);
  else if (k == APK_CONV_BACKWARD_DATA)
    apk_conv2d_backward_data(o->p, o->dy, o->w, o->dx, o->work);
  else
    apk_conv2d_backward_weights(o->p, o->x, o->dy, o->dw, NULL, o->work);
}

/* The fastest over samples of one run of kernel k, in seconds (other
 * processes on the cores only ever slow a sample down). */
static double measure(const operands *o, int k, int samples) {
  run_kernel(o, k); /* pages in the workspace */
  int reps = 1;
  for (;;) {
    double t0 = cpu_s();
    for (int r = 0; r < reps; r++)
      run_kernel(o, k);
    if (cpu_s() - t0 >= 0.02 || reps >= 1 << 20)
      break;
    reps *= 2;
  }
  double best = INFINITY;
  for (int s = 0; s < samples; s++) {
    double t0 = cpu_s();
    for (int r = 0; r < reps; r++)
      run_kernel(o, k);
    best = fmin(best, (cpu_s() - t0) / reps);
  }
  return best;
}

static float *filled(size_t n, unsigned seed) {
  float *a = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
  for (size_t i = 0; a && i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    a[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
  }
  return a;
}

static const char *const kernel_names[] = {"forward", "backward data", "backward weights"};
static const char *const algo_names[] = {"im2col", "implicit", "winograd", "winograd4"};

int main(int argc, char **argv) {
  const char *model = NULL, *dev_file = NULL;
  long batch = 0;
  int samples = 7;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
      samples = (int)strtol(argv[++i], NULL, 10);
    else if (!model)
      model = argv[i];
    else if (!dev_file)
      dev_file = argv[i];
    else
      model = NULL, i = argc;
  }
  if (!model || !dev_file || samples < 1) {
    fprintf(stderr, "usage: bench-conv-price MODEL.onnx DEVICE_FILE [--batch N] [--samples S]\n");
    return 2;
  }
  ap_diag d = {0};
  ap_graph *g = NULL;
  ap_devices devs;
  char spec[4200];
  snprintf(spec, sizeof spec, "%s:1", dev_file);
  ap_plan_opts po = {.devices = &devs, .strategy = AP_STRATEGY_ACCPAR};
  if (ap_load_onnx(model, &g, &d) != AP_OK || (batch > 0 && ap_bind_batch(g, batch, &d)) ||
      ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d) != AP_OK ||
      ap_devices_parse(spec, &devs, &d) != AP_OK || ap_partition(g, &po, &d) != AP_OK) {
    fprintf(stderr, "bench-conv-price: %s\n", d.message);
    ap_graph_free(g);
    return 1;
  }
  const ap_plan *p = g->plan;
  const ap_device_kind *dk = &p->dev.kinds[0];
  printf("%s on %s, the fastest of %d samples; times in us\n\n", model, dev_file, samples);
  printf("| layer | kernel | algorithm | priced | measured | priced/measured |\n");
  printf("|---|---|---|--:|--:|--:|\n");
  double priced_all = 0, measured_all = 0;
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_vertex *vx = &p->v[v];
    if (!vx->conv)
      continue;
    const apk_conv2d *c = vx->conv;
    size_t nx = (size_t)c->batch * c->in_channels * c->in_h * c->in_w;
    size_t ny = (size_t)c->batch * c->out_channels * apk_conv2d_out_h(c) * apk_conv2d_out_w(c);
    size_t nw = (size_t)c->out_channels * (c->in_channels / c->groups) * c->kernel_h *
                c->kernel_w;
    operands o = {c,         filled(nx, 1), filled(nw, 2), filled(ny, 3), filled(ny, 4),
                  filled(nx, 5), filled(nw, 6), filled(apk_conv2d_work_floats(c) + 16, 7)};
    if (!o.x || !o.w || !o.y || !o.dy || !o.dx || !o.dw || !o.work) {
      fprintf(stderr, "bench-conv-price: out of memory\n");
      return 1;
    }
    for (int k = APK_CONV_FORWARD; k <= APK_CONV_BACKWARD_WEIGHTS; k++) {
      if (k == APK_CONV_BACKWARD_DATA && vx->first)
        continue;
      double priced = ap_conv_kernel_s(c, k, c->batch, c->in_channels, c->out_channels, dk);
      double measured = measure(&o, k, samples);
      priced_all += priced;
      measured_all += measured;
      printf("| %s | %s | %s | %.1f | %.1f | %.2f |\n", g->nodes[vx->node].name,
             kernel_names[k], algo_names[apk_conv2d_choose(c, (apk_conv_kernel)k)], 1e6 * priced,
             1e6 * measured, priced / measured);
      fflush(stdout);
    }
    free(o.x), free(o.w), free(o.y), free(o.dy), free(o.dx), free(o.dw), free(o.work);
  }
  printf("| all | | | %.1f | %.1f | %.2f |\n", 1e6 * priced_all, 1e6 * measured_all,
         measured_all > 0 ? priced_all / measured_all : NAN);
  ap_graph_free(g);
  return 0;
}
