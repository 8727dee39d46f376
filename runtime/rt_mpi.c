/* The MPI transport: every rank an MPI process of MPI_COMM_WORLD (Debian's
 * OpenMPI). Built only into accpar_rt_mpi. Sends are MPI_Isend of a private
 * copy, so they never wait for the receiver, like the threads transport;
 * receives and the barrier poll (MPI_Iprobe, MPI_Test) against a deadline,
 * because MPI's blocking calls cannot time out. A fatal error is ended by
 * aprt_main with MPI_Abort, which releases the other ranks. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport.h"

/* MPI counts are int: larger payloads travel as several messages. */
#define CHUNK_BYTES ((size_t)1 << 30)

typedef struct pending_send {
  struct pending_send *next;
  MPI_Request req;
  unsigned char data[]; /* the copy MPI reads from */
} pending_send;

typedef struct mpi_state {
  pending_send *sends; /* not yet completed */
} mpi_state;

static int mpi_rank(const aprt_comm *c) { return c->rank; }
static int mpi_size(const aprt_comm *c) { return c->size; }

static aprt_status mpi_error(aprt_comm *c, int code, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return aprt_fail(c, APRT_ERR_TRANSPORT, "%s: MPI error: %s", what, text);
}

/* Frees the copies of sends MPI has finished with. */
static void progress_sends(mpi_state *st) {
  pending_send **link = &st->sends;
  while (*link) {
    int done = 0;
    MPI_Test(&(*link)->req, &done, MPI_STATUS_IGNORE);
    if (done) {
      pending_send *p = *link;
      *link = p->next;
      free(p);
    } else {
      link = &(*link)->next;
    }
  }
}

/* Polling backs off from spinning to 1 ms sleeps: short waits stay fast,
 * long ones do not burn a core another rank may need. */
static void backoff(int *spins) {
  if (++*spins < 100)
    return;
  long ns = *spins < 1000 ? 20000L : 1000000L;
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

static aprt_status mpi_send(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes) {
  mpi_state *st = c->tp_state;
  progress_sends(st);
  size_t off = 0;
  do {
    size_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
    pending_send *p = malloc(sizeof *p + n);
    if (!p)
      return aprt_fail(c, APRT_ERR_NOMEM, "send to rank %d: %zu bytes: out of memory", peer,
                       n);
    if (n)
      memcpy(p->data, (const unsigned char *)buf + off, n);
    int e = MPI_Isend(p->data, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &p->req);
    if (e != MPI_SUCCESS) {
      free(p);
      return mpi_error(c, e, "send");
    }
    p->next = st->sends;
    st->sends = p;
    off += n;
  } while (off < bytes);
  return APRT_OK;
}

static aprt_status recv_chunk(aprt_comm *c, int peer, int tag, unsigned char *buf, size_t n,
                              size_t total, double deadline) {
  mpi_state *st = c->tp_state;
  int spins = 0;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    int e = MPI_Iprobe(peer, tag, MPI_COMM_WORLD, &flag, &status);
    if (e != MPI_SUCCESS)
      return mpi_error(c, e, "recv");
    if (flag) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if ((size_t)count != n)
        return aprt_fail(c, APRT_ERR_MISMATCH,
                         "recv from rank %d tag %d: message has %d bytes, expected %zu", peer,
                         tag, count, total);
      e = MPI_Recv(buf, count, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      return e == MPI_SUCCESS ? APRT_OK : mpi_error(c, e, "recv");
    }
    progress_sends(st);
    if (aprt_now_s() > deadline)
      return aprt_fail(c, APRT_ERR_TIMEOUT,
                       "recv from rank %d tag %d: nothing arrived within %g s", peer, tag,
                       c->timeout_s);
    backoff(&spins);
  }
}

static aprt_status mpi_recv(aprt_comm *c, int peer, int tag, void *buf, size_t bytes) {
  double deadline = aprt_now_s() + c->timeout_s;
  size_t off = 0;
  do {
    size_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
    aprt_status s = recv_chunk(c, peer, tag, (unsigned char *)buf + off, n, bytes, deadline);
    if (s)
      return s;
    off += n;
  } while (off < bytes);
  return APRT_OK;
}

/* MPI delivers into memory of ours: a buffer of the message's size. */
static aprt_status mpi_recv_view(aprt_comm *c, int peer, int tag, size_t bytes, aprt_view *v) {
  memset(v, 0, sizeof *v);
  unsigned char *buf = malloc(bytes ? bytes : 1);
  if (!buf)
    return aprt_fail(c, APRT_ERR_NOMEM, "recv from rank %d: %zu bytes: out of memory", peer,
                     bytes);
  aprt_status s = mpi_recv(c, peer, tag, buf, bytes);
  if (s) {
    free(buf);
    return s;
  }
  v->bytes = bytes;
  v->flat = buf;
  v->handle = buf;
  return APRT_OK;
}

static void mpi_release(aprt_comm *c, aprt_view *v) {
  (void)c;
  free(v->handle);
  v->handle = NULL;
}

