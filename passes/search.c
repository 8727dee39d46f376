/* Minimum-cost state assignment of a pairwise cost graph: the dynamic
 * program of HyPar/AccPar generalised from a chain of layers to any graph.
 *
 * Variables (vertices) take one of up to AP_SEARCH_STATES states (a type and
 * a ratio rule, passes.h); each has a unary cost per state and each edge a
 * cost per pair of states. The solver eliminates vertices of
 * degree <= 2 (a degree-1 vertex folds into its neighbour, a degree-2 vertex
 * becomes an edge between its two neighbours, parallel edges add up): a
 * chain is the published layer-wise DP, and every series-parallel graph
 * (ResNet shortcuts, Inception and SqueezeNet concatenations, DenseNet's
 * incremental concatenations) reduces completely, so the result is exact.
 * Whatever remains has no vertex of degree <= 2; the solver then conditions
 * on the vertex of largest degree, trying each of its states, while the
 * number of branches stays within AP_SEARCH_BRANCHES (still exact); beyond
 * that it fixes the vertex to its locally best state (a bounded, inexact
 * method, named in the optimality string).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

enum { NS = AP_SEARCH_STATES };

/* Conditioning copies the problem once per branch; the branches allowed
 * keep that work under about AP_SEARCH_WORK vertex-and-edge copies. */
enum { AP_SEARCH_BRANCHES = 19683, AP_SEARCH_WORK = 4000000 };

typedef struct record {
  int v, w1, w2;       /* eliminated vertex and the neighbours it depended on (-1: none) */
  int8_t arg[NS][NS];    /* its best state given the neighbours' states; [0][0] for none */
} record;

typedef struct sp {
  int n, m, cap_m;
  double (*u)[NS];
  int (*ends)[2];
  double (*w)[NS][NS];
  bool *edge_alive, *var_alive;
  /* Each vertex's edges, live and dead, in the order they were made (the
   * order a scan of every edge met them in): first[v], then next[e][end]
   * at the end of e that is v; deg[v] counts the live ones. A scan of
   * every edge per vertex made planning a recurrent model unrolled over
   * time (tests/op_models.py's ops_recurrent on three devices) take 14 s. */
  int *first, *last, *deg;
  int (*next)[2];
  record *rec;
  int n_rec;
  double constant;     /* costs of vertices already fixed or eliminated with no neighbour */
} sp;

static double ecost(const sp *s, int e, int v, int sv, int so) {
  return s->ends[e][0] == v ? s->w[e][sv][so] : s->w[e][so][sv];
}

static int other(const sp *s, int e, int v) {
  return s->ends[e][0] == v ? s->ends[e][1] : s->ends[e][0];
}

/* The edge after e among v's (an end of e), or -1. */
static int next_at(const sp *s, int e, int v) { return s->next[e][s->ends[e][0] == v ? 0 : 1]; }

/* The live edge a-b, or -1. */
static int find_edge(const sp *s, int a, int b) {
  for (int e = s->first[a]; e >= 0; e = next_at(s, e, a))
    if (s->edge_alive[e] && other(s, e, a) == b)
      return e;
  return -1;
}

/* Puts the new edge e last among the edges of its end `end`. */
static void link_end(sp *s, int e, int end) {
  int v = s->ends[e][end], last = s->last[v];
  s->next[e][end] = -1;
  if (last < 0)
    s->first[v] = e;
  else
    s->next[last][s->ends[last][0] == v ? 0 : 1] = e;
  s->last[v] = e;
  s->deg[v]++;
}

static void kill_edge(sp *s, int e) {
  s->edge_alive[e] = false;
  s->deg[s->ends[e][0]]--;
  s->deg[s->ends[e][1]]--;
}

/* Adds cost c[sa][sb] to the edge a-b, creating it when absent. */
static void add_edge(sp *s, int a, int b, double c[NS][NS]) {
  int e = find_edge(s, a, b);
  if (e < 0) {
    if (s->m == s->cap_m)
      ap_die("edge capacity exceeded");
    e = s->m++;
    s->ends[e][0] = a;
    s->ends[e][1] = b;
    s->edge_alive[e] = true;
    memset(s->w[e], 0, sizeof s->w[e]);
    link_end(s, e, 0);
    link_end(s, e, 1);
  }
  for (int x = 0; x < NS; x++)
    for (int y = 0; y < NS; y++)
      s->w[e][x][y] += s->ends[e][0] == a ? c[x][y] : c[y][x];
}

