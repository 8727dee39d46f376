/* The backends the driver picks from (as QBE picks a target): each prints
 * or builds the same lowered program (codegen.h, "lower.c"). */
#include <string.h>

#include "codegen/codegen.h"

#ifdef ACCPAR_HAVE_LLVM
/* The LLVM backend's functions, in its module (llvm_module.c). */
static ap_status llvm_load(const char *file, ap_diag *d) {
  return cg_llvm_module_load(file, d) ? AP_OK : d->status;
}

static ap_status llvm_print(const cg_program *p, const char *outdir, const cg_emit_opts *o,
                            ap_diag *d) {
  const cg_llvm_module *m = cg_llvm_module_load(p->g->path, d);
  return m ? m->print(p, outdir, o, d) : d->status;
}

static ap_status llvm_build(const ap_build_opts *b, ap_diag *d) {
  const cg_llvm_module *m = cg_llvm_module_load(b->outdir, d);
  return m ? m->build(b, d) : d->status;
}
#endif

static const cg_backend backends[] = {
    {"c", NULL, NULL, cg_print_c, ap_codegen_build},
#ifdef ACCPAR_HAVE_LLVM
    {"llvm", NULL, llvm_load, llvm_print, llvm_build},
#else
    {"llvm", "llvm-15-dev", NULL, NULL, NULL},
#endif
};

const cg_backend *cg_backend_named(const char *name) {
  for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
    if (strcmp(backends[i].name, name) == 0)
      return &backends[i];
  return NULL;
}

ap_status cg_lower_codegen(ap_graph *g, const ap_codegen_opts *o, cg_program **out,
                           ap_diag *d) {
  cg_lower_opts lo = {.train = o->train,
                      .loss = CG_LOSS_SOFTMAX_CE,
                      .momentum = o->momentum,
                      .export_weights = o->train,
                      .model_name = o->model_name,
                      .device_kind = o->device_kind,
                      .priced = o->priced};
  return cg_lower(g, &lo, out, d);
}

ap_status ap_codegen(ap_graph *g, const ap_codegen_opts *o, const cg_backend *be,
                     const cg_emit_opts *eo, ap_diag *d) {
  cg_program *p = NULL;
  ap_status s = cg_lower_codegen(g, o, &p, d);
  if (s == AP_OK)
    s = be->emit(p, o->outdir, eo, d);
  return s;
}
