/* codegen/overlap.c on step lists written by hand: where each exchange's
 * start and finish end up, what they may not pass, and how a run of
 * all-reduces is split. That the moved programs compute what one device
 * computes is test_train_partitioned's and test_differential's sweeps. */
#include <criterion/criterion.h>

#include "codegen/codegen.h"

enum { MAXS = 32 };

typedef struct fixture {
  ap_arena *arena;
  cg_device D;
  cg_buf bufs[16];
  cg_step steps[MAXS];
  int args[MAXS][3];
  ap_dxfer xfers[MAXS];
} fixture;

static void init(fixture *F) {
  memset(F, 0, sizeof *F);
  F->arena = ap_arena_new();
  cr_assert(F->arena);
  for (int b = 0; b < 16; b++)
    F->bufs[b] = (cg_buf){.st = CG_ARENA, .alias_of = -1, .value = -1};
  F->D.bufs = F->bufs;
  F->D.n_bufs = 16;
  F->D.steps = F->steps;
  F->D.cap_steps = MAXS;
}

/* A kernel reading buffer in (or none, -1) and writing out. */
static void kernel(fixture *F, int in, int out, cg_phase ph) {
  int i = F->D.n_steps++;
  F->args[i][0] = in;
  F->args[i][1] = out;
  F->steps[i] = (cg_step){.kind = CG_S_KERNEL, .phase = ph, .node = -1, .value = -1,
                          .n_args = 2, .args = F->args[i], .writes = 2};
}

/* An exchange from src into dst with tag. */
static void xchg(fixture *F, int src, int dst, int tag, cg_phase ph) {
  int i = F->D.n_steps++;
  F->args[i][0] = src;
  F->args[i][1] = dst;
  F->steps[i] = (cg_step){.kind = CG_S_XCHG, .phase = ph, .node = -1, .value = -1,
                          .n_args = 2, .args = F->args[i], .writes = 2,
                          .xfer = &F->xfers[i], .tag = tag};
}

static void allreduce(fixture *F, int buf, int tag, cg_phase ph) {
  int i = F->D.n_steps++;
  F->args[i][0] = buf;
  F->steps[i] = (cg_step){.kind = CG_S_ALLREDUCE, .phase = ph, .node = -1, .value = -1,
                          .n_args = 1, .args = F->args[i], .writes = 1,
                          .xfer = &F->xfers[i], .tag = tag};
}

/* The steps after the pass as a string: k<out> for a kernel, S<tag> and
 * F<tag> for halves, X<tag> for a whole exchange, A<tag> for a whole
 * all-reduce, s<tag>/f<tag> for all-reduce halves. */
static const char *shape(fixture *F) {
  static char s[256];
  int n = 0;
  for (int i = 0; i < F->D.n_steps; i++) {
    const cg_step *st = &F->D.steps[i];
    char c;
    int what = st->tag;
    if (st->kind == CG_S_KERNEL) {
      c = 'k';
      what = st->args[1];
    } else if (st->kind == CG_S_XCHG) {
      c = "XSF"[st->half];
    } else {
      c = "Asf"[st->half];
    }
    n += snprintf(s + n, sizeof s - (size_t)n, "%s%c%d", i ? " " : "", c, what);
  }
  return s;
}

static void run(fixture *F) { cr_assert(cg_overlap(&F->D, F->arena, true)); }

/* The send is posted right after its source is computed, the receive is
 * waited for right before its destination is read; independent kernels run
 * in between. */
Test(overlap, start_after_producer_finish_before_reader) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD); /* the source */
  kernel(&F, -1, 2, CG_PH_FORWARD); /* independent */
  kernel(&F, -1, 3, CG_PH_FORWARD); /* independent */
  xchg(&F, 1, 4, 0, CG_PH_FORWARD);
  kernel(&F, -1, 5, CG_PH_FORWARD); /* independent */
  kernel(&F, 4, 6, CG_PH_FORWARD);  /* the reader */
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 S0 k2 k3 k5 F0 k6");
  ap_arena_free(F.arena);
}

/* ACCPAR_NO_OVERLAP's form: exchanges stay at their readers, all-reduce
 * runs are still split. */
Test(overlap, without_moves_only_allreduce_runs_split) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_BACKWARD);
  kernel(&F, -1, 2, CG_PH_BACKWARD);
  xchg(&F, 1, 4, 0, CG_PH_BACKWARD);
  kernel(&F, 4, 6, CG_PH_BACKWARD);
  allreduce(&F, 2, 1, CG_PH_GRADIENT);
  allreduce(&F, 6, 2, CG_PH_GRADIENT);
  cr_assert(cg_overlap(&F.D, F.arena, false));
  cr_assert_str_eq(shape(&F), "k1 k2 X0 k6 s1 s2 f1 f2");
  ap_arena_free(F.arena);
}

