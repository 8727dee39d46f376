/* The threads transport: every rank a thread of this process. A send copies
 * the payload into a message queued on the receiver's mailbox; a receive
 * waits on its own mailbox's condition variable. Inside the collectives and
 * the box exchange a rank lends instead: the queued message points at the
 * box of its own memory, the receiver copies straight from there into its
 * destination (one copy instead of pack, send, receive and unpack), and the
 * lender settles before it returns (boxes nobody took yet are copied into
 * ordinary messages then, so a lender never waits for a receiver to arrive).
 * Waits use CLOCK_MONOTONIC deadlines, and a rank that fails or returns
 * wakes every waiter, so a missing peer becomes an error within the timeout
 * (at once if it is known to be gone).
 *
 * A wait polls for a short bounded time before it blocks: a thread woken from
 * a condition variable may start running tens of microseconds after the
 * signal (a virtual machine's wake-up), and a training step of a small model
 * hands over dozens of pieces. Polling is done only when every rank can
 * have a processor of its own, and only by a rank whose recent waits mostly
 * ended within the polling time: on a machine busy with other programs a
 * peer is often off its core for a time slice, and polling for it would
 * keep a core from the programs that could run. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

typedef struct msg {
  struct msg *next;
  int src, tag;
  double queued_s;           /* when it was queued (aprt_now_s) */
  size_t bytes;
  const unsigned char *lent; /* NULL: the payload is data; else the lender's buffer */
  aprt_box box;              /* lent: the box of lent the payload is */
  size_t elem_size;          /* lent */
  unsigned char data[];      /* the payload copy */
} msg;

/* A rank's loans: lent messages still queued somewhere, and lent messages a
 * receiver has taken and is copying out. Lock order: a mailbox, then a
 * lender. */
typedef struct lender {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int queued;
  atomic_int in_flight; /* changed under mu; polled without it */
} lender;

typedef struct mailbox {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  msg *head, *tail; /* FIFO; receives take the first match */
  atomic_uint arrivals; /* messages ever queued, changed under mu; polled without it */
} mailbox;

/* A rank's recent waits for a message, written by that rank only: the
 * share of them (decaying by 1/8 per wait) whose message was queued within
 * spin_s of the wait's start, polled for or not. A line of its own, as the
 * ranks update theirs at once. */
typedef struct waits {
  _Alignas(64) double hit_rate;
} waits;

/* A rank polls while its hit rate is at least this. Alone on the machine,
 * 95-99% of a LeNet-5 training step's waits end within 50 us; with one other
 * busy program on two processors, 53-80%: then most of the polling is lost
 * and the core it takes is another program's. */
#define SPIN_HIT_RATE 0.85

typedef struct world {
  int size;
  double timeout_s;
  double spin_s;           /* how long a wait polls before it blocks; 0: never */
  int cpu_of_rank[CPU_SETSIZE]; /* the processor each rank is bound to, or -1 */
  mailbox *boxes;          /* one per rank */
  lender *lenders;         /* one per rank */
  waits *waits;            /* one per rank */
  atomic_int *gone;        /* per rank: 1 failed, 2 returned */
  pthread_mutex_t bar_mu;  /* the barrier */
  pthread_cond_t bar_cv;
  int bar_arrived;
  atomic_uint bar_generation; /* changed under bar_mu; polled without it */
  int *bar_here;           /* per rank, this generation: 0 not arrived, 1 waiting,
                            * 2 arrived and gave up waiting (timed out) */
} world;

typedef struct rank_arg {
  world *w;
  aprt_comm comm;
  aprt_rank_fn fn;
  void *arg;
  aprt_rank_stats stats; /* taken when the rank returns */
} rank_arg;

static int th_rank(const aprt_comm *c) { return c->rank; }
static int th_size(const aprt_comm *c) { return c->size; }

