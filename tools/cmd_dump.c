/* accparc dump MODEL.onnx [--devices SPEC [--strategy S]] [--batch N]
 *                         [--dim NAME=V]... [--inputs DIR] [--format text|json]
 *                         [--dump-after PASS]
 * Loads a model, binds what the options bind, runs the pipeline and prints
 * the IR. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accpar/plan.h"
#include "codegen/codegen.h"
#include "tools/commands.h"

static const char usage_text[] =
    "usage: accparc dump MODEL.onnx [--devices SPEC [--strategy S]] [--batch N]\n"
    "                               [--inputs DIR] [--format text|json] [--dump-after PASS]\n"
    "  --devices SPEC   plan for this array (kind:count,...) and show each layer's types\n"
    "  --strategy S     dp, owt, hypar, accpar (default) or exhaustive\n"
    "  --batch N        bind the batch dimension (dim 0 of the first fed input)\n"
    "  --dim NAME=V     bind the symbolic input dimension NAME (repeatable)\n"
    "  --inputs DIR     bind graph inputs to DIR/input_N.pb as constants; with --devices\n"
    "                   as compile --inputs does (every fed input's dims, as constants\n"
    "                   only the inputs that fix shapes), so the plan is compile's\n"
    "  --format F       text (default) or json\n"
    "  --dump-after P   also print the IR after pass P (control, recurrent, verify, fold, shapes, unfuse, check)\n";

typedef struct dump_job {
  ap_graph *g;
  bool json;
  const char *after_text; /* what --dump-after printed, shown before the final IR */
  size_t after_len;
} dump_job;

static ap_status emit(void *ctx, FILE *out) {
  dump_job *job = ctx;
  if (job->after_len)
    fwrite(job->after_text, 1, job->after_len, out);
  return job->json ? ap_dump_json(job->g, out) : ap_dump_text(job->g, out);
}

int cmd_dump(int argc, char **argv) {
  const char *model = NULL, *inputs = NULL, *format = "text", *dump_after = NULL;
  const char *devices = NULL, *strategy_name = NULL;
  int64_t batch = 0;
  bool batch_given = false;
  cli_dims dims = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    bool has_value = i + 1 < argc;
    if (strcmp(a, "--batch") == 0 && has_value) {
      if (cli_parse_int64("dump", a, argv[++i], &batch))
        return 2;
      batch_given = true;
    } else if (strcmp(a, "--dim") == 0 && has_value) {
      if (cli_parse_dim("dump", argv[++i], &dims))
        return 2;
    } else if (strcmp(a, "--devices") == 0 && has_value) {
      devices = argv[++i];
    } else if (strcmp(a, "--strategy") == 0 && has_value) {
      strategy_name = argv[++i];
    } else if (strcmp(a, "--inputs") == 0 && has_value) {
      inputs = argv[++i];
    } else if (strcmp(a, "--format") == 0 && has_value) {
      format = argv[++i];
    } else if (strcmp(a, "--dump-after") == 0 && has_value) {
      dump_after = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("dump", "unknown option or missing value: %s\n%s", a, usage_text);
    } else if (!model) {
      model = a;
    } else {
      return cli_usage_error("dump", "more than one model given: %s\n%s", a, usage_text);
    }
  }
  if (!model)
    return cli_usage_error("dump", "no model given\n%s", usage_text);
  if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
    return cli_usage_error("dump", "--format must be text or json, got '%s'", format);
  ap_strategy strategy = AP_STRATEGY_ACCPAR;
  if (strategy_name && !devices)
    return cli_usage_error("dump", "--strategy needs --devices");
  if (strategy_name && !ap_strategy_parse(strategy_name, &strategy))
    return cli_usage_error("dump",
                           "--strategy must be dp, owt, hypar, accpar or exhaustive, got '%s'",
                           strategy_name);
  ap_diag d = {0};
  ap_devices array;
  if (devices && ap_devices_parse(devices, &array, &d) != AP_OK)
    return cli_fail(&d);
  ap_plan_opts plan = {.devices = &array, .strategy = strategy};

  ap_graph *g = NULL;
  if (ap_load_onnx(model, &g, &d) != AP_OK)
    return cli_fail(&d);
  int rc = 0;
  /* Intermediate dumps are held back with the rest, so a failing run prints
   * only its error. */
  char *after_text = NULL;
  size_t after_len = 0;
  FILE *after = dump_after ? open_memstream(&after_text, &after_len) : NULL;
  ap_pipeline_opts opts = {.dump_after = dump_after, .dump_to = after};
  if (dump_after && !after) {
    rc = 1;
    fprintf(stderr, "accparc: error: out of memory\n");
  } else if ((batch_given && ap_bind_batch(g, batch, &d) != AP_OK) ||
             cli_bind_dims(g, &dims, &d) != AP_OK ||
             (inputs && (devices ? cg_bind_shape_inputs(g, inputs, &d)
                                 : ap_bind_inputs_dir(g, inputs, &d)) != AP_OK) ||
             (devices && ap_check_input_dims(g, &d) != AP_OK) ||
             ap_run_pipeline(g, &opts, &d) != AP_OK ||
             (devices && ap_partition(g, &plan, &d) != AP_OK)) {
    rc = cli_fail(&d);
  } else {
    if (after)
      fflush(after);
    dump_job job = {g, strcmp(format, "json") == 0, after_text, after_len};
    rc = cli_emit(stdout, emit, &job, &d);
  }
  if (after)
    fclose(after);
  free(after_text);
  ap_graph_free(g);
  return rc;
}
