/* accparc run MODEL.onnx --devices SPEC [--strategy S] [--mode train|infer]
 *                       [--batch N] [--dim NAME=V]... [--momentum MU]
 *                       [--steps N] [--lr X] [--seed S] [--inputs DIR]
 *                       [--outputs DIR] [--report FILE.json] [--repeat N]
 * Compiles the program as `compile --backend llvm` does, but in memory
 * through ORC LLJIT, and runs it in this process on the threads transport
 * with the program options (runtime/main.c). --inputs DIR both binds the
 * graph inputs that fix shapes (as compile --inputs) and feeds the program.
 * Nothing is written but what the program options ask. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accpar/plan.h"
#include "codegen/codegen.h"
#include "tools/commands.h"

#ifdef ACCPAR_HAVE_LLVM
#include "runtime/accpar_rt.h"
#endif

static const char usage_text[] =
    "usage: accparc run MODEL.onnx --devices SPEC [--strategy S] [--mode train|infer]\n"
    "                   [--batch N] [--dim NAME=V] [--momentum MU] [program options]\n"
    "  compiles the program with the LLVM backend in memory (ORC LLJIT) and runs it\n"
    "  in this process on the threads transport; the options are compile's and the\n"
    "  program's:\n"
    "  --batch N, --dim NAME=V (repeatable), --strategy S, --mode M, --momentum MU\n"
    "  --steps N, --lr X, --seed S, --outputs DIR, --report FILE.json, --repeat N\n"
    "  --inputs DIR     binds the inputs that fix shapes (as compile --inputs) and\n"
    "                   feeds DIR/input_N.pb to the program\n";

#ifdef ACCPAR_HAVE_LLVM
/* The runtime functions generated modules call (print_llvm.c), resolved in
 * the JIT to this process's copy. */
#define RT_SYM(name, ret, params) {#name, (void (*)(void))name},
static const cg_rt_symbol rt_symbols[] = {CG_LLVM_RT_EXTERNS(RT_SYM)};
#undef RT_SYM

static int run_main(int argc, char **argv, const void *program) {
  return aprt_main(argc, argv, program);
}
#endif

static const char *base_name(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, cap, "%s", slash ? slash + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf)
    *dot = 0;
  return buf;
}

int cmd_run(int argc, char **argv) {
  const char *model = NULL, *devices = NULL, *strategy = "accpar", *mode = "infer",
             *inputs = NULL;
  int64_t batch = 0;
  cli_dims dims = {0};
  double momentum = 0;
  /* The program's own command line: its name, then the program options. */
  char **pargv = calloc((size_t)argc + 2, sizeof *pargv);
  if (!pargv) {
    fprintf(stderr, "accparc run: out of memory\n");
    return 1;
  }
  int pargc = 0, rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      free(pargv);
      return 0;
    }
    if (strcmp(a, "--devices") == 0 && has_value) {
      devices = argv[++i];
    } else if (strcmp(a, "--strategy") == 0 && has_value) {
      strategy = argv[++i];
    } else if (strcmp(a, "--mode") == 0 && has_value) {
      mode = argv[++i];
    } else if (strcmp(a, "--batch") == 0 && has_value) {
      rc = cli_parse_int64("run", a, argv[++i], &batch);
    } else if (strcmp(a, "--dim") == 0 && has_value) {
      rc = cli_parse_dim("run", argv[++i], &dims);
    } else if (strcmp(a, "--momentum") == 0 && has_value) {
      char *end;
      momentum = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(momentum >= 0 && momentum < 1))
        rc = cli_usage_error("run", "--momentum expects a number in [0, 1), got '%s'", argv[i]);
    } else if (strcmp(a, "--backend") == 0 && has_value) {
      if (strcmp(argv[++i], "llvm") != 0)
        rc = cli_usage_error("run", "--backend: run compiles with llvm only, got '%s'", argv[i]);
    } else if (strcmp(a, "--transport") == 0 && has_value) {
      if (strcmp(argv[++i], "threads") != 0)
        rc = cli_usage_error("run", "--transport: run uses threads only (compile the program "
                                    "for mpi), got '%s'", argv[i]);
    } else if (has_value && (strcmp(a, "--steps") == 0 || strcmp(a, "--lr") == 0 ||
                             strcmp(a, "--seed") == 0 || strcmp(a, "--outputs") == 0 ||
                             strcmp(a, "--report") == 0 || strcmp(a, "--repeat") == 0 ||
                             strcmp(a, "--inputs") == 0)) {
      if (strcmp(a, "--inputs") == 0)
        inputs = argv[i + 1];
      pargv[++pargc] = argv[i];
      pargv[++pargc] = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      rc = cli_usage_error("run", "unknown option or missing value: %s\n%s", a, usage_text);
    } else if (!model) {
      model = a;
    } else {
      rc = cli_usage_error("run", "more than one model given: %s\n%s", a, usage_text);
    }
  }
  if (!rc && !model)
    rc = cli_usage_error("run", "no model given\n%s", usage_text);
  if (!rc && !devices)
    rc = cli_usage_error("run", "no device array given (--devices SPEC)");