static void deadline_after(struct timespec *ts, double seconds) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  double whole = (double)(time_t)seconds;
  ts->tv_sec += (time_t)seconds;
  ts->tv_nsec += (long)((seconds - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* Polls until *word differs from seen, *gone is set (when gone is given) or
 * the monotonic clock passes until_s; false when the time ran out. */
static bool poll_change(const atomic_uint *word, unsigned seen, const atomic_int *gone,
                        double until_s) {
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != seen)
      return true;
    if (gone && atomic_load_explicit(gone, memory_order_relaxed))
      return true;
    /* Reading the clock costs tens of pauses; look at it now and then. */
    if (i % 32 == 0 && aprt_now_s() >= until_s)
      return false;
    cpu_relax();
  }
}

/* ACCPAR_SPIN_US (microseconds, 0 turns polling off) or the default, and 0
 * when the ranks outnumber the processors this process may run on. */
static double spin_seconds(int size) {
  double us = 50.0;
  const char *env = getenv("ACCPAR_SPIN_US");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (*end == '\0' && v >= 0)
      us = v;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < cpus)
    cpus = CPU_COUNT(&set);
  return size <= cpus ? us * 1e-6 : 0.0;
}

/* With ACCPAR_BIND=1, binds rank r to the r-th processor this process may
 * run on, when there are two ranks or more and no more ranks than
 * processors. Left to itself, the scheduler wakes a rank on the processor
 * of the rank that woke it, and two ranks that take turns waiting for each
 * other can stay there, sharing one core: on a quiet machine, runs of
 * LeNet-5's cpu:2 program took 2.1 ms a step or 3.7 ms (each device's CPU
 * 1.9 ms either way, the rest waiting), and bound, 1.86-1.91 ms every run.
 * Not the default: with other programs busy, a bound rank cannot leave a
 * core they hold (6.0 against 3.9 ms a step, measured once). */
static void plan_binding(world *w, int size) {
  for (int r = 0; r < size && r < CPU_SETSIZE; r++)
    w->cpu_of_rank[r] = -1;
  const char *env = getenv("ACCPAR_BIND");
  cpu_set_t set;
  if (size < 2 || size > CPU_SETSIZE || !env || strcmp(env, "1") != 0 ||
      sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < size)
    return;
  int r = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && r < size; cpu++)
    if (CPU_ISSET(cpu, &set))
      w->cpu_of_rank[r++] = cpu;
}

static void wake_all(world *w) {
  for (int r = 0; r < w->size; r++) {
    pthread_mutex_lock(&w->boxes[r].mu);
    pthread_cond_broadcast(&w->boxes[r].cv);
    pthread_mutex_unlock(&w->boxes[r].mu);
  }
  pthread_mutex_lock(&w->bar_mu);
  pthread_cond_broadcast(&w->bar_cv);
  pthread_mutex_unlock(&w->bar_mu);
}

static void mark_gone(world *w, int rank, int how) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&w->gone[rank], &expected, how))
    wake_all(w);
}

static void th_fail(aprt_comm *c) { mark_gone(c->tp_state, c->rank, 1); }

static void enqueue(world *w, int peer, msg *m) {
  mailbox *mb = &w->boxes[peer];
  m->queued_s = aprt_now_s();
  pthread_mutex_lock(&mb->mu);
  if (mb->tail)
    mb->tail->next = m;
  else
    mb->head = m;
  mb->tail = m;
  atomic_fetch_add_explicit(&mb->arrivals, 1, memory_order_release);
  pthread_cond_broadcast(&mb->cv);
  pthread_mutex_unlock(&mb->mu);
}

static aprt_status th_send(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes) {
  world *w = c->tp_state;
  msg *m = malloc(sizeof *m + bytes);
  if (!m)
    return aprt_fail(c, APRT_ERR_NOMEM, "send to rank %d: %zu bytes: out of memory", peer,
                     bytes);
  memset(m, 0, sizeof *m);
  m->src = c->rank;
  m->tag = tag;
  m->bytes = bytes;
  if (bytes)
    memcpy(m->data, buf, bytes);
  enqueue(w, peer, m);
  return APRT_OK;
}

/* Takes the first message from peer with tag off this rank's mailbox,
 * waiting for it; a lent one moves from the lender's queued to in_flight. */
