/* codegen/overlap.c on step lists written by hand: where each exchange's
 * start and finish end up, what they may not pass, and how a run of
 * all-reduces is split. That the moved programs compute what one device
 * computes is test_train_partitioned's and test_differential's sweeps.
 *
 * A step list is written as words, in order:
 *   @f @l @b @g @u  the phase of the words after it (forward, loss,
 *                   backward, gradient, update)
 *   kO, kI:O        a kernel writing buffer O (reading buffer I)
 *   xS:D/T          an exchange of buffer S into buffer D, tag T
 *   aB/T            an all-reduce of buffer B in place, tag T
 *   =A:B            buffer A is an alias of buffer B
 * and the result as: kO for a kernel, S<tag> and F<tag> for an exchange's
 * start and finish, X<tag> for a whole exchange, s<tag> and f<tag> for an
 * all-reduce's halves, A<tag> for a whole all-reduce. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "codegen/codegen.h"

enum { MAXS = 32, MAXB = 16 };

/* The steps of spec after cg_overlap (move: the exchanges' halves moved),
 * in the notation above; the step at index probe's writes in *writes. */
static const char *placed(const char *spec, bool move, int probe, uint64_t *writes) {
  static cg_buf bufs[MAXB];
  static cg_step steps[MAXS];
  static int args[MAXS][2];
  static ap_dxfer xfers[MAXS];
  static char out[256];
  cg_device D = {.bufs = bufs, .n_bufs = MAXB, .steps = steps, .cap_steps = MAXS};
  for (int b = 0; b < MAXB; b++)
    bufs[b] = (cg_buf){.st = CG_ARENA, .alias_of = -1, .value = -1};
  cg_phase ph = CG_PH_FORWARD;
  for (const char *p = spec; *p;) {
    int a = -1, b = -1, t = 0, n = 0;
    if (*p == ' ') {
      p++;
      continue;
    }
    if (*p == '@') {
      ph = (cg_phase)(strchr("flbgu", p[1]) - "flbgu");
      p += 2;
      continue;
    }
    if (*p == '=') {
      cr_assert_eq(sscanf(p, "=%d:%d%n", &a, &b, &n), 2, "%s", p);
      bufs[a] = (cg_buf){.st = CG_ALIAS, .alias_of = b, .value = -1};
      p += n;
      continue;
    }
    int i = D.n_steps++;
    cr_assert(i < MAXS);
    cg_step *s = &steps[i];
    *s = (cg_step){.phase = ph, .node = -1, .value = -1, .args = args[i], .xfer = &xfers[i]};
    if (*p == 'k' && (sscanf(p, "k%d:%d%n", &a, &b, &n) == 2 ||
                      (a = -1, sscanf(p, "k%d%n", &b, &n) == 1))) {
      s->kind = CG_S_KERNEL;
      s->n_args = 2;
      s->writes = 2;
    } else if (*p == 'x' && sscanf(p, "x%d:%d/%d%n", &a, &b, &t, &n) == 3) {
      s->kind = CG_S_XCHG;
      s->n_args = 2;
      s->writes = 2;
      s->tag = t;
    } else if (*p == 'a' && sscanf(p, "a%d/%d%n", &a, &t, &n) == 2) {
      s->kind = CG_S_ALLREDUCE;
      s->n_args = 1;
      s->writes = 1;
      s->tag = t;
    } else {
      cr_assert_fail("bad step list at '%s'", p);
    }
    args[i][0] = a;
    args[i][1] = b;
    p += n;
  }
  ap_arena *arena = ap_arena_new();
  cr_assert(arena);
  cr_assert(cg_overlap(&D, arena, move));
  int len = 0;
  for (int i = 0; i < D.n_steps; i++) {
    const cg_step *st = &D.steps[i];
    char c = st->kind == CG_S_KERNEL ? 'k' : st->kind == CG_S_XCHG ? "XSF"[st->half]
                                                                     : "Asf"[st->half];
    len += snprintf(out + len, sizeof out - (size_t)len, "%s%c%d", i ? " " : "", c,
                    st->kind == CG_S_KERNEL ? st->args[1] : st->tag);
  }
  if (writes)
    *writes = D.steps[probe].writes;
  ap_arena_free(arena);
  return out;
}

static const char *moved(const char *spec) { return placed(spec, true, 0, NULL); }

/* The send is posted right after its source is computed, the receive is
 * waited for right before its destination is read; independent kernels run
 * in between. */
Test(overlap, start_after_producer_finish_before_reader) {
  cr_assert_str_eq(moved("k1 k2 k3 x1:4/0 k5 k4:6"), "k1 S0 k2 k3 k5 F0 k6");
}

/* ACCPAR_NO_OVERLAP's form: exchanges stay at their readers, all-reduce
 * runs are still split. */
Test(overlap, without_moves_only_allreduce_runs_split) {
  cr_assert_str_eq(placed("@b k1 k2 x1:4/0 k4:6 @g a2/1 a6/2", false, 0, NULL),
                   "k1 k2 X0 k6 s1 s2 f1 f2");
}

/* Nothing to overlap with: the exchange stays one step, which writes its
 * destination. */
Test(overlap, adjacent_halves_are_one_step) {
  uint64_t writes;
  cr_assert_str_eq(placed("k1 x1:2/0 k2:3", true, 1, &writes), "k1 X0 k3");
  cr_assert_eq(writes, 2);
}

/* A finish may not move past a step writing the exchange's source (a
 * receiver may be copying out of it), a start not above one, and neither
 * half out of its phase. */
Test(overlap, the_source_and_the_phase_bound_the_moves) {
  cr_assert_str_eq(moved("k1 @b k2 x1:4/0 k1 k4:6"), "k1 S0 k2 F0 k1 k6");
}

/* A finish does not move past an all-reduce, nor past another exchange's
 * half; aliases count as the buffer they alias. */
Test(overlap, allreduces_exchanges_and_aliases_stop_a_finish) {
  cr_assert_str_eq(moved("=7:4 @g k1 x1:4/0 k2 a2/1 k7:6"), "k1 S0 k2 F0 A1 k6");
  cr_assert_str_eq(moved("k1 x1:4/5 k2 x2:3/6 k8 k4:6 k3:9"), "k1 S5 k2 F5 S6 k8 k6 F6 k9");
}

/* Neither half passes another exchange's: every device calls the runtime
 * in lowering's order; an exchange sending what another receives starts
 * after that one finishes. */
Test(overlap, halves_never_pass_other_communication) {
  cr_assert_str_eq(moved("k1 x1:2/0 k8 x8:3/1 k3:9 k2:10"), "k1 S0 k8 F0 X1 k9 k10");
  cr_assert_str_eq(moved("k1 x1:2/0 k8 x2:3/1 k3:9"), "k1 X0 S1 k8 F1 k9");
}

/* A run of all-reduces of one phase: every start, then every finish; a
 * second sum of one buffer ends the run; a run of one stays whole. */
Test(overlap, allreduce_runs) {
  cr_assert_str_eq(moved("@b k1 @g a1/0 a2/1 a3/2 a1/3 @u k1:4"), "k1 s0 s1 s2 f0 f1 f2 A3 k4");
}
