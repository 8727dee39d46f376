/* The pass pipeline, visible in one place. Control flow is folded or
 * unrolled first (ir/control.c), then recurrent layers (ir/recurrent.c)
 * and Einsum nodes (ir/unfuse.c) are rewritten into operators the
 * verifier knows (MatMul layers among them). Folding runs shape inference
 * node by node as it goes (exporters compute Reshape targets with Shape/
 * Gather/Concat chains, so shapes and constants depend on each other); the
 * shapes pass then re-infers the folded graph from scratch; unfuse splits
 * fused projections into layers (ir/unfuse.c); the verifier runs between
 * passes to catch a pass that broke an invariant. */
#include <string.h>

#include "ir/ir.h"

typedef ap_status (*pass_fn)(ap_graph *, ap_diag *);

static const struct {
  const char *name;
  pass_fn run;
} passes[] = {
    {"control", ap_lower_control_flow},
    {"recurrent", ap_unroll_recurrent},
    {"einsum", ap_rewrite_einsum},
    {"verify", ap_verify},
    {"fold", ap_fold_constants},
    {"shapes", ap_infer_shapes},
    {"unfuse", ap_unfuse_projections},
    {"check", ap_verify},
};

enum { N_PASSES = sizeof passes / sizeof passes[0] };

const char *const *ap_pass_names(int *count) {
  static const char *names[N_PASSES];
  for (int i = 0; i < N_PASSES; i++)
    names[i] = passes[i].name;
  if (count)
    *count = N_PASSES;
  return names;
}

ap_status ap_run_pipeline(ap_graph *g, const ap_pipeline_opts *opts, ap_diag *d) {
  const char *dump_after = opts ? opts->dump_after : NULL;
  FILE *dump_to = opts && opts->dump_to ? opts->dump_to : stdout;
  if (dump_after) {
    bool known = false;
    for (int i = 0; i < N_PASSES; i++)
      known |= strcmp(passes[i].name, dump_after) == 0;
    if (!known)
      return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                      "--dump-after: no pass named '%s' (passes: control, recurrent, einsum, verify, fold, shapes, unfuse, "
                      "check)",
                      dump_after);
  }
  for (int i = 0; i < N_PASSES; i++) {
    ap_status s = passes[i].run(g, d);
    if (s != AP_OK)
      return s;
    if (dump_after && strcmp(passes[i].name, dump_after) == 0) {
      fprintf(dump_to, "; after %s\n", passes[i].name);
      ap_dump_text(g, dump_to);
    }
  }
  return AP_OK;
}