static aprt_status take(aprt_comm *c, int peer, int tag, size_t bytes, msg **out) {
  world *w = c->tp_state;
  mailbox *mb = &w->boxes[c->rank];
  struct timespec deadline;
  deadline_after(&deadline, c->timeout_s);
  waits *mine = &w->waits[c->rank];
  double wait_from_s = 0, spin_until_s = 0;
  pthread_mutex_lock(&mb->mu);
  for (;;) {
    msg **link = &mb->head, *prev = NULL;
    while (*link && !((*link)->src == peer && (*link)->tag == tag)) {
      prev = *link;
      link = &(*link)->next;
    }
    msg *m = *link;
    if (m) {
      *link = m->next;
      if (mb->tail == m)
        mb->tail = prev;
      if (m->lent) {
        lender *l = &w->lenders[m->src];
        pthread_mutex_lock(&l->mu);
        l->queued--;
        l->in_flight++;
        pthread_mutex_unlock(&l->mu);
      }
      pthread_mutex_unlock(&mb->mu);
      if (wait_from_s > 0) {
        double hit = m->queued_s - wait_from_s <= w->spin_s ? 1.0 : 0.0;
        mine->hit_rate += (hit - mine->hit_rate) / 8;
      }
      *out = m;
      if (m->bytes != bytes) {
        size_t got = m->bytes;
        aprt_view v = {.handle = m};
        c->tp->release(c, &v);
        *out = NULL;
        return aprt_fail(c, APRT_ERR_MISMATCH,
                         "recv from rank %d tag %d: message has %zu bytes, expected %zu", peer,
                         tag, got, bytes);
      }
      return APRT_OK;
    }
    /* Checked only after the queue: what a peer sent before it failed is
     * still delivered. */
    int gone = atomic_load(&w->gone[peer]);
    if (gone && peer != c->rank) {
      pthread_mutex_unlock(&mb->mu);
      return aprt_fail(c, APRT_ERR_PEER, "recv from rank %d tag %d: rank %d %s", peer, tag,
                       peer, gone == 1 ? "failed" : "returned without sending it");
    }
    if (wait_from_s == 0 && w->spin_s > 0) {
      wait_from_s = aprt_now_s();
      if (mine->hit_rate >= SPIN_HIT_RATE)
        spin_until_s = wait_from_s + w->spin_s;
    }
    if (spin_until_s > 0) {
      unsigned seen = atomic_load_explicit(&mb->arrivals, memory_order_relaxed);
      pthread_mutex_unlock(&mb->mu);
      if (!poll_change(&mb->arrivals, seen, &w->gone[peer], spin_until_s))
        spin_until_s = 0;
      pthread_mutex_lock(&mb->mu);
      continue;
    }
    if (pthread_cond_timedwait(&mb->cv, &mb->mu, &deadline) == ETIMEDOUT) {
      pthread_mutex_unlock(&mb->mu);
      return aprt_fail(c, APRT_ERR_TIMEOUT,
                       "recv from rank %d tag %d: nothing arrived within %g s", peer, tag,
                       c->timeout_s);
    }
  }
}

static void th_release(aprt_comm *c, aprt_view *v) {
  world *w = c->tp_state;
  msg *m = v->handle;
  if (!m)
    return;
  if (m->lent) {
    lender *l = &w->lenders[m->src];
    pthread_mutex_lock(&l->mu);
    if (--l->in_flight == 0)
      pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
  }
  free(m);
  v->handle = NULL;
}

static aprt_status th_recv_view(aprt_comm *c, int peer, int tag, size_t bytes, aprt_view *v) {
  msg *m = NULL;
  memset(v, 0, sizeof *v);
  aprt_status s = take(c, peer, tag, bytes, &m);
  if (s)
    return s;
  v->bytes = m->bytes;
  v->flat = m->lent ? NULL : m->data;
  v->base = m->lent;
  v->box = m->box;
  v->elem_size = m->elem_size;
  v->handle = m;
  return APRT_OK;
}

static aprt_status th_recv(aprt_comm *c, int peer, int tag, void *buf, size_t bytes) {
  aprt_view v;
  aprt_status s = th_recv_view(c, peer, tag, bytes, &v);
  if (s)
    return s;
  if (v.flat && bytes)
    memcpy(buf, v.flat, bytes);
  else if (!v.flat)
    aprt_box_pack(buf, v.base, &v.box, v.elem_size);
  th_release(c, &v);
  return APRT_OK;
}

