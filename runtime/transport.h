/* The runtime's internal header: the transport vtable and the per-rank and
 * per-run state, sectioned by source file. Generated code never includes it. */
#ifndef ACCPAR_RT_TRANSPORT_H
#define ACCPAR_RT_TRANSPORT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#include "accpar_rt.h"

/* Control tags: above every user tag, below MPI's guaranteed 32767. */
enum {
  APRT_TAG_LOSS = APRT_TAG_MAX + 1,  /* a rank's partial loss, to rank 0 */
  APRT_TAG_OUTPUT,                   /* an output box, to rank 0 */
  APRT_TAG_STATS                     /* a rank's counters, to rank 0 */
};

enum { APRT_PHASE_DEPTH = 8 };

/* A received message where it lies: its payload, or (threads) the box of
 * the sender's memory the sender lent. Valid until released. */
typedef struct aprt_view {
  size_t bytes;                /* payload bytes */
  const unsigned char *flat;   /* the payload, contiguous; NULL when lent */
  const unsigned char *base;   /* lent: the sender's buffer ... */
  aprt_box box;                /* ... the box of it, packed row-major order */
  size_t elem_size;            /* ... of elem_size bytes */
  void *handle;                /* the transport's */
} aprt_view;

/* One vtable per transport. Every wait honours c->timeout_s and gives up as
 * soon as the transport knows the awaited peer failed or exited. Errors are
 * recorded with aprt_fail by the transport itself. */
typedef struct aprt_transport {
  const char *name;
  int (*rank)(const aprt_comm *c);
  int (*size)(const aprt_comm *c);
  /* Copies buf out before returning; never waits for the receiver. */
  aprt_status (*send)(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes);
  aprt_status (*recv)(aprt_comm *c, int peer, int tag, void *buf, size_t bytes);
  aprt_status (*barrier)(aprt_comm *c);
  /* Receives exactly bytes from peer with tag without copying them out:
   * the collectives unpack or add straight from the view. */
  aprt_status (*recv_view)(aprt_comm *c, int peer, int tag, size_t bytes, aprt_view *v);
  void (*release)(aprt_comm *c, aprt_view *v);
  /* Optional (NULL: the collectives pack and send). Queues a message whose
   * payload is the box of base, without copying it; base must not change
   * until settle returns. The receiver copies straight out of it. */
  aprt_status (*lend)(aprt_comm *c, int peer, int tag, const void *base, const aprt_box *box,
                      size_t elem_size);
  /* Makes every box this rank lent safe to change again: the ones no
   * receiver has taken yet are copied into ordinary messages, the ones being
   * copied out are waited for. Never waits for a receiver to arrive, so
   * lending keeps the eager semantics of send. */
  void (*settle)(aprt_comm *c);
  /* Lets peers blocked on this rank give up at once; may be called twice. */
  void (*fail)(aprt_comm *c);
} aprt_transport;

/* What the ranks of one process share: the program, its arguments, inputs,
 * outputs and the losses rank 0 collects. */
typedef struct aprt_run_ctx {
  const aprt_program *prog;   /* NULL when run through aprt_run directly */
  aprt_args args;
  aprt_tensor *inputs;        /* prog->n_inputs */
  aprt_tensor *outputs;       /* prog->n_outputs, allocated on the ranks' process */
  bool *output_written;       /* prog->n_outputs: some rank wrote a box */
  pthread_mutex_t output_mu;  /* replicas may write the same box at once */
  double *losses;             /* args.steps, written by rank 0 */
  int nlosses;
  double *run_time_s;         /* max(args.repeat, 1) wall times, written by rank 0 */
  int nruns;                  /* timed runs done */
  double warmup_s;            /* the warm-up run's wall time; < 0 without --repeat */
  double *loss_at_s;          /* args.steps: when rank 0 added its own part of step s's
                                 loss (aprt_now_s) */
  double *row_s;              /* [rank][prog->n_rows]: seconds in each row (aprt_row),
                                 each rank's own (under MPI rank 0 receives the others'
                                 when the run ends); NULL without rows */
  int quiet;                  /* do not print "step S loss L" (tests) */
} aprt_run_ctx;

/* One aprt_buffer: the usable part and, when it was mapped, the mapping. */
typedef struct aprt_rank_buffer {
  void *p;            /* 64-aligned, bytes usable */
  size_t bytes;
  void *map;          /* mmap'd region holding p, or NULL when p is from aligned_alloc */
  size_t map_bytes;
} aprt_rank_buffer;