/* v's first live edges, at most max of them, into out; returns how many. */
static int incident(const sp *s, int v, int *out, int max) {
  int d = 0;
  for (int e = s->first[v]; e >= 0 && d < max; e = next_at(s, e, v))
    if (s->edge_alive[e])
      out[d++] = e;
  return d;
}

/* Eliminates every vertex of degree <= 2 until none is left; returns the
 * number of live vertices remaining. */
static int eliminate(sp *s) {
  bool progress = true;
  while (progress) {
    progress = false;
    for (int v = 0; v < s->n; v++) {
      if (!s->var_alive[v] || s->deg[v] > 2)
        continue;
      int inc[2], d = incident(s, v, inc, 2);
      record *r = &s->rec[s->n_rec++];
      memset(r, 0, sizeof *r);
      r->v = v;
      r->w1 = r->w2 = -1;
      if (d == 0) {
        int best = 0;
        for (int x = 1; x < NS; x++)
          if (s->u[v][x] < s->u[v][best])
            best = x;
        r->arg[0][0] = (int8_t)best;
        s->constant += s->u[v][best];
      } else if (d == 1) {
        int w = other(s, inc[0], v);
        r->w1 = w;
        for (int y = 0; y < NS; y++) {
          int best = 0;
          double bc = INFINITY;
          for (int x = 0; x < NS; x++) {
            double c = s->u[v][x] + ecost(s, inc[0], v, x, y);
            if (c < bc) {
              bc = c;
              best = x;
            }
          }
          r->arg[y][0] = (int8_t)best;
          s->u[w][y] += bc;
        }
        kill_edge(s, inc[0]);
      } else {
        int w1 = other(s, inc[0], v), w2 = other(s, inc[1], v);
        double c[NS][NS];
        r->w1 = w1;
        r->w2 = w2;
        for (int y = 0; y < NS; y++)
          for (int z = 0; z < NS; z++) {
            int best = 0;
            double bc = INFINITY;
            for (int x = 0; x < NS; x++) {
              double t = s->u[v][x] + ecost(s, inc[0], v, x, y) + ecost(s, inc[1], v, x, z);
              if (t < bc) {
                bc = t;
                best = x;
              }
            }
            r->arg[y][z] = (int8_t)best;
            c[y][z] = bc;
          }
        kill_edge(s, inc[0]);
        kill_edge(s, inc[1]);
        if (w1 == w2) { /* two parallel edges: the diagonal folds into the vertex */
          r->w2 = -2;
          for (int y = 0; y < NS; y++)
            s->u[w1][y] += c[y][y];
        } else {
          add_edge(s, w1, w2, c);
        }
      }
      s->var_alive[v] = false;
      progress = true;
    }
  }
  int left = 0;
  for (int v = 0; v < s->n; v++)
    left += s->var_alive[v];
  return left;
}

/* Fixes vertex v to state x: its edges become unary costs of the neighbours. */
static void fix(sp *s, int v, int x) {
  for (int e = s->first[v]; e >= 0; e = next_at(s, e, v))
    if (s->edge_alive[e]) {
      int w = other(s, e, v);
      for (int y = 0; y < NS; y++)
        s->u[w][y] += ecost(s, e, v, x, y);
      kill_edge(s, e);
    }
  s->constant += s->u[v][x];
  s->var_alive[v] = false;
  record *r = &s->rec[s->n_rec++];
  memset(r, 0, sizeof *r);
  r->v = v;
  r->w1 = r->w2 = -1;
  r->arg[0][0] = (int8_t)x;
}

static void assign(const sp *s, uint8_t *state) {
  for (int i = s->n_rec - 1; i >= 0; i--) {
    const record *r = &s->rec[i];
    int y = r->w1 >= 0 ? state[r->w1] : 0;
    int z = r->w2 >= 0 ? state[r->w2] : r->w2 == -2 ? y : 0;
    state[r->v] = (uint8_t)r->arg[y][z];
  }
}

/* A copy of a in fresh arena storage; with copy false, only the storage.
 * Past the edges made so far (m) and the records (n_rec), the storage is
 * left uncleared, written before it is read: conditioning clones the
 * problem once per branch, and clearing the room for every edge it could
 * make (2 m + n + 1 of 288 bytes each) was half the planning time of a
 * recurrent model unrolled over time. */
