/* The main of a generated executable (DESIGN.md, "Command line"):
 *   OUTDIR/model [--transport threads|mpi] [--steps N] [--lr X] [--seed S]
 *                [--inputs DIR] [--outputs DIR] [--report FILE.json] [--repeat N]
 * It reads (or, for training without --inputs, synthesises) the whole input
 * tensors, runs the program on every rank (an inference program once, or
 * with --repeat N once to warm up and N times timed), and writes outputs,
 * losses and the report. Every error is one line on stderr and a non-zero
 * status. */
#define _DEFAULT_SOURCE /* madvise */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "transport.h"

/* An output box a non-zero MPI rank holds until the run ends. */
typedef struct pending_box {
  struct pending_box *next;
  int index;
  aprt_box box;
  unsigned char data[];
} pending_box;

/* Header of an output box sent to rank 0 under MPI. */
typedef struct box_header {
  int32_t index;
  aprt_box box;
} box_header;

/* Per process under MPI: only this rank's boxes. */
static pending_box *pending_head;

const aprt_args *aprt_get_args(const aprt_comm *c) { return &c->ctx->args; }

const aprt_tensor *aprt_input(const aprt_comm *c, int index) {
  const aprt_run_ctx *ctx = c->ctx;
  if (!ctx->prog || index < 0 || index >= ctx->prog->n_inputs)
    return NULL;
  return &ctx->inputs[index];
}

static bool box_inside(const aprt_box *b, const aprt_tensor *t) {
  /* A dense box inside t: checked through its first and last element. */
  if (b->ndim != t->ndim)
    return false;
  int64_t first = b->offset, last = b->offset;
  for (int d = 0; d < b->ndim; d++) {
    if (b->size[d] < 0 || b->size[d] > t->dims[d])
      return false;
    if (b->size[d] > 0)
      last += (b->size[d] - 1) * b->stride[d];
  }
  return aprt_box_volume(b) == 0 || (first >= 0 && last < aprt_tensor_volume(t));
}

aprt_status aprt_output_box(aprt_comm *c, int index, const aprt_box *box, const void *local) {
  aprt_run_ctx *ctx = c->ctx;
  if (c->status)
    return c->status;
  if (!ctx->prog || index < 0 || index >= ctx->prog->n_outputs)
    return aprt_fail(c, APRT_ERR_USAGE, "output %d: the program has no such output", index);
  const aprt_tensor_spec *spec = &ctx->prog->outputs[index];
  aprt_tensor shape = {spec->dtype, spec->ndim, {0}, NULL};
  memcpy(shape.dims, spec->dims, sizeof shape.dims);
  if (!box_inside(box, &shape))
    return aprt_fail(c, APRT_ERR_USAGE, "output %d '%s': box outside the tensor", index,
                     spec->name);
  size_t es = aprt_dtype_size(spec->dtype);
  if (ctx->args.transport == APRT_MPI && c->rank != 0) {
    size_t bytes = (size_t)aprt_box_volume(box) * es;
    pending_box *p = malloc(sizeof *p + bytes);
    if (!p)
      return aprt_fail(c, APRT_ERR_NOMEM, "output %d: out of memory", index);
    p->index = index;
    p->box = *box;
    memcpy(p->data, local, bytes);
    p->next = pending_head;
    pending_head = p;
    return APRT_OK;
  }
  pthread_mutex_lock(&ctx->output_mu);
  aprt_box_unpack(ctx->outputs[index].data, box, local, es);
  ctx->output_written[index] = true;
  pthread_mutex_unlock(&ctx->output_mu);
  return APRT_OK;
}

/* Rank 0 sums the parts of the step it holds back (its own first, then
 * the other ranks' in rank order), records and prints the loss. */