struct aprt_comm {
  int rank, size;
  const aprt_transport *tp;
  void *tp_state;                   /* the transport's per-rank state */
  double timeout_s;
  void *user;
  aprt_run_ctx *ctx;                /* shared by the ranks of a process */
  uint64_t bytes_sent;              /* counted payload bytes */
  uint64_t messages_sent;           /* counted messages */
  double phase_s[APRT_PHASE_COUNT]; /* exclusive seconds */
  int phase_stack[APRT_PHASE_DEPTH];
  int phase_depth;                  /* 0: APRT_PHASE_OTHER is current */
  double phase_t0;                  /* when the current phase was entered */
  int row;                          /* aprt_row's current row; -1: none */
  double row_t0;                    /* when it was entered */
  double cpu_t0;                    /* the rank's thread CPU clock when counting began */
  aprt_status status;               /* first error */
  char errmsg[APRT_ERR_MAX];
  aprt_rank_buffer bufs[APRT_MAX_BUFFERS]; /* aprt_buffer's memory, freed when the rank ends */
  void *scratch;                    /* the collectives' sums and packing, grown as needed */
  bool loss_held;                   /* rank 0: a step's loss waits for the others' parts */
  int loss_step;                    /* ... that step */
  double loss_part;                 /* ... rank 0's own part of it */
  double loss_at_s;                 /* ... when rank 0 added it (aprt_now_s) */
  size_t scratch_bytes;
};

/* ---- core.c ---------------------------------------------------------------- */

double aprt_now_s(void); /* monotonic seconds */
void aprt_comm_init(aprt_comm *c, int rank, int size, const aprt_transport *tp,
                    void *tp_state, double timeout_s);
void aprt_comm_stats(aprt_comm *c, aprt_rank_stats *out); /* closes open phases */
/* Zeroes the counters and phase times (after a warm-up run). */
void aprt_comm_reset_stats(aprt_comm *c);
/* Called on the rank's own thread when it starts: its CPU clock is per thread. */
void aprt_comm_start(aprt_comm *c);
/* Frees the rank's aprt_buffer memory and scratch; called by the transports
 * when it ends. */
void aprt_comm_release(aprt_comm *c);
/* At least bytes of scratch kept by the rank from call to call (a fresh
 * malloc of megabytes would page-fault on every collective), or NULL after
 * failing the rank. */
void *aprt_comm_scratch(aprt_comm *c, size_t bytes);
/* The barrier without a phase of its own: runs of --repeat are separated by
 * it, and its waiting time belongs to no run. */
aprt_status aprt_barrier_untimed(aprt_comm *c);
double aprt_timeout_default(double requested);
/* Uncounted messages: the runtime's control traffic. */
aprt_status aprt_send_ctl(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes);
aprt_status aprt_recv_ctl(aprt_comm *c, int peer, int tag, void *buf, size_t bytes);
/* Sets err from the first failing rank of comms[0..n-1]. */
aprt_status aprt_first_error(aprt_comm *const *comms, int n, aprt_error *err);
void aprt_errorf(aprt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- rt_threads.c ---------------------------------------------------------- */

aprt_status aprt_run_threads(const aprt_run_opts *opts, int size, aprt_rank_fn fn,
                             void *arg, aprt_run_ctx *ctx, aprt_rank_stats *stats,
                             aprt_error *err);

/* ---- rt_mpi.c (accpar_rt_mpi only) ----------------------------------------- */

aprt_status aprt_mpi_init(int *argc, char ***argv, aprt_error *err);
void aprt_mpi_finalize(void);
void aprt_mpi_abort(int code); /* releases every rank after a fatal error */
int aprt_mpi_world_rank(void);
int aprt_mpi_world_size(void);
aprt_status aprt_run_mpi(const aprt_run_opts *opts, int size, aprt_rank_fn fn, void *arg,
                         aprt_run_ctx *ctx, aprt_rank_stats *stats, aprt_error *err);

/* ---- main.c ------------------------------------------------------------------ */

/* Rank 0 takes the loss parts of the last step aprt_step_loss held back;
 * called on every rank when its function returned successfully. */
aprt_status aprt_loss_flush(aprt_comm *c);
/* Runs under either transport with ctx attached to every rank. */
aprt_status aprt_run_ctx_run(const aprt_run_opts *opts, int size, aprt_rank_fn fn,
                             void *arg, aprt_run_ctx *ctx, aprt_rank_stats *stats,
                             aprt_error *err);

/* ---- report.c ---------------------------------------------------------------- */

/* Writes the --report JSON (see docs/runtime.md) through a temporary file. */
aprt_status aprt_report_write(const char *path, const aprt_program *prog,
                              const char *transport, const aprt_run_ctx *ctx,
                              const aprt_rank_stats *stats, aprt_error *err);

#endif
