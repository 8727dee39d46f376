/* Communication placed so that it overlaps computation (issue 8, item 5).
 *
 * Lowering emits each communication step where the distribution needs it:
 * an exchange just before the first step that reads what it receives, an
 * all-reduce where its sum is due. This pass splits them in two halves
 * (cg_step.half) and moves the halves apart within their phase:
 *
 *  - an exchange's start (aprt_exchange_start: posts the sends) moves up to
 *    just after the last step that writes what it sends, so a peer finds the
 *    piece as soon as it is computed;
 *  - its finish (aprt_exchange_finish: takes the receives) moves down to
 *    just before the first step that touches what it receives, so this
 *    device works on while the piece is on its way;
 *  - a run of all-reduces of one phase becomes every start, then every
 *    finish (aprt_allreduce_start), so the run waits about once.
 *
 * A start and a finish that end up next to each other are one step again
 * (CG_HALF_WHOLE), printed as aprt_exchange; so is a run of one all-reduce.
 *
 * Halves move past computation only, never past another communication
 * step, so every device makes its runtime calls in lowering's order, which
 * is the same on every device (the tags), and no device can wait for ever.
 * Moving a start above another exchange would also cost a copy: under
 * threads a piece of 16 KB or more is lent, and the sender's next finish or
 * collective copies what no receiver has taken yet into a message (GPT-2
 * tiny's owt plan, whose LayerNorms exchange their centred input before
 * the variance's exchange, took 20.4-21.6 ms a step that way against
 * 18.4-18.7 ms with its exchanges whole).
 *
 * What the moves keep: a start moves up past no step writing its source; a
 * finish moves down past no step reading or writing its destination or
 * staging, and past no step writing its source (receivers may copy straight
 * out of it until the finish returns). The finish keeps the source among
 * its arguments, so the arena keeps the source's memory until then.
 * Received boxes are therefore written and read by the same steps in the
 * same order as before, and a partitioned program's numbers do not
 * change. */
#include <string.h>

#include "codegen/codegen.h"

/* Buffer b of D with its aliases resolved. */
static int root(const cg_device *D, int b) { return b >= 0 ? cg_buf_root(D, b) : b; }

static bool is_comm(const cg_step *s) {
  return s->kind == CG_S_XCHG || s->kind == CG_S_ALLREDUCE;
}

/* Does computation step s read or write buffer r (a root)? Write only,
 * when writes_only. (Halves never pass communication steps, so only
 * computation is asked.) */
static bool touches(const cg_device *D, const cg_step *s, int r, bool writes_only) {
  for (int a = 0; a < s->n_args; a++)
    if ((!writes_only || (s->writes >> a & 1)) && s->args[a] >= 0 && root(D, s->args[a]) == r)
      return true;
  return false;
}

/* Can exchange start st move up past step p? */
static bool start_passes(const cg_device *D, const cg_step *st, const cg_step *p) {
  if (p->phase != st->phase || is_comm(p))
    return false;
  return !touches(D, p, root(D, st->args[0]), true);
}

/* Can exchange finish st move down past step n? */
static bool finish_passes(const cg_device *D, const cg_step *st, const cg_step *n) {
  if (n->phase != st->phase || is_comm(n))
    return false;
  for (int a = 1; a < st->n_args; a++)
    if (st->args[a] >= 0 && touches(D, n, root(D, st->args[a]), false))
      return false;
  return !touches(D, n, root(D, st->args[0]), true);
}

/* The all-reduces of one phase following one another from step si that can
 * be started together: a second sum of one buffer must see the first's. */
static int allreduce_run(const cg_step *steps, int n_steps, int si) {
  int n = 0;
  while (si + n < n_steps && steps[si + n].kind == CG_S_ALLREDUCE &&
         steps[si + n].phase == steps[si].phase) {
    for (int k = 0; k < n; k++)
      if (steps[si + k].args[0] == steps[si + n].args[0])
        return n;
    n++;
  }
  return n;
}

static void swap(cg_step *a, cg_step *b) {
  cg_step t = *a;
  *a = *b;
  *b = t;
}

bool cg_overlap(cg_device *D, ap_arena *arena, bool move) {
  int comm = 0;
  for (int i = 0; i < D->n_steps; i++)
    comm += is_comm(&D->steps[i]);
  if (comm == 0)
    return true;
  int cap = D->n_steps + comm;
  cg_step *out = ap_arena_array(arena, (size_t)cap, sizeof *out);
  if (!out)
    return false;
  /* Split: exchanges in place, runs of all-reduces as starts, finishes. */
  int n = 0;
  for (int i = 0; i < D->n_steps; i++) {
    const cg_step *s = &D->steps[i];
    if (s->kind == CG_S_ALLREDUCE) {
      int run = allreduce_run(D->steps, D->n_steps, i);
      for (int half = 0; run > 1 && half < 2; half++)
        for (int k = 0; k < run; k++) {
          out[n] = s[k];
          out[n++].half = half ? CG_HALF_FINISH : CG_HALF_START;
        }
      if (run > 1) {
        i += run - 1;
        continue;
      }
    }
    out[n] = *s;
    if (s->kind == CG_S_XCHG) {
      out[n].half = CG_HALF_START;
      out[++n] = *s;
      out[n].half = CG_HALF_FINISH;
      out[n].writes = s->writes;
    }
    n++;
  }
  for (int i = 0; i < n; i++) /* a start writes nothing */
    if (out[i].kind == CG_S_XCHG && out[i].half == CG_HALF_START)
      out[i].writes = 0;
  /* Starts up, in order, so each passes the ones above it that it may. */
  for (int i = 0; move && i < n; i++)
    if (out[i].kind == CG_S_XCHG && out[i].half == CG_HALF_START)
      for (int j = i; j > 0 && start_passes(D, &out[j], &out[j - 1]); j--)
        swap(&out[j], &out[j - 1]);
  /* Finishes down, from the last. */
  for (int i = n - 1; move && i >= 0; i--)
    if (out[i].kind == CG_S_XCHG && out[i].half == CG_HALF_FINISH)
      for (int j = i; j + 1 < n && finish_passes(D, &out[j], &out[j + 1]); j++)
        swap(&out[j], &out[j + 1]);
  /* A start right before its own finish is the whole exchange again. */
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (i + 1 < n && out[i].kind == CG_S_XCHG && out[i].half == CG_HALF_START &&
        out[i + 1].kind == CG_S_XCHG && out[i + 1].half == CG_HALF_FINISH &&
        out[i + 1].tag == out[i].tag && out[i + 1].xfer == out[i].xfer) {
      out[m] = out[i + 1];
      out[m++].half = CG_HALF_WHOLE;
      i++;
      continue;
    }
    out[m++] = out[i];
  }
  D->steps = out;
  D->n_steps = m;
  D->cap_steps = cap;
  return true;
}