static sp *sp_clone(const sp *a, ap_arena *ar, bool copy) {
  sp *s = ap_arena_alloc(ar, sizeof *s);
  if (!s)
    return NULL;
  *s = *a;
  s->u = ap_arena_array_uncleared(ar, (size_t)a->n, sizeof *s->u);
  s->ends = ap_arena_array_uncleared(ar, (size_t)a->cap_m, sizeof *s->ends);
  s->w = ap_arena_array_uncleared(ar, (size_t)a->cap_m, sizeof *s->w);
  s->edge_alive = ap_arena_array_uncleared(ar, (size_t)a->cap_m, 1);
  s->var_alive = ap_arena_array_uncleared(ar, (size_t)a->n, 1);
  s->first = ap_arena_array_uncleared(ar, (size_t)a->n + 1, sizeof *s->first);
  s->last = ap_arena_array_uncleared(ar, (size_t)a->n + 1, sizeof *s->last);
  s->deg = ap_arena_array_uncleared(ar, (size_t)a->n + 1, sizeof *s->deg);
  s->next = ap_arena_array_uncleared(ar, (size_t)a->cap_m, sizeof *s->next);
  s->rec = ap_arena_array_uncleared(ar, (size_t)a->n + 1, sizeof *s->rec);
  if (!s->u || !s->ends || !s->w || !s->edge_alive || !s->var_alive || !s->first || !s->last ||
      !s->deg || !s->next || !s->rec)
    return NULL;
  if (!copy)
    return s;
  memcpy(s->u, a->u, (size_t)a->n * sizeof *s->u);
  memcpy(s->ends, a->ends, (size_t)a->m * sizeof *s->ends);
  memcpy(s->w, a->w, (size_t)a->m * sizeof *s->w);
  memcpy(s->edge_alive, a->edge_alive, (size_t)a->m);
  memcpy(s->var_alive, a->var_alive, (size_t)a->n);
  memcpy(s->first, a->first, (size_t)a->n * sizeof *s->first);
  memcpy(s->last, a->last, (size_t)a->n * sizeof *s->last);
  memcpy(s->deg, a->deg, (size_t)a->n * sizeof *s->deg);
  memcpy(s->next, a->next, (size_t)a->m * sizeof *s->next);
  memcpy(s->rec, a->rec, (size_t)a->n_rec * sizeof *s->rec);
  return s;
}

typedef struct outcome {
  int conditioned, greedy; /* vertices conditioned on exactly / fixed greedily */
} outcome;

/* Solves s (consumed) into state[n] and *cost; budget is how many branches
 * conditioning may still open. A branch's problem dies once its assignment
 * is compared, so the copies alive at once are one per depth, not one per
 * branch (1.6 GB for a recurrent model unrolled over time). Returns false
 * when out of memory. */
static bool solve(sp *s, long budget, ap_arena *ar, outcome *o, uint8_t *state, double *cost) {
  while (eliminate(s) > 0) {
    int v = -1, dv = -1;
    for (int x = 0; x < s->n; x++)
      if (s->var_alive[x] && s->deg[x] > dv) {
        dv = s->deg[x];
        v = x;
      }
    int states = 0;
    for (int x = 0; x < NS; x++)
      states += isfinite(s->u[v][x]);
    if (states > 1 && budget >= states) {
      o->conditioned++;
      uint8_t *branch = ap_arena_array_uncleared(ar, (size_t)s->n, 1);
      if (!branch)
        return false;
      bool any = false;
      for (int x = 0; x < NS; x++) {
        if (!isfinite(s->u[v][x]))
          continue;
        ap_arena_mark mark = ap_arena_mark_now(ar);
        sp *c = sp_clone(s, ar, true);
        if (!c)
          return false;
        fix(c, v, x);
        double c_cost;
        if (!solve(c, budget / states, ar, o, branch, &c_cost))
          return false;
        if (!any || c_cost < *cost) { /* the first of equal costs */
          any = true;
          *cost = c_cost;
          memcpy(state, branch, (size_t)s->n);
        }
        ap_arena_release(ar, mark);
      }
      return true;
    }
    /* A single allowed state is no choice; otherwise, over budget, the
     * state that is best against each neighbour's best. */
    o->greedy += states > 1;
    int bx = 0;
    double bc = INFINITY;
    for (int x = 0; x < NS; x++) {
      double c = s->u[v][x];
      for (int e = s->first[v]; e >= 0; e = next_at(s, e, v))
        if (s->edge_alive[e]) {
          double mn = INFINITY;
          for (int y = 0; y < NS; y++)
            mn = fmin(mn, ecost(s, e, v, x, y) + s->u[other(s, e, v)][y]);
          c += mn;
        }
      if (c < bc) {
        bc = c;
        bx = x;
      }
    }
    fix(s, v, bx);
  }
  assign(s, state);
  *cost = s->constant;
  return true;
}