#ifndef ACCPAR_HAVE_LLVM
  if (!rc)
    rc = cli_usage_error("run", "this accparc was built without LLVM (install llvm-15-dev and "
                                "rebuild)");
  (void)strategy, (void)mode, (void)inputs, (void)batch, (void)dims, (void)momentum, (void)base_name;
  free(pargv);
  return rc;
#else
  ap_devices devs;
  ap_strategy strat;
  ap_diag d = {0};
  const cg_llvm_module *llvm = NULL;
  if (!rc && ap_devices_parse(devices, &devs, &d) != AP_OK)
    rc = cli_fail(&d);
  if (!rc && !ap_strategy_parse(strategy, &strat))
    rc = cli_usage_error("run", "--strategy must be dp, owt, hypar, accpar or exhaustive, got '%s'",
                         strategy);
  if (!rc && strcmp(mode, "infer") != 0 && strcmp(mode, "train") != 0)
    rc = cli_usage_error("run", "--mode must be infer or train, got '%s'", mode);
  if (!rc && !(llvm = cg_llvm_module_load(model, &d)))
    rc = cli_fail(&d);
  if (rc) {
    free(pargv);
    return rc;
  }
  ap_graph *g = NULL, *priced = NULL;
  if (ap_load_onnx(model, &g, &d) != AP_OK) {
    free(pargv);
    return cli_fail(&d);
  }
  char name[256];
  ap_codegen_opts opts = {.outdir = NULL,
                          .model_name = base_name(model, name, sizeof name),
                          .train = strcmp(mode, "train") == 0,
                          .momentum = momentum,
                          .device_kind = devs.kinds[0].name};
  ap_plan_opts popts = {.devices = &devs, .strategy = strat};
  cg_program *p = NULL;
  int status = 1;
  if ((batch && ap_bind_batch(g, batch, &d) != AP_OK) ||
      cli_bind_dims(g, &dims, &d) != AP_OK ||
      (inputs && cg_bind_shape_inputs(g, inputs, &d) != AP_OK) ||
      ap_check_input_dims(g, &d) != AP_OK ||
      ap_run_pipeline(g, NULL, &d) != AP_OK ||
      (devs.n_devices > 1 && ap_partition(g, &popts, &d) != AP_OK) ||
      (!g->plan && (opts.priced = priced = cli_one_device_plan(g, &devs), false)) ||
      cg_lower_codegen(g, &opts, &p, &d) != AP_OK) {
    rc = cli_fail(&d);
  } else {
    pargv[0] = (char *)opts.model_name;
    if (llvm->run(p, rt_symbols, (int)(sizeof rt_symbols / sizeof *rt_symbols), run_main,
                  pargc + 1, pargv, &status, &d) != AP_OK)
      rc = cli_fail(&d);
    else
      rc = status;
  }
  ap_graph_free(priced);
  ap_graph_free(g);
  free(pargv);
  return rc;
#endif
}
