/* accparc compile MODEL.onnx --devices SPEC [--strategy S] [--mode train|infer]
 *                           [--backend c|llvm] [--batch N] [--inputs DIR]
 *                           [--no-build] -o OUTDIR
 *                           [--momentum MU]
 * Loads a model, binds what the options bind, runs the pipeline, plans the
 * partition when the array has several devices, writes the C sources of the
 * program (one per device) to OUTDIR and builds OUTDIR/model with the system
 * C compiler ($CC, $CFLAGS; default cc -O3 -march=native). */
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
    "usage: accparc compile MODEL.onnx --devices SPEC [--strategy S] [--mode train|infer]\n"
    "                       [--backend c|llvm] [--batch N] [--dim NAME=V] [--inputs DIR]\n"
    "                       [--no-build]\n"
    "                       [--verify] -o OUTDIR\n"
    "  --devices SPEC   the device array (kind:count[,kind:count...] or a device file);\n"
    "                   every device computes its box of every value (the plan's)\n"
    "  --strategy S     dp, owt, hypar, accpar (default) or exhaustive\n"
    "  --mode M         infer (default) or train (one device so far)\n"
    "  --momentum MU    SGD momentum of a training program (default 0: plain SGD)\n"
    "  --backend B      c (default) or llvm\n"
    "  --batch N        bind the batch dimension\n"
    "  --dim NAME=V     bind the symbolic dimension NAME of every input (repeatable)\n"
    "  --inputs DIR     bind the graph inputs that fix shapes (Reshape's shape, Slice's\n"
    "                   starts...) to DIR/input_N.pb; the program checks it is fed the same\n"
    "  --no-build       write the sources only\n"
    "  --verify         run the program and the one-device program on the same seeded\n"
    "                   inputs and refuse (removing OUTDIR/model) when an output differs\n"
    "  -o OUTDIR        where the sources and OUTDIR/model go\n"
    "Environment: CC, CFLAGS (default -O3 -march=native); ACCPAR_RT_LIB, ACCPAR_RT_INCLUDE,\n"
    "ACCPAR_KERNELS_DIR override where the runtime and the kernels are found.\n";

/* Where the runtime and the kernels are: the environment, else what the build
 * configured, else the layout of the build and source trees (accparc in
 * BUILD/tools, the runtime archive in BUILD/runtime, sources beside this
 * file). */
#ifndef ACCPAR_RT_LIB
#define ACCPAR_RT_LIB ""
#endif
#ifndef ACCPAR_RT_INCLUDE_DIR
#define ACCPAR_RT_INCLUDE_DIR ""
#endif
#ifndef ACCPAR_KERNELS_DIR
#define ACCPAR_KERNELS_DIR ""
#endif

/* Libraries the runtime archive needs. A sanitized build (ACCPAR_SANITIZE)
 * sanitizes the runtime too, so its programs must link the sanitizers. */
#if defined(__SANITIZE_ADDRESS__)
#define AP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AP_SANITIZED 1
#endif
#endif
#ifndef ACCPAR_RT_LINK_FLAGS
#ifdef AP_SANITIZED
#define ACCPAR_RT_LINK_FLAGS "-lprotobuf-c -lpthread -lm -fsanitize=address,undefined"
#else
#define ACCPAR_RT_LINK_FLAGS "-lprotobuf-c -lpthread -lm"
#endif
#endif

static char *source_root(void) {
  char *root = strdup(__FILE__); /* .../tools/cmd_compile.c */
  for (int up = 0; root && up < 2; up++) {
    char *slash = strrchr(root, '/');
    if (!slash) {
      free(root);
      return strdup(".");
    }
    *slash = 0;
  }
  return root;
}

static const char *locate(const char *env, const char *configured, char *buf, size_t cap,
                          const char *fallback) {
  const char *v = getenv(env);
  if (v && *v)
    return v;
  if (*configured)
    return configured;
  if (snprintf(buf, cap, "%s", fallback) >= (int)cap)
    return fallback; /* too long to copy; the build then names it */
  return buf;
}