static aprt_status th_lend(aprt_comm *c, int peer, int tag, const void *base, const aprt_box *box,
                           size_t elem_size) {
  world *w = c->tp_state;
  msg *m = malloc(sizeof *m);
  if (!m)
    return aprt_fail(c, APRT_ERR_NOMEM, "send to rank %d: out of memory", peer);
  memset(m, 0, sizeof *m);
  m->src = c->rank;
  m->tag = tag;
  m->bytes = (size_t)aprt_box_volume(box) * elem_size;
  m->lent = base;
  m->box = *box;
  m->elem_size = elem_size;
  lender *l = &w->lenders[c->rank];
  pthread_mutex_lock(&l->mu);
  l->queued++;
  pthread_mutex_unlock(&l->mu);
  enqueue(w, peer, m);
  return APRT_OK;
}

/* Replaces this rank's lent messages still queued in mailbox r by copies. */
static bool settle_mailbox(world *w, int me, int r) {
  bool ok = true;
  mailbox *mb = &w->boxes[r];
  lender *l = &w->lenders[me];
  pthread_mutex_lock(&mb->mu);
  msg *prev = NULL;
  for (msg *m = mb->head; m;) {
    if (!(m->lent && m->src == me)) {
      prev = m;
      m = m->next;
      continue;
    }
    msg *copy = malloc(sizeof *copy + m->bytes);
    msg *next = m->next;
    if (copy) {
      memcpy(copy, m, sizeof *copy);
      copy->lent = NULL;
      aprt_box_pack(copy->data, m->lent, &m->box, m->elem_size);
      if (prev)
        prev->next = copy;
      else
        mb->head = copy;
      if (mb->tail == m)
        mb->tail = copy;
      prev = copy;
    } else {
      /* Without memory the loan is withdrawn: the receiver sees this rank
       * fail instead of reading memory that is about to change. */
      ok = false;
      if (prev)
        prev->next = next;
      else
        mb->head = next;
      if (mb->tail == m)
        mb->tail = prev;
    }
    free(m);
    pthread_mutex_lock(&l->mu);
    l->queued--;
    pthread_mutex_unlock(&l->mu);
    m = next;
  }
  pthread_mutex_unlock(&mb->mu);
  return ok;
}

static void th_settle(aprt_comm *c) {
  world *w = c->tp_state;
  lender *l = &w->lenders[c->rank];
  pthread_mutex_lock(&l->mu);
  int queued = l->queued;
  pthread_mutex_unlock(&l->mu);
  bool ok = true;
  for (int r = 0; queued > 0 && r < w->size; r++)
    ok &= settle_mailbox(w, c->rank, r);
  /* Copies out of this rank's memory in progress are short: wait for them,
   * polling first. */
  if (w->spin_s > 0 && w->waits[c->rank].hit_rate >= SPIN_HIT_RATE) {
    double until_s = aprt_now_s() + w->spin_s;
    for (unsigned i = 1; atomic_load_explicit(&l->in_flight, memory_order_acquire) > 0; i++) {
      if (i % 32 == 0 && aprt_now_s() >= until_s)
        break;
      cpu_relax();
    }
  }
  pthread_mutex_lock(&l->mu);
  while (l->in_flight > 0)
    pthread_cond_wait(&l->cv, &l->mu);
  pthread_mutex_unlock(&l->mu);
  if (!ok)
    aprt_fail(c, APRT_ERR_NOMEM, "out of memory copying a message");
}