static aprt_status loss_finish(aprt_comm *c) {
  aprt_run_ctx *ctx = c->ctx;
  if (!c->loss_held)
    return APRT_OK;
  c->loss_held = false;
  int step = c->loss_step;
  double total = c->loss_part;
  for (int r = 1; r < c->size; r++) {
    double part;
    aprt_status s = aprt_recv_ctl(c, r, APRT_TAG_LOSS, &part, sizeof part);
    if (s)
      return s;
    total += part;
  }
  if (ctx->losses && step >= 0 && step < ctx->args.steps) {
    ctx->losses[step] = total;
    ctx->loss_at_s[step] = c->loss_at_s;
    if (step + 1 > ctx->nlosses)
      ctx->nlosses = step + 1;
  }
  if (!ctx->quiet) {
    printf("step %d loss %.6f\n", step + 1, total);
    fflush(stdout);
  }
  return APRT_OK;
}

/* Rank 0 takes the other ranks' parts of a step's loss one step late (at
 * the next step's call, the last at aprt_loss_flush): waiting for them at
 * once would hold rank 0 until the slowest rank finished its forward phase,
 * a synchronisation in the middle of every step that the plan does not
 * have. The other ranks' sends never wait. */
aprt_status aprt_step_loss(aprt_comm *c, int step, double partial_loss) {
  if (c->status)
    return c->status;
  if (c->rank != 0)
    return aprt_send_ctl(c, 0, APRT_TAG_LOSS, &partial_loss, sizeof partial_loss);
  aprt_status s = loss_finish(c);
  if (s)
    return s;
  c->loss_held = true;
  c->loss_step = step;
  c->loss_part = partial_loss;
  c->loss_at_s = aprt_now_s();
  return APRT_OK;
}

aprt_status aprt_loss_flush(aprt_comm *c) {
  if (c->status)
    return c->status;
  return c->rank == 0 ? loss_finish(c) : APRT_OK;
}

/* Under MPI, sends this rank's output boxes to rank 0 (which receives every
 * rank's in rank order): a count, then per box a header and its data. */
static aprt_status gather_outputs(aprt_comm *c) {
  aprt_run_ctx *ctx = c->ctx;
  const aprt_program *prog = ctx->prog;
  aprt_status s = APRT_OK;
  if (c->rank != 0) {
    int64_t count = 0;
    for (pending_box *p = pending_head; p; p = p->next)
      count++;
    s = aprt_send_ctl(c, 0, APRT_TAG_OUTPUT, &count, sizeof count);
    for (pending_box *p = pending_head; p && !s; p = p->next) {
      box_header h = {p->index, p->box};
      size_t bytes = (size_t)aprt_box_volume(&p->box) *
                     aprt_dtype_size(prog->outputs[p->index].dtype);
      s = aprt_send_ctl(c, 0, APRT_TAG_OUTPUT, &h, sizeof h);
      if (!s)
        s = aprt_send_ctl(c, 0, APRT_TAG_OUTPUT, p->data, bytes);
    }
    return s;
  }
  for (int r = 1; r < c->size && !s; r++) {
    int64_t count;
    s = aprt_recv_ctl(c, r, APRT_TAG_OUTPUT, &count, sizeof count);
    for (int64_t k = 0; k < count && !s; k++) {
      box_header h;
      s = aprt_recv_ctl(c, r, APRT_TAG_OUTPUT, &h, sizeof h);
      if (s)
        break;
      if (h.index < 0 || h.index >= prog->n_outputs)
        return aprt_fail(c, APRT_ERR_TRANSPORT, "rank %d sent output %d", r, (int)h.index);
      size_t es = aprt_dtype_size(prog->outputs[h.index].dtype);
      size_t bytes = (size_t)aprt_box_volume(&h.box) * es;
      unsigned char *tmp = malloc(bytes ? bytes : 1);
      if (!tmp)
        return aprt_fail(c, APRT_ERR_NOMEM, "output from rank %d: out of memory", r);
      s = aprt_recv_ctl(c, r, APRT_TAG_OUTPUT, tmp, bytes);
      if (!s) {
        aprt_box_unpack(ctx->outputs[h.index].data, &h.box, tmp, es);
        ctx->output_written[h.index] = true;
      }
      free(tmp);
    }
  }
  return s;
}

