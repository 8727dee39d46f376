/* accparc compile MODEL.onnx --devices SPEC|--plan FILE.json [--strategy S] [--mode train|infer]
 *                           [--backend c|llvm] [--batch N] [--dim NAME=V] [--inputs DIR]
 *                           [--transport threads|mpi|both] [--no-build] [--emit-llvm] -o OUTDIR
 *                           [--momentum MU]
 * Loads a model, binds what the options bind, runs the pipeline, plans the
 * partition when the array has several devices (or reads the plan), and
 * hands the lowered program to the backend: c writes the C sources of the
 * program (one per device) to OUTDIR and builds OUTDIR/model with the system
 * C compiler ($CC, $CFLAGS; default cc -O3 -march=native), its sources in
 * parallel; llvm builds it as one LLVM module, writes OUTDIR/model.o and
 * links it with $CC. On a terminal it reports its phases on stderr. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accpar/plan.h"
#include "codegen/codegen.h"
#include "tools/commands.h"

static const char usage_text[] =
    "usage: accparc compile MODEL.onnx --devices SPEC|--plan FILE.json [--strategy S]\n"
    "                       [--mode train|infer] [--momentum MU] [--backend c|llvm]\n"
    "                       [--batch N] [--dim NAME=V] [--inputs DIR]\n"
    "                       [--transport threads|mpi|both] [--no-build] [--verify]\n"
    "                       [--emit-llvm] -o OUTDIR\n"
    "  --devices SPEC   the device array (kind:count[,kind:count...] or a device file);\n"
    "                   every device computes its box of every value (the plan's)\n"
    "  --plan FILE      the plan of FILE.json ('accparc plan --format json') or of a model\n"
    "                   'accparc export' wrote, instead of a search: its devices, strategy\n"
    "                   and every layer's types, checked\n"
    "  --strategy S     dp, owt, hypar, accpar (default) or exhaustive\n"
    "  --mode M         infer (default) or train: forward, softmax cross-entropy against\n"
    "                   int64 labels, backward, SGD; on one device or partitioned over\n"
    "                   any array with any strategy\n"
    "  --momentum MU    SGD momentum of a training program (default 0: plain SGD)\n"
    "  --backend B      c (default) or llvm (one LLVM module, OUTDIR/model.o)\n"
    "  --emit-llvm      llvm: also write OUTDIR/model.ll, the module as generated\n"
    "  --batch N        bind the batch dimension\n"
    "  --dim NAME=V     bind the symbolic input dimension NAME (repeatable)\n"
    "  --inputs DIR     bind the graph inputs that fix shapes (Reshape's shape, Slice's\n"
    "                   starts...) or conditions (a scalar setting such as a sample rate\n"
    "                   reaching an If) to DIR/input_N.pb; the program checks it is fed the\n"
    "                   same; the other inputs' dims from the files\n"
    "  --transport T    the runtime OUTDIR/model links: threads (one process), or mpi\n"
    "                   or both (the MPI runtime, which also has threads: the program\n"
    "                   runs either way, 'mpirun -np DEVICES OUTDIR/model --transport mpi'\n"
    "                   or alone); default both when MPI was found, else threads\n"
    "  --no-build       write the sources only\n"
    "  --verify         run the program and the one-device program on the same seeded\n"
    "                   inputs and refuse (removing OUTDIR/model) when an output differs\n"
    "  -o OUTDIR        where the sources and OUTDIR/model go\n"
    "On a terminal the phases (parse, plan, generate, build) are reported on stderr.\n"
    "Environment: CC, CFLAGS (default -O3 -march=native); ACCPAR_BUILD_UNITY_BYTES\n"
    "(sources up to this many bytes compile as one unit; default 262144, 0: never);\n"
    "ACCPAR_BUILD_JOBS (sources compiled at once otherwise; default: the processors);\n"
    "ACCPAR_RT_LIB, ACCPAR_RT_INCLUDE,\n"
    "ACCPAR_KERNELS_DIR override where the runtime and the kernels are found.\n";


static const char *base_name(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, cap, "%s", slash ? slash + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf)
    *dot = 0;
  return buf;
}

int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *devices = NULL, *strategy = NULL, *plan_file = NULL, *mode = "infer",
             *backend = "c", *inputs = NULL, *outdir = NULL, *transport = NULL;
  int64_t batch = 0;
  double momentum = 0;
  bool build = true, verify = false, emit_llvm = false;
  cli_dims dims = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    bool has_value = i + 1 < argc;
    if (strcmp(a, "--devices") == 0 && has_value) {
      devices = argv[++i];
    } else if (strcmp(a, "--strategy") == 0 && has_value) {
      strategy = argv[++i];
    } else if (strcmp(a, "--plan") == 0 && has_value) {
      plan_file = argv[++i];
    } else if (strcmp(a, "--mode") == 0 && has_value) {
      mode = argv[++i];
    } else if (strcmp(a, "--backend") == 0 && has_value) {
      backend = argv[++i];
    } else if (strcmp(a, "--batch") == 0 && has_value) {
      if (cli_parse_int64("compile", a, argv[++i], &batch))
        return 2;
    } else if (strcmp(a, "--dim") == 0 && has_value) {
      if (cli_parse_dim("compile", argv[++i], &dims))
        return 2;
    } else if (strcmp(a, "--momentum") == 0 && has_value) {
      char *end;
      momentum = strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(momentum >= 0 && momentum < 1))
        return cli_usage_error("compile", "--momentum expects a number in [0, 1), got '%s'",
                               argv[i]);
    } else if (strcmp(a, "--inputs") == 0 && has_value) {
      inputs = argv[++i];
    } else if (strcmp(a, "-o") == 0 && has_value) {
      outdir = argv[++i];
    } else if (strcmp(a, "--transport") == 0 && has_value) {
      transport = argv[++i];
    } else if (strcmp(a, "--no-build") == 0) {
      build = false;
    } else if (strcmp(a, "--verify") == 0) {
      verify = true;
    } else if (strcmp(a, "--emit-llvm") == 0) {
      emit_llvm = true;
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("compile", "unknown option or missing value: %s\n%s", a, usage_text);
    } else if (!model) {
      model = a;
    } else {
      return cli_usage_error("compile", "more than one model given: %s\n%s", a, usage_text);
    }
  }
  if (!model)
    return cli_usage_error("compile", "no model given\n%s", usage_text);
  if (!outdir)
    return cli_usage_error("compile", "no output folder given (-o OUTDIR)");
  if (!devices && !plan_file)
    return cli_usage_error("compile", "no device array given (--devices SPEC or --plan FILE)");
  if (plan_file && strategy)
    return cli_usage_error("compile", "--strategy: --plan gives the plan, no search is made");
  ap_devices devs = {0}, want;
  ap_diag dd = {0};
  if (devices && ap_devices_parse(devices, &devs, &dd) != AP_OK)
    return cli_fail(&dd);
  want = devs;
  ap_strategy strat;
  if (!strategy)
    strategy = "accpar";
  if (!ap_strategy_parse(strategy, &strat))
    return cli_usage_error("compile", "--strategy must be dp, owt, hypar, accpar or exhaustive, got '%s'",
                           strategy);
  if (strcmp(mode, "infer") != 0 && strcmp(mode, "train") != 0)
    return cli_usage_error("compile", "--mode must be infer or train, got '%s'", mode);
  const cg_backend *be = cg_backend_named(backend);
  if (!be)
    return cli_usage_error("compile", "--backend must be c or llvm, got '%s'", backend);
  if (be->missing)
    return cli_usage_error("compile", "--backend %s: this accparc was built without it (install %s "
                           "and rebuild)", backend, be->missing);
  if (emit_llvm && strcmp(backend, "llvm") != 0)
    return cli_usage_error("compile", "--emit-llvm needs --backend llvm");
  ap_diag ld = {0};
  if (be->load && be->load(model, &ld) != AP_OK)
    return cli_fail(&ld);
  if (transport && strcmp(transport, "threads") != 0 && strcmp(transport, "mpi") != 0 &&
      strcmp(transport, "both") != 0)
    return cli_usage_error("compile", "--transport must be threads, mpi or both, got '%s'",
                           transport);
  cli_runtime_paths rt;
  ap_diag rd = {0};
  long long unity_bytes;
  if (build && (cg_build_unity_bound(&unity_bytes, &rd) != AP_OK ||
                cli_runtime_paths_find(&rt, &rd) != AP_OK))
    return cli_fail(&rd);
  bool with_mpi = false;
  if (build) {
    with_mpi = transport ? strcmp(transport, "threads") != 0 : *rt.rt_mpi_lib != 0;
    if (with_mpi && !*rt.rt_mpi_lib)
      return cli_usage_error("compile", "--transport %s: this accparc has no MPI runtime "
                             "(MPI was not found when it was built)", transport);
  }
  cli_progress progress;
  cli_progress_start(&progress, "compile");

  ap_diag d = {0};
  ap_graph *g = NULL, *priced = NULL;
  cli_phase(&progress, "parse %s", model);
  if (ap_load_onnx(model, &g, &d) != AP_OK)
    return cli_fail(&d);
  char name[256];
  ap_codegen_opts opts = {.outdir = outdir,
                          .model_name = base_name(model, name, sizeof name),
                          .train = strcmp(mode, "train") == 0,
                          .momentum = momentum,
                          .device_kind = devs.kinds[0].name};
  int rc = 0;
  ap_plan_opts popts = {.devices = &devs, .strategy = strat};
  if ((batch && ap_bind_batch(g, batch, &d) != AP_OK) ||
      cli_bind_dims(g, &dims, &d) != AP_OK ||
      (inputs && cg_bind_shape_inputs(g, inputs, &d) != AP_OK) ||
      ap_check_input_dims(g, &d) != AP_OK ||
      ap_run_pipeline(g, NULL, &d) != AP_OK ||
      (plan_file && (cli_phase(&progress, "read the plan %s", plan_file),
                     cli_load_plan(g, plan_file, devices ? &want : NULL, &devs, &d) != AP_OK)) ||
      (!plan_file && devs.n_devices > 1 &&
       (cli_phase(&progress, "plan %d devices (%s)", devs.n_devices, ap_strategy_name(strat)),
        ap_partition(g, &popts, &d) != AP_OK)) ||
      (!g->plan && (opts.priced = priced = cli_one_device_plan(g, &devs), false)) ||
      (cli_phase(&progress, "generate %s in %s", strcmp(be->name, "llvm") == 0 ? "LLVM IR" : "C",
                 outdir),
       ap_codegen(g, &opts, be, &(cg_emit_opts){.emit_llvm = emit_llvm}, &d) != AP_OK)) {
    rc = cli_fail(&d);
  } else if (build) {
    char libs[2 * CLI_PATH_MAX];
    snprintf(libs, sizeof libs, "%s%s%s", ACCPAR_RT_LINK_FLAGS, with_mpi ? " " : "",
             with_mpi ? rt.mpi_link_flags : "");
    ap_build_opts b = {.outdir = outdir,
                       .rt_lib = with_mpi ? rt.rt_mpi_lib : rt.rt_lib,
                       .rt_include = rt.rt_include,
                       .kernels_dir = rt.kernels_dir,
                       .extra_libs = libs,
                       .n_devices = devs.n_devices};
    cli_phase(&progress, "build %s/model (%s backend, %s runtime)", outdir, be->name,
              with_mpi ? "threads+MPI" : "threads");
    if (be->build(&b, &d) != AP_OK ||
        (verify && (cli_phase(&progress, "verify against the one-device program"),
                    cli_verify(argc, argv, g, model, outdir, devs.n_devices, opts.train,
                               &d) != AP_OK))) {
      char exe_path[PATH_MAX + 16];
      snprintf(exe_path, sizeof exe_path, "%s/model", outdir);
      if (verify)
        remove(exe_path);
      rc = cli_fail(&d);
    }
  }
  ap_graph_free(priced);
  ap_graph_free(g);
  if (rc == 0)
    cli_phase(&progress, "done");
  return rc;
}