static const char *base_name(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, cap, "%s", slash ? slash + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf)
    *dot = 0;
  return buf;
}

int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *devices = NULL, *strategy = "accpar", *mode = "infer",
             *backend = "c", *inputs = NULL, *outdir = NULL;
  int64_t batch = 0;
  cli_dims dims = {0};
  double momentum = 0;
  bool build = true, verify = false;
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
    } else if (strcmp(a, "--no-build") == 0) {
      build = false;
    } else if (strcmp(a, "--verify") == 0) {
      verify = true;
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
  if (!devices)
    return cli_usage_error("compile", "no device array given (--devices SPEC)");
  ap_devices devs;
  ap_diag dd = {0};
  if (ap_devices_parse(devices, &devs, &dd) != AP_OK)
    return cli_fail(&dd);
  ap_strategy strat;
  if (!ap_strategy_parse(strategy, &strat))
    return cli_usage_error("compile", "--strategy must be dp, owt, hypar, accpar or exhaustive, got '%s'",
                           strategy);
  if (strcmp(mode, "infer") != 0 && strcmp(mode, "train") != 0)
    return cli_usage_error("compile", "--mode must be infer or train, got '%s'", mode);
  if (strcmp(backend, "c") != 0)
    return cli_usage_error("compile", "--backend %s: only the c backend exists so far", backend);

  ap_diag d = {0};
  ap_graph *g = NULL;
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
      ap_check_dims_bound(g, &d) != AP_OK ||
      ap_run_pipeline(g, NULL, &d) != AP_OK ||
      (devs.n_devices > 1 && ap_partition(g, &popts, &d) != AP_OK) ||
      ap_codegen_c(g, &opts, &d) != AP_OK) {
    rc = cli_fail(&d);
  } else if (build) {
    char *root = source_root();
    char exe[PATH_MAX], rt_lib[PATH_MAX + 64], rt_inc[PATH_MAX], kdir[PATH_MAX];
    char *exe_real = realpath("/proc/self/exe", NULL);
    snprintf(exe, sizeof exe, "%s", exe_real ? exe_real : ".");
    free(exe_real);
    char *slash = strrchr(exe, '/');
    if (slash)
      *slash = 0; /* BUILD/tools */
    char fallback[PATH_MAX + 64];
    snprintf(fallback, sizeof fallback, "%s/../runtime/libaccpar_rt.a", exe);
    ap_build_opts b = {.outdir = outdir};
    b.rt_lib = locate("ACCPAR_RT_LIB", ACCPAR_RT_LIB, rt_lib, sizeof rt_lib, fallback);
    snprintf(fallback, sizeof fallback, "%s/runtime", root ? root : ".");
    b.rt_include = locate("ACCPAR_RT_INCLUDE", ACCPAR_RT_INCLUDE_DIR, rt_inc, sizeof rt_inc,
                          fallback);
    snprintf(fallback, sizeof fallback, "%s/codegen/kernels", root ? root : ".");
    b.kernels_dir = locate("ACCPAR_KERNELS_DIR", ACCPAR_KERNELS_DIR, kdir, sizeof kdir, fallback);
    b.extra_libs = ACCPAR_RT_LINK_FLAGS;
    b.n_devices = devs.n_devices;
    if (ap_codegen_build(&b, &d) != AP_OK ||
        (verify && cli_verify(argc, argv, g, model, outdir, devs.n_devices, opts.train,
                              &d) != AP_OK)) {
      char exe_path[PATH_MAX + 16];
      snprintf(exe_path, sizeof exe_path, "%s/model", outdir);
      if (verify)
        remove(exe_path);
      rc = cli_fail(&d);
    }
    free(root);
  }
  ap_graph_free(g);
  return rc;
}