static void free_pending_boxes(void) {
  while (pending_head) {
    pending_box *next = pending_head->next;
    free(pending_head);
    pending_head = next;
  }
}

/* One run, or with --repeat N a warm-up and N timed runs on the same inputs.
 * Timed runs are separated by a barrier, so a run's wall time (rank 0's
 * clock, from the end of the previous run to the barrier after this one)
 * covers every rank's work; the warm-up's counters and phase times are
 * dropped, so the report describes the timed runs. */
static int rank_main(aprt_comm *c, void *arg) {
  const aprt_program *prog = arg;
  aprt_run_ctx *ctx = c->ctx;
  int repeat = ctx->args.repeat;
  int runs = repeat > 0 ? repeat + 1 : 1;
  int s = repeat > 0 ? aprt_barrier_untimed(c) : APRT_OK;
  for (int r = 0; r < runs && s == APRT_OK; r++) {
    /* Under MPI a rank's boxes wait in its list for the gathering: only the
     * last run's are kept. */
    if (ctx->args.transport == APRT_MPI)
      free_pending_boxes();
    double t0 = aprt_now_s();
    s = prog->run(c, NULL);
    if (s == APRT_OK && c->status != APRT_OK)
      s = c->status;
    if (s == APRT_OK && repeat > 0)
      s = aprt_barrier_untimed(c);
    double t = aprt_now_s() - t0;
    if (s != APRT_OK || c->rank != 0) {
      if (repeat > 0 && r == 0)
        aprt_comm_reset_stats(c);
      continue;
    }
    if (repeat > 0 && r == 0) {
      aprt_comm_reset_stats(c);
      ctx->warmup_s = t;
    } else {
      ctx->run_time_s[ctx->nruns++] = t;
    }
  }
  if (s == APRT_OK && c->status == APRT_OK && ctx->args.transport == APRT_MPI &&
      prog->n_outputs > 0)
    s = gather_outputs(c);
  return s;
}

/* The constants are part of the executable (read-only pages of its file):
 * mapping them all now, in one call, takes their page faults out of the
 * first run. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux >= 5.14 */
#endif
static void populate_constants(const aprt_program *prog) {
  if (!prog->constants || prog->constants_bytes == 0)
    return;
  uintptr_t lo = (uintptr_t)prog->constants & ~(uintptr_t)4095;
  uintptr_t hi = (uintptr_t)prog->constants + prog->constants_bytes;
  if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) == 0)
    return;
  /* Older kernels: one read per page. */
  unsigned sum = 0;
  for (uintptr_t p = lo; p < hi; p += 4096)
    sum += *(const volatile unsigned char *)p;
  (void)sum;
}

/* ---- the command line --------------------------------------------------------- */

#ifdef APRT_HAVE_MPI
#define APRT_TRANSPORTS "threads (default: one process, a thread per device) or mpi\n" \
  "                    (a rank per device: mpirun -np DEVICES %s --transport mpi)"
#else
#define APRT_TRANSPORTS "threads (one process, a thread per device); this program\n" \
  "                    has no MPI transport (accparc compile --transport mpi adds it)%.0s"
#endif