static aprt_status th_barrier(aprt_comm *c) {
  world *w = c->tp_state;
  struct timespec deadline;
  deadline_after(&deadline, c->timeout_s);
  pthread_mutex_lock(&w->bar_mu);
  unsigned generation = w->bar_generation;
  w->bar_here[c->rank] = 1;
  if (++w->bar_arrived == w->size) {
    w->bar_arrived = 0;
    memset(w->bar_here, 0, (size_t)w->size * sizeof *w->bar_here);
    w->bar_generation++;
    pthread_cond_broadcast(&w->bar_cv);
    pthread_mutex_unlock(&w->bar_mu);
    return APRT_OK;
  }
  if (w->spin_s > 0 && w->waits[c->rank].hit_rate >= SPIN_HIT_RATE) {
    pthread_mutex_unlock(&w->bar_mu);
    poll_change(&w->bar_generation, generation, NULL, aprt_now_s() + w->spin_s);
    pthread_mutex_lock(&w->bar_mu);
  }
  bool timed_out = false;
  for (;;) {
    if (w->bar_generation != generation) {
      pthread_mutex_unlock(&w->bar_mu);
      return APRT_OK;
    }
    /* Who is missing is decided now, not before the wait: ranks may have
     * arrived while we slept. A rank known to be gone is named first. */
    int missing = -1, gone = 0;
    for (int r = 0; r < w->size; r++)
      if (w->bar_here[r] == 0) {
        int g = atomic_load(&w->gone[r]);
        if (missing < 0 || (g && !gone)) {
          missing = r;
          gone = g;
        }
      }
    if (gone || timed_out) {
      /* Leave the barrier so a late arrival cannot complete it with us
       * counted: it will find us gone instead. We stay marked as having
       * arrived: a rank that times out after us must not name us missing. */
      w->bar_here[c->rank] = 2;
      w->bar_arrived--;
      int arrived = 0;
      for (int r = 0; r < w->size; r++)
        arrived += w->bar_here[r] != 0;
      pthread_mutex_unlock(&w->bar_mu);
      if (gone)
        return aprt_fail(c, APRT_ERR_PEER, "barrier: rank %d %s before arriving", missing,
                         gone == 1 ? "failed" : "returned");
      return aprt_fail(c, APRT_ERR_TIMEOUT,
                       "barrier: %d of %d ranks arrived within %g s; rank %d is missing",
                       arrived, w->size, c->timeout_s, missing);
    }
    timed_out = pthread_cond_timedwait(&w->bar_cv, &w->bar_mu, &deadline) == ETIMEDOUT;
  }
}

static const aprt_transport threads_transport = {
    .name = "threads",
    .rank = th_rank,
    .size = th_size,
    .send = th_send,
    .recv = th_recv,
    .barrier = th_barrier,
    .recv_view = th_recv_view,
    .release = th_release,
    .lend = th_lend,
    .settle = th_settle,
    .fail = th_fail,
};

static void *rank_main(void *p) {
  rank_arg *ra = p;
  aprt_comm *c = &ra->comm;
  if (c->rank < CPU_SETSIZE && ra->w->cpu_of_rank[c->rank] >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(ra->w->cpu_of_rank[c->rank], &one);
    /* Unbound, the rank still runs correctly: the result is not checked. */
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
  }
  aprt_comm_start(c);
  int s = ra->fn(c, ra->arg);
  if (s != APRT_OK && c->status == APRT_OK)
    aprt_fail(c, (aprt_status)s, "failed with status %s and no message",
              aprt_status_name((aprt_status)s));
  aprt_comm_stats(c, &ra->stats);
  aprt_comm_release(c);
  mark_gone(ra->w, c->rank, c->status == APRT_OK ? 2 : 1);
  return NULL;
}

static void world_free(world *w) {
  for (int r = 0; r < w->size; r++) {
    for (msg *m = w->boxes[r].head, *next; m; m = next) {
      next = m->next;
      free(m);
    }
    pthread_cond_destroy(&w->boxes[r].cv);
    pthread_mutex_destroy(&w->boxes[r].mu);
    pthread_cond_destroy(&w->lenders[r].cv);
    pthread_mutex_destroy(&w->lenders[r].mu);
  }
  pthread_cond_destroy(&w->bar_cv);
  pthread_mutex_destroy(&w->bar_mu);
  free(w->boxes);
  free(w->lenders);
  free(w->waits);
  free(w->gone);
  free(w->bar_here);
}

/* A message nobody received means the ranks disagree about the plan: its
 * bytes were counted as sent but the data was lost, so the run fails. */