ap_status ap_search_solve(const ap_search_problem *pr, ap_arena *ar, uint8_t *state,
                          double *cost, const char **optimality) {
  /* The copies conditioning makes die at the end, their memory kept in ar
   * for what follows: the levels' search solves hundreds of problems a plan. */
  ap_arena_mark mark = ap_arena_mark_now(ar);
  sp s0 = {.n = pr->n, .m = 0, .cap_m = 2 * pr->m + pr->n + 1};
  sp *s = sp_clone(&s0, ar, false);
  if (!s) {
    ap_arena_release(ar, mark);
    return AP_ERR_NOMEM;
  }
  for (int v = 0; v < pr->n; v++) {
    s->var_alive[v] = true;
    s->first[v] = s->last[v] = -1;
    s->deg[v] = 0;
    for (int x = 0; x < NS; x++)
      s->u[v][x] = pr->allowed[v] >> x & 1 ? pr->unary[v][x] : INFINITY;
  }
  for (int e = 0; e < pr->m; e++) {
    int a = pr->ends[e][0], b = pr->ends[e][1];
    if (a != b) {
      add_edge(s, a, b, (double(*)[NS])pr->pair[e]);
      continue;
    }
    for (int x = 0; x < NS; x++) /* a vertex's edge to itself costs its diagonal */
      s->u[a][x] += pr->pair[e][x][x];
  }
  outcome o = {0};
  long budget = AP_SEARCH_WORK / (pr->n + pr->m + 1);
  bool ok = solve(s, budget < AP_SEARCH_BRANCHES ? budget : AP_SEARCH_BRANCHES, ar, &o, state,
                  cost);
  ap_arena_release(ar, mark);
  if (!ok)
    return AP_ERR_NOMEM;
  if (optimality) {
    *optimality = "exact";
    if (o.greedy &&
        !(*optimality = ap_arena_printf(ar,
                                        "bounded: conditioned on %d vertices, %d fixed greedily",
                                        o.conditioned, o.greedy)))
      return AP_ERR_NOMEM;
  }
  return AP_OK;
}

double ap_search_cost(const ap_search_problem *pr, const uint8_t *state) {
  double c = 0;
  for (int v = 0; v < pr->n; v++)
    c += pr->unary[v][state[v]];
  for (int e = 0; e < pr->m; e++)
    c += pr->pair[e][state[pr->ends[e][0]]][state[pr->ends[e][1]]];
  return c;
}

ap_status ap_search_exhaustive(const ap_search_problem *pr, long max_visits, uint8_t *state,
                               double *cost, long *visited) {
  double n_assign = 1;
  for (int v = 0; v < pr->n; v++)
    n_assign *= __builtin_popcount(pr->allowed[v]);
  if (n_assign > (double)max_visits) {
    *visited = (long)fmin(n_assign, 9e18);
    return AP_ERR_UNSUPPORTED;
  }
  uint8_t cur[AP_SEARCH_EXHAUSTIVE_MAX_VARS];
  if (pr->n > AP_SEARCH_EXHAUSTIVE_MAX_VARS)
    return AP_ERR_UNSUPPORTED;
  for (int v = 0; v < pr->n; v++) {
    cur[v] = 0;
    while (!(pr->allowed[v] >> cur[v] & 1))
      cur[v]++;
  }
  double best = INFINITY;
  long count = 0;
  for (;;) {
    double c = ap_search_cost(pr, cur);
    count++;
    if (c < best) {
      best = c;
      memcpy(state, cur, (size_t)pr->n);
    }
    int v = 0; /* the next assignment, as an odometer over allowed states */
    for (; v < pr->n; v++) {
      do
        cur[v]++;
      while (cur[v] < NS && !(pr->allowed[v] >> cur[v] & 1));
      if (cur[v] < NS)
        break;
      cur[v] = 0;
      while (!(pr->allowed[v] >> cur[v] & 1))
        cur[v]++;
    }
    if (v == pr->n)
      break;
  }
  *cost = best;
  *visited = count;
  return AP_OK;
}