/* The synopsis; with full, what every option does (--help). */
static void usage(FILE *f, const char *argv0, bool full) {
  fprintf(f,
          "usage: %s [--transport threads|mpi] [--steps N] [--lr X] [--seed S]\n"
          "          [--inputs DIR] [--outputs DIR] [--report FILE.json] [--repeat N]\n",
          argv0);
  if (!full)
    return;
  fprintf(f,
          "  --transport T     " APRT_TRANSPORTS "\n"
          "  --steps N         training steps (training programs; default 1)\n"
          "  --lr X            SGD learning rate (default 0.01)\n"
          "  --seed S          seed of the inputs a training program makes up without --inputs\n"
          "                    (default 1)\n"
          "  --inputs DIR      read the inputs from DIR/input_N.pb (ONNX TensorProto; a\n"
          "                    training program's last input is the labels)\n"
          "  --outputs DIR     write DIR/output_N.pb (a training program: its outputs, then the\n"
          "                    trained weights); DIR is created if missing\n"
          "  --report FILE     write the run's JSON report: losses, bytes sent and predicted\n"
          "                    per device, time per phase\n"
          "  --repeat N        inference: run once to warm up, then N timed runs\n",
          argv0);
}

static int parse_args(int argc, char **argv, const char *name, aprt_args *a) {
  memset(a, 0, sizeof *a);
  a->transport = APRT_THREADS;
  a->steps = 1;
  a->lr = 0.01f;
  a->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *opt = argv[i];
    if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
      usage(stdout, argv[0], true);
      return -1;
    }
    static const char *const with_value[] = {"--transport", "--steps",   "--lr",
                                             "--seed",      "--inputs",  "--outputs",
                                             "--report",    "--repeat"};
    int which = -1;
    for (int k = 0; k < (int)(sizeof with_value / sizeof with_value[0]); k++)
      if (!strcmp(opt, with_value[k]))
        which = k;
    if (which < 0) {
      fprintf(stderr, "%s: unknown option '%s'\n", name, opt);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "%s: %s needs a value\n", name, opt);
      return 2;
    }
    const char *v = argv[++i];
    char *end = NULL;
    errno = 0;
    switch (which) {
    case 0:
      if (!strcmp(v, "threads"))
        a->transport = APRT_THREADS;
      else if (!strcmp(v, "mpi"))
        a->transport = APRT_MPI;
      else {
        fprintf(stderr, "%s: --transport: '%s' is not threads or mpi\n", name, v);
        return 2;
      }
      break;
    case 1: {
      long n = strtol(v, &end, 10);
      if (errno || *end || end == v || n < 1 || n > 100000000) {
        fprintf(stderr, "%s: --steps: '%s' is not a positive integer\n", name, v);
        return 2;
      }
      a->steps = (int)n;
      break;
    }
    case 2: {
      float lr = strtof(v, &end);
      if (errno || *end || end == v || !isfinite(lr)) {
        fprintf(stderr, "%s: --lr: '%s' is not a finite number\n", name, v);
        return 2;
      }
      a->lr = lr;
      break;
    }
    case 3: {
      unsigned long long s = strtoull(v, &end, 10);
      if (errno || *end || end == v || v[0] == '-') {
        fprintf(stderr, "%s: --seed: '%s' is not a non-negative integer\n", name, v);
        return 2;
      }
      a->seed = s;
      break;
    }
    case 4: a->inputs_dir = v; break;
    case 5: a->outputs_dir = v; break;
    case 6: a->report_path = v; break;
    case 7: {
      long n = strtol(v, &end, 10);
      if (errno || *end || end == v || n < 1 || n > 1000000) {
        fprintf(stderr, "%s: --repeat: '%s' is not a positive integer\n", name, v);
        return 2;
      }
      a->repeat = (int)n;
      break;
    }
    }
  }
  return 0;
}

/* ---- inputs and outputs ----------------------------------------------------------- */

/* mkdir -p dir: every missing folder of the path is created (by any rank:
 * one that exists already is fine); an error names the first that cannot. */