static aprt_status check_all_received(world *w, aprt_error *err) {
  for (int r = 0; r < w->size; r++) {
    const msg *m = w->boxes[r].head;
    if (!m)
      continue;
    int n = 0;
    for (const msg *k = m; k; k = k->next)
      n++;
    aprt_errorf(err,
                "rank %d: %d message%s never received (the first from rank %d, tag %d, %zu "
                "bytes)",
                r, n, n == 1 ? " was" : "s were", m->src, m->tag, m->bytes);
    return APRT_ERR_MISMATCH;
  }
  return APRT_OK;
}

static int cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int e = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return e;
}

aprt_status aprt_run_threads(const aprt_run_opts *opts, int size, aprt_rank_fn fn,
                             void *arg, aprt_run_ctx *ctx, aprt_rank_stats *stats,
                             aprt_error *err) {
  world w;
  memset(&w, 0, sizeof w);
  w.size = size;
  w.timeout_s = aprt_timeout_default(opts->timeout_s);
  w.spin_s = spin_seconds(size);
  plan_binding(&w, size);
  w.boxes = calloc((size_t)size, sizeof *w.boxes);
  w.lenders = calloc((size_t)size, sizeof *w.lenders);
  w.waits = aligned_alloc(_Alignof(waits), (size_t)size * sizeof *w.waits);
  w.gone = calloc((size_t)size, sizeof *w.gone);
  w.bar_here = calloc((size_t)size, sizeof *w.bar_here);
  rank_arg *ra = calloc((size_t)size, sizeof *ra);
  pthread_t *tids = calloc((size_t)size, sizeof *tids);
  aprt_comm **comms = calloc((size_t)size, sizeof *comms);
  if (!w.boxes || !w.lenders || !w.waits || !w.gone || !w.bar_here || !ra || !tids || !comms) {
    free(w.boxes);
    free(w.lenders);
    free(w.waits);
    free(w.gone);
    free(w.bar_here);
    free(ra);
    free(tids);
    free(comms);
    aprt_errorf(err, "threads: %d ranks: out of memory", size);
    return APRT_ERR_NOMEM;
  }
  pthread_mutex_init(&w.bar_mu, NULL);
  cond_init_monotonic(&w.bar_cv);
  atomic_init(&w.bar_generation, 0);
  for (int r = 0; r < size; r++) {
    pthread_mutex_init(&w.boxes[r].mu, NULL);
    cond_init_monotonic(&w.boxes[r].cv);
    pthread_mutex_init(&w.lenders[r].mu, NULL);
    pthread_cond_init(&w.lenders[r].cv, NULL);
    atomic_init(&w.lenders[r].in_flight, 0);
    w.waits[r].hit_rate = 1.0;
    atomic_init(&w.boxes[r].arrivals, 0);
    atomic_init(&w.gone[r], 0);
    ra[r].w = &w;
    ra[r].fn = fn;
    ra[r].arg = arg;
    aprt_comm_init(&ra[r].comm, r, size, &threads_transport, &w, w.timeout_s);
    ra[r].comm.user = opts->user;
    ra[r].comm.ctx = ctx;
    comms[r] = &ra[r].comm;
  }
  aprt_status status = APRT_OK;
  int started = 0;
  for (; started < size; started++)
    if (pthread_create(&tids[started], NULL, rank_main, &ra[started]) != 0)
      break;
  if (started < size) {
    /* Ranks already running would wait for the unstarted ones; failing the
     * missing ranks releases them at once. */
    for (int r = started; r < size; r++) {
      aprt_fail(&ra[r].comm, APRT_ERR_TRANSPORT, "threads: cannot create thread");
      mark_gone(&w, r, 1);
    }
  }
  for (int r = 0; r < started; r++)
    pthread_join(tids[r], NULL);
  status = aprt_first_error(comms, size, err);
  if (status == APRT_OK)
    status = check_all_received(&w, err);
  if (stats)
    for (int r = 0; r < size; r++)
      stats[r] = ra[r].stats;
  world_free(&w);
  free(ra);
  free(tids);
  free(comms);
  return status;
}