/* Nothing to overlap with: the exchange stays one step. */
Test(overlap, adjacent_halves_are_one_step) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD);
  xchg(&F, 1, 2, 0, CG_PH_FORWARD);
  kernel(&F, 2, 3, CG_PH_FORWARD);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 X0 k3");
  cr_assert_eq(F.D.steps[1].writes, 2, "the whole exchange writes its destination");
  ap_arena_free(F.arena);
}

/* A finish may not move past a step writing the exchange's source: under
 * threads a receiver may still be copying out of it. Nor may a start move
 * above a step writing its source, nor either half leave its phase. */
Test(overlap, the_source_and_the_phase_bound_the_moves) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD);
  kernel(&F, -1, 2, CG_PH_BACKWARD);
  xchg(&F, 1, 4, 0, CG_PH_BACKWARD);
  kernel(&F, -1, 1, CG_PH_BACKWARD); /* overwrites the source */
  kernel(&F, 4, 6, CG_PH_BACKWARD);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 S0 k2 F0 k1 k6");
  ap_arena_free(F.arena);
}

/* A finish does not move past an all-reduce, nor past another exchange's
 * half. Aliases count as the buffer they alias. */
Test(overlap, allreduces_exchanges_and_aliases_stop_a_finish) {
  fixture F;
  init(&F);
  F.bufs[7] = (cg_buf){.st = CG_ALIAS, .alias_of = 4, .value = -1};
  kernel(&F, -1, 1, CG_PH_GRADIENT);
  xchg(&F, 1, 4, 0, CG_PH_GRADIENT);
  kernel(&F, -1, 2, CG_PH_GRADIENT);
  allreduce(&F, 2, 1, CG_PH_GRADIENT);
  kernel(&F, 7, 6, CG_PH_GRADIENT); /* reads the destination through an alias */
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 S0 k2 F0 A1 k6");
  ap_arena_free(F.arena);

  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD);
  xchg(&F, 1, 4, 5, CG_PH_FORWARD);
  kernel(&F, -1, 2, CG_PH_FORWARD);
  xchg(&F, 2, 3, 6, CG_PH_FORWARD);
  kernel(&F, -1, 8, CG_PH_FORWARD);
  kernel(&F, 4, 6, CG_PH_FORWARD);
  kernel(&F, 3, 9, CG_PH_FORWARD);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 S5 k2 F5 S6 k8 k6 F6 k9");
  ap_arena_free(F.arena);
}

/* Neither half passes another exchange's: every device calls the runtime
 * in lowering's order. */
Test(overlap, halves_never_pass_other_communication) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD);
  xchg(&F, 1, 2, 0, CG_PH_FORWARD);
  kernel(&F, -1, 8, CG_PH_FORWARD);
  xchg(&F, 8, 3, 1, CG_PH_FORWARD);
  kernel(&F, 3, 9, CG_PH_FORWARD);
  kernel(&F, 2, 10, CG_PH_FORWARD);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 S0 k8 F0 X1 k9 k10");
  ap_arena_free(F.arena);

  init(&F);
  kernel(&F, -1, 1, CG_PH_FORWARD);
  xchg(&F, 1, 2, 0, CG_PH_FORWARD);
  kernel(&F, -1, 8, CG_PH_FORWARD);
  xchg(&F, 2, 3, 1, CG_PH_FORWARD); /* sends what the first receives */
  kernel(&F, 3, 9, CG_PH_FORWARD);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 X0 S1 k8 F1 k9");
  ap_arena_free(F.arena);
}

/* A run of all-reduces of one phase: every start, then every finish; a
 * second sum of one buffer ends the run; a run of one stays whole. */
Test(overlap, allreduce_runs) {
  fixture F;
  init(&F);
  kernel(&F, -1, 1, CG_PH_BACKWARD);
  allreduce(&F, 1, 0, CG_PH_GRADIENT);
  allreduce(&F, 2, 1, CG_PH_GRADIENT);
  allreduce(&F, 3, 2, CG_PH_GRADIENT);
  allreduce(&F, 1, 3, CG_PH_GRADIENT);
  kernel(&F, 1, 4, CG_PH_UPDATE);
  run(&F);
  cr_assert_str_eq(shape(&F), "k1 s0 s1 s2 f0 f1 f2 A3 k4");
  ap_arena_free(F.arena);
}