static aprt_status make_dirs(const char *dir, aprt_error *err) {
  char *path = strdup(dir);
  if (!path) {
    aprt_errorf(err, "out of memory");
    return APRT_ERR_NOMEM;
  }
  aprt_status s = APRT_OK;
  struct stat st;
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != 0)
      continue;
    char end = *p;
    *p = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
      aprt_errorf(err, "--outputs %s: cannot create %s: %s", dir, path, strerror(errno));
      s = APRT_ERR_IO;
    } else if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
      aprt_errorf(err, "--outputs %s: %s is not a directory", dir, path);
      s = APRT_ERR_IO;
    }
    *p = end;
    if (s || !end)
      break;
  }
  free(path);
  return s;
}

static char *path_join(const char *dir, const char *stem, int index) {
  size_t len = strlen(dir) + strlen(stem) + 32;
  char *p = malloc(len);
  if (p)
    snprintf(p, len, "%s/%s_%d.pb", dir, stem, index);
  return p;
}


/* Seeded integer inputs (labels, indices) in whatever width the input has;
 * 16-bit floats get zero bits, the only value that needs no conversion. */
static void store_integer(aprt_tensor *t, int64_t k, uint64_t v) {
  switch (aprt_dtype_size(t->dtype)) {
  case 1: ((uint8_t *)t->data)[k] = (uint8_t)v; break;
  case 2: ((uint16_t *)t->data)[k] = t->dtype == APRT_FLOAT16 || t->dtype == APRT_BFLOAT16 ? 0 : (uint16_t)v; break;
  case 4: ((uint32_t *)t->data)[k] = (uint32_t)v; break;
  default: ((uint64_t *)t->data)[k] = v; break;
  }
}