static aprt_status mpi_barrier(aprt_comm *c) {
  mpi_state *st = c->tp_state;
  MPI_Request req;
  int e = MPI_Ibarrier(MPI_COMM_WORLD, &req);
  if (e != MPI_SUCCESS)
    return mpi_error(c, e, "barrier");
  double deadline = aprt_now_s() + c->timeout_s;
  int spins = 0;
  for (;;) {
    int done = 0;
    e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS)
      return mpi_error(c, e, "barrier");
    if (done)
      return APRT_OK;
    progress_sends(st);
    if (aprt_now_s() > deadline)
      return aprt_fail(c, APRT_ERR_TIMEOUT,
                       "barrier: not every one of %d ranks arrived within %g s", c->size,
                       c->timeout_s);
    backoff(&spins);
  }
}

/* Peers learn of a failure through aprt_main's MPI_Abort (or their own
 * timeout): MPI has no cheap way to interrupt a rank's wait from outside. */
static void mpi_fail(aprt_comm *c) { (void)c; }

static const aprt_transport mpi_transport = {
    .name = "mpi",
    .rank = mpi_rank,
    .size = mpi_size,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .recv_view = mpi_recv_view,
    .release = mpi_release,
    .lend = NULL, /* MPI_Isend of a private copy already is the eager send */
    .settle = NULL,
    .fail = mpi_fail,
};

aprt_status aprt_mpi_init(int *argc, char ***argv, aprt_error *err) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && MPI_Init(argc, argv) != MPI_SUCCESS) {
    aprt_errorf(err, "transport mpi: MPI_Init failed");
    return APRT_ERR_TRANSPORT;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return APRT_OK;
}

void aprt_mpi_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

void aprt_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

int aprt_mpi_world_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int aprt_mpi_world_size(void) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/* Waits, within the timeout, until MPI has delivered every send of this rank,
 * so finalising cannot drop a message a peer still needs. */
static aprt_status drain_sends(aprt_comm *c) {
  mpi_state *st = c->tp_state;
  double deadline = aprt_now_s() + c->timeout_s;
  int spins = 0;
  for (;;) {
    progress_sends(st);
    if (!st->sends)
      return APRT_OK;
    if (aprt_now_s() > deadline) {
      if (c->status)
        return c->status;
      return aprt_fail(c, APRT_ERR_TIMEOUT, "sends not taken by their receivers within %g s",
                       c->timeout_s);
    }
    backoff(&spins);
  }
}

aprt_status aprt_run_mpi(const aprt_run_opts *opts, int size, aprt_rank_fn fn, void *arg,
                         aprt_run_ctx *ctx, aprt_rank_stats *stats, aprt_error *err) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    aprt_errorf(err, "transport mpi: MPI is not initialised (run through aprt_main)");
    return APRT_ERR_USAGE;
  }
  int world = aprt_mpi_world_size();
  if (world != size) {
    aprt_errorf(err, "transport mpi: %d ranks requested, MPI started %d", size, world);
    return APRT_ERR_USAGE;
  }
  mpi_state st = {NULL};
  aprt_comm comm;
  aprt_comm_init(&comm, aprt_mpi_world_rank(), size, &mpi_transport, &st,
                 aprt_timeout_default(opts->timeout_s));
  comm.user = opts->user;
  comm.ctx = ctx;
  aprt_comm *c = &comm;
  aprt_comm_start(c);
  int s = fn(c, arg);
  if (s != APRT_OK && c->status == APRT_OK)
    aprt_fail(c, (aprt_status)s, "failed with status %s and no message",
              aprt_status_name((aprt_status)s));
  aprt_rank_stats mine;
  aprt_comm_stats(c, &mine);
  aprt_comm_release(c);
  /* Counters travel as control messages, so the report's bytes_sent does
   * not include them; each rank's row times follow its counters. */
  size_t n_rows = ctx && ctx->row_s ? (size_t)ctx->prog->n_rows : 0;
  if (c->status == APRT_OK) {
    if (c->rank != 0) {
      aprt_send_ctl(c, 0, APRT_TAG_STATS, &mine, sizeof mine);
      if (n_rows)
        aprt_send_ctl(c, 0, APRT_TAG_STATS, ctx->row_s + (size_t)c->rank * n_rows,
                      n_rows * sizeof *ctx->row_s);
    } else {
      if (stats)
        stats[0] = mine;
      for (int r = 1; r < size && c->status == APRT_OK; r++) {
        aprt_rank_stats theirs;
        if (aprt_recv_ctl(c, r, APRT_TAG_STATS, &theirs, sizeof theirs) == APRT_OK && stats)
          stats[r] = theirs;
        if (n_rows)
          aprt_recv_ctl(c, r, APRT_TAG_STATS, ctx->row_s + (size_t)r * n_rows,
                        n_rows * sizeof *ctx->row_s);
      }
    }
  }
  if (c->status == APRT_OK)
    drain_sends(c);
  aprt_comm *only = c;
  aprt_status status = aprt_first_error(&only, 1, err);
  /* After an error, copies of unfinished sends stay allocated: MPI may read
   * them until aprt_main's MPI_Abort ends the process. */
  return status;
}