static aprt_status load_inputs(const aprt_program *prog, const aprt_args *a,
                               aprt_tensor *inputs, aprt_error *err) {
  if (!a->inputs_dir && !prog->train && prog->n_inputs > 0) {
    aprt_errorf(err, "inference needs --inputs DIR holding input_0.pb..input_%d.pb",
                prog->n_inputs - 1);
    return APRT_ERR_USAGE;
  }
  for (int i = 0; i < prog->n_inputs; i++) {
    const aprt_tensor_spec *spec = &prog->inputs[i];
    aprt_tensor *t = &inputs[i];
    if (a->inputs_dir) {
      char *path = path_join(a->inputs_dir, "input", i);
      if (!path) {
        aprt_errorf(err, "out of memory");
        return APRT_ERR_NOMEM;
      }
      aprt_status s = aprt_tensor_read_expect(path, spec->dtype, spec->ndim, spec->dims, t, err);
      if (s == APRT_ERR_MISMATCH) {
        char why[APRT_ERR_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        aprt_errorf(err, "input '%s', the shape the program was compiled for: %s", spec->name,
                    why);
      }
      if (!s && spec->dtype == APRT_INT64 && spec->classes > 0) {
        const int64_t *v = t->data;
        for (int64_t k = 0; k < aprt_tensor_volume(t); k++)
          if ((v[k] < 0 || v[k] >= spec->classes) && (!spec->ignore || v[k] != spec->ignore)) {
            aprt_errorf(err, "%s: element %lld of '%s' is %lld; it must be in [0, %lld) (a "
                        "label, or an index into a table of that many rows)",
                        path, (long long)k, spec->name, (long long)v[k],
                        (long long)spec->classes);
            s = APRT_ERR_MISMATCH;
            break;
          }
      }
      free(path);
      if (s)
        return s;
      continue;
    }
    /* Training without data: values from the seed, the same whatever the
     * transport or the number of devices. */
    memset(t, 0, sizeof *t);
    t->dtype = spec->dtype;
    t->ndim = spec->ndim;
    memcpy(t->dims, spec->dims, sizeof t->dims);
    int64_t n = aprt_tensor_volume(t);
    t->data = malloc(n ? (size_t)n * aprt_dtype_size(t->dtype) : 1);
    if (!t->data) {
      aprt_errorf(err, "input %d '%s': out of memory", i, spec->name);
      return APRT_ERR_NOMEM;
    }
    for (int64_t k = 0; k < n; k++) {
      uint64_t stream = 1000u + (uint64_t)i;
      if (t->dtype == APRT_FLOAT || t->dtype == APRT_DOUBLE) {
        double u = aprt_rand_uniform(a->seed, stream, (uint64_t)k);
        if (t->dtype == APRT_FLOAT)
          ((float *)t->data)[k] = (float)u;
        else
          ((double *)t->data)[k] = u;
      } else {
        /* Labels and token ids in their range; other integers (masks) 0 or 1. */
        uint64_t range = spec->classes > 0 ? (uint64_t)spec->classes : 2;
        uint64_t v = aprt_rand_u64(a->seed, stream, (uint64_t)k) % range;
        store_integer(t, k, v);
      }
    }
  }
  return APRT_OK;
}

static aprt_status alloc_outputs(const aprt_program *prog, aprt_run_ctx *ctx, aprt_error *err) {
  for (int i = 0; i < prog->n_outputs; i++) {
    const aprt_tensor_spec *spec = &prog->outputs[i];
    aprt_tensor *t = &ctx->outputs[i];
    t->dtype = spec->dtype;
    t->ndim = spec->ndim;
    memcpy(t->dims, spec->dims, sizeof t->dims);
    int64_t n = aprt_tensor_volume(t);
    t->data = calloc(n ? (size_t)n : 1, aprt_dtype_size(t->dtype));
    if (!t->data) {
      aprt_errorf(err, "output %d '%s': out of memory", i, spec->name);
      return APRT_ERR_NOMEM;
    }
  }
  return APRT_OK;
}

static aprt_status write_outputs(const aprt_program *prog, const aprt_run_ctx *ctx,
                                 aprt_error *err) {
  for (int i = 0; i < prog->n_outputs; i++)
    if (!ctx->output_written[i]) {
      aprt_errorf(err, "output %d '%s' was not written by any device", i,
                  prog->outputs[i].name);
      return APRT_ERR_USAGE;
    }
  for (int i = 0; i < prog->n_outputs; i++) {
    char *path = path_join(ctx->args.outputs_dir, "output", i);
    if (!path) {
      aprt_errorf(err, "out of memory");
      return APRT_ERR_NOMEM;
    }
    aprt_status s = aprt_tensor_write(path, prog->outputs[i].name, &ctx->outputs[i], err);
    free(path);
    if (s)
      return s;
  }
  return APRT_OK;
}

/* Everything after argument parsing; returns the exit status. */
static int run_program(const aprt_program *prog, aprt_run_ctx *ctx, const char *name,
                       int is_root) {
  aprt_error err = {{0}};
  int n_in = prog->n_inputs, n_out = prog->n_outputs, ndev = prog->ndev;
  ctx->inputs = calloc((size_t)(n_in ? n_in : 1), sizeof *ctx->inputs);
  ctx->outputs = calloc((size_t)(n_out ? n_out : 1), sizeof *ctx->outputs);
  ctx->output_written = calloc((size_t)(n_out ? n_out : 1), sizeof *ctx->output_written);
  ctx->losses = calloc((size_t)ctx->args.steps, sizeof *ctx->losses);
  ctx->loss_at_s = calloc((size_t)ctx->args.steps, sizeof *ctx->loss_at_s);
  ctx->run_time_s = calloc((size_t)(ctx->args.repeat > 0 ? ctx->args.repeat : 1),
                           sizeof *ctx->run_time_s);
  ctx->warmup_s = -1;
  aprt_rank_stats *stats = calloc((size_t)ndev, sizeof *stats);
  if (prog->n_rows > 0)
    ctx->row_s = calloc((size_t)ndev * (size_t)prog->n_rows, sizeof *ctx->row_s);
  aprt_status s = APRT_OK;
  if (!ctx->inputs || !ctx->outputs || !ctx->output_written || !ctx->losses ||
      !ctx->loss_at_s || !ctx->run_time_s || !stats || (prog->n_rows > 0 && !ctx->row_s)) {
    aprt_errorf(&err, "out of memory");
    s = APRT_ERR_NOMEM;
  }
  /* Made before the run, so a long training run is not lost to a typo. */
  if (!s && ctx->args.outputs_dir)
    s = make_dirs(ctx->args.outputs_dir, &err);
  if (!s)
    s = load_inputs(prog, &ctx->args, ctx->inputs, &err);
  if (!s)
    s = alloc_outputs(prog, ctx, &err);
  /* Under MPI every rank reads the inputs and would print the same line;
   * only rank 0 reports errors found before the run. */
  bool print = is_root;
  if (!s) {
    populate_constants(prog);
    aprt_run_opts opts = {ctx->args.transport, 0, NULL};
    s = aprt_run_ctx_run(&opts, ndev, rank_main, (void *)(uintptr_t)prog, ctx, stats, &err);
    print = true;
  }
  if (!s && is_root && ctx->args.outputs_dir)
    s = write_outputs(prog, ctx, &err);
  if (!s && is_root && ctx->args.report_path)
    s = aprt_report_write(ctx->args.report_path, prog,
                          ctx->args.transport == APRT_MPI ? "mpi" : "threads", ctx, stats, &err);
  if (s && print)
    fprintf(stderr, "%s: %s\n", name, err.msg);
  for (int i = 0; ctx->inputs && i < n_in; i++)
    aprt_tensor_free(&ctx->inputs[i]);
  for (int i = 0; ctx->outputs && i < n_out; i++)
    aprt_tensor_free(&ctx->outputs[i]);
  free(ctx->inputs);
  free(ctx->outputs);
  free(ctx->output_written);
  free(ctx->losses);
  free(ctx->loss_at_s);
  free(ctx->run_time_s);
  free(ctx->row_s);
  free(stats);
  free_pending_boxes();
  return s ? 1 : 0;
}

int aprt_main(int argc, char **argv, const aprt_program *prog) {
  const char *name = prog->name && *prog->name ? prog->name : argv[0];
  aprt_run_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.prog = prog;
  pthread_mutex_init(&ctx.output_mu, NULL);
  int parsed = parse_args(argc, argv, name, &ctx.args);
  if (parsed < 0)
    return 0;
  if (parsed > 0) {
    usage(stderr, argv[0], false);
    return parsed;
  }
  if (prog->train && ctx.args.repeat > 0) {
    /* A training run changes its weights: a repeated run would not be the
     * same computation. Its steady state is --steps. */
    fprintf(stderr, "%s: --repeat is for inference programs; a training program runs --steps "
                    "steps\n", name);
    return 2;
  }
  if (ctx.args.transport != APRT_MPI)
    return run_program(prog, &ctx, name, 1);
#ifdef APRT_HAVE_MPI
  aprt_error err = {{0}};
  if (aprt_mpi_init(&argc, &argv, &err)) {
    fprintf(stderr, "%s: %s\n", name, err.msg);
    return 1;
  }
  if (aprt_mpi_world_size() != prog->ndev) {
    if (aprt_mpi_world_rank() == 0)
      fprintf(stderr, "%s: compiled for %d devices, but MPI started %d ranks (mpirun -np %d)\n",
              name, prog->ndev, aprt_mpi_world_size(), prog->ndev);
    aprt_mpi_finalize();
    return 1;
  }
  int status = run_program(prog, &ctx, name, aprt_mpi_world_rank() == 0);
  if (status) {
    /* A failed rank cannot finalise with peers that still wait for it:
     * aborting ends every rank now, with this rank's line already printed. */
    aprt_mpi_abort(status);
  }
  aprt_mpi_finalize();
  return status;
#else
  fprintf(stderr, "%s: transport mpi: this program was linked with accpar_rt, which has no MPI "
                  "transport (compile it with accparc compile --transport mpi)\n", name);
  return 1;
#endif
}
