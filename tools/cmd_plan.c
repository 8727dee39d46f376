/* accparc plan    MODEL.onnx --devices SPEC [--strategy S] [--batch N]
 *                            [--dim NAME=V]... [--inputs DIR]
 *                            [--cost time|paper] [--mem-limit BYTES]
 *                            [--format table|json|dot|html] [--no-boxes]
 * accparc compare MODEL.onnx --devices SPEC [--batch N] [--dim NAME=V]...
 *                            [--inputs DIR] [--mem-limit BYTES] [--format table|json]
 * accparc export  MODEL.onnx --devices SPEC [plan options] [--no-boxes] -o ANNOTATED.onnx
 * Load, bind, run the pipeline, partition, print (or write). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accpar/plan.h"
#include "codegen/codegen.h"
#include "ir/ir.h"
#include "tools/commands.h"

static const char plan_usage[] =
    "usage: accparc plan MODEL.onnx --devices SPEC|--plan FILE.json [--strategy S] [--batch N]\n"
    "                               [--dim NAME=V] [--inputs DIR] [--cost time|paper] [--mem-limit BYTES]\n"
    "                               [--format table|json|dot|html] [--no-boxes]\n"
    "  --devices SPEC   kind:count[,kind:count...]; kinds: tpuv2 tpuv3 eyeriss cpu or a device file\n"
    "  --plan FILE      the plan of FILE.json (what --format json prints), or of a model\n"
    "                   'accparc export' wrote, instead of a search: its devices, strategy\n"
    "                   and every layer's types, checked\n"
    "                   (--devices, if given, must be the file's)\n"
    "  --strategy S     dp, owt, hypar, accpar (default) or exhaustive\n"
    "  --batch N        bind the batch dimension\n"
    "  --dim NAME=V     bind the symbolic input dimension NAME (repeatable)\n"
    "  --inputs DIR     bind every dim of the inputs DIR/input_N.pb feeds, and as\n"
    "                   constants the inputs that fix shapes (as compile --inputs)\n"
    "  --cost C         time (default): predicted seconds; paper: elements at ratio 1/2\n"
    "  --mem-limit B    bytes per device (default: each device's capacity)\n"
    "  --format F       table (default), json, dot (a Graphviz graph: each layer's type\n"
    "                   per level, each edge's bytes) or html (one self-contained page:\n"
    "                   the table, each device's boxes, bytes and memory as bar charts)\n"
    "  --no-boxes       json without each node's per-device boxes: the same plan for\n"
    "                   --plan (the boxes follow from the types), a small file on many devices\n";

static const char compare_usage[] =
    "usage: accparc compare MODEL.onnx --devices SPEC [--batch N] [--dim NAME=V]\n"
    "                                  [--inputs DIR] [--mem-limit BYTES] [--format table|json]\n"
    "  plans with dp, owt, hypar and accpar and prints them side by side; a strategy\n"
    "  with no plan that fits the devices' memory is shown as not fitting, and why\n"
    "  --devices SPEC   kind:count[,kind:count...]; kinds: tpuv2 tpuv3 eyeriss cpu or a device file\n"
    "  --batch N        bind the batch dimension\n"
    "  --dim NAME=V     bind the symbolic input dimension NAME (repeatable)\n"
    "  --inputs DIR     bind the inputs' dims from DIR/input_N.pb (as plan --inputs)\n"
    "  --mem-limit B    bytes per device (default: each device's capacity)\n"
    "  --format F       table (default) or json\n";

static const char export_usage[] =
    "usage: accparc export MODEL.onnx --devices SPEC|--plan FILE.json [--strategy S] [--batch N]\n"
    "                                 [--cost time|paper] [--mem-limit BYTES] [--no-boxes]\n"
    "                                 -o ANNOTATED.onnx\n"
    "  writes the model as planned (bound and folded) with the plan's JSON, as\n"
    "  'accparc plan --format json' prints it, in metadata_props under 'accpar.plan',\n"
    "  and in ONNX's own form (IR version 11: ModelProto.configuration and every\n"
    "  node's device_configurations) wherever its shares are even\n"
    "  --devices, --plan, --strategy, --batch, --dim, --inputs, --cost, --mem-limit\n"
    "                   as for 'accparc plan'\n"
    "  --no-boxes       the plan's JSON without each node's per-device boxes (as plan)\n"
    "  -o FILE          the ONNX file to write (nothing is written on failure)\n";

typedef struct plan_args {
  const char *model, *devices, *format;
  const char *plan_file;  /* --plan: a plan read back instead of searched */
  const char *search_opt; /* the first of --strategy, --cost, --mem-limit given */
  const char *output; /* export's -o */
  const char *inputs; /* --inputs: the folder of input_N.pb binding the inputs */
  bool no_boxes;      /* --no-boxes: the JSON without each node's boxes */
  ap_plan_opts opts;
  int64_t batch;
  cli_dims dims;
} plan_args;

/* The options beyond the model's binding and --format a command takes. */
enum { WITH_SEARCH = 1, WITH_MEM_LIMIT = 2, WITH_OUTPUT = 4, WITH_NO_BOXES = 8 };

static int parse(const char *cmd, const char *usage, unsigned with, int argc, char **argv,
                 plan_args *a) {
  bool plan_options = with & WITH_SEARCH, wants_output = with & WITH_OUTPUT;
  memset(a, 0, sizeof *a);
  a->format = "table";
  a->opts.strategy = AP_STRATEGY_ACCPAR;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
      fputs(usage, stdout);
      return -1;
    }
    if (strcmp(s, "--devices") == 0 && has_value) {
      a->devices = argv[++i];
    } else if (strcmp(s, "--batch") == 0 && has_value) {
      if (cli_parse_int64(cmd, s, argv[++i], &a->batch))
        return 2;
      if (a->batch < 1)
        return cli_usage_error(cmd, "--batch must be at least 1");
    } else if (strcmp(s, "--dim") == 0 && has_value) {
      if (cli_parse_dim(cmd, argv[++i], &a->dims))
        return 2;
    } else if (strcmp(s, "--inputs") == 0 && has_value) {
      a->inputs = argv[++i];
    } else if (strcmp(s, "--format") == 0 && has_value) {
      a->format = argv[++i];
    } else if (plan_options && strcmp(s, "--plan") == 0 && has_value) {
      a->plan_file = argv[++i];
    } else if (plan_options && strcmp(s, "--strategy") == 0 && has_value) {
      a->search_opt = s;
      if (!ap_strategy_parse(argv[++i], &a->opts.strategy))
        return cli_usage_error(cmd, "--strategy must be dp, owt, hypar, accpar or exhaustive, "
                                    "got '%s'", argv[i]);
    } else if (plan_options && strcmp(s, "--cost") == 0 && has_value) {
      a->search_opt = a->search_opt ? a->search_opt : s;
      const char *c = argv[++i];
      if (strcmp(c, "time") == 0)
        a->opts.cost = AP_COST_TIME;
      else if (strcmp(c, "paper") == 0)
        a->opts.cost = AP_COST_PAPER;
      else
        return cli_usage_error(cmd, "--cost must be time or paper, got '%s'", c);
    } else if ((with & WITH_MEM_LIMIT) && strcmp(s, "--mem-limit") == 0 && has_value) {
      a->search_opt = a->search_opt ? a->search_opt : s;
      char *end;
      errno = 0;
      double b = strtod(argv[++i], &end);
      if (errno || end == argv[i] || *end || !(b > 0) || isinf(b))
        return cli_usage_error(cmd, "--mem-limit expects a positive number of bytes, got '%s'",
                               argv[i]);
      a->opts.mem_limit_bytes = b;
    } else if ((with & WITH_NO_BOXES) && strcmp(s, "--no-boxes") == 0) {
      a->no_boxes = true;
    } else if (wants_output && strcmp(s, "-o") == 0 && has_value) {
      a->output = argv[++i];
    } else if (s[0] == '-' && s[1]) {
      return cli_usage_error(cmd, "unknown option or missing value: %s (try --help)", s);
    } else if (!a->model) {
      a->model = s;
    } else {
      return cli_usage_error(cmd, "more than one model given: %s", s);
    }
  }
  if (!a->model)
    return cli_usage_error(cmd, "no model given (try --help)");
  if (!a->devices && !a->plan_file)
    return cli_usage_error(cmd, "--devices is required (try --help)");
  if (a->plan_file && a->search_opt)
    return cli_usage_error(cmd, "%s: --plan gives the plan, no search is made", a->search_opt);
  if (wants_output && !a->output)
    return cli_usage_error(cmd, "-o ANNOTATED.onnx is required (try --help)");
  bool pictures = strcmp(cmd, "plan") == 0; /* dot and html draw one plan */
  if (strcmp(a->format, "table") != 0 && strcmp(a->format, "json") != 0 &&
      !(pictures && (strcmp(a->format, "dot") == 0 || strcmp(a->format, "html") == 0)))
    return cli_usage_error(cmd, "--format must be table%s or json, got '%s'",
                           pictures ? ", dot, html" : "", a->format);
  if (a->no_boxes && !wants_output && strcmp(a->format, "json") != 0)
    return cli_usage_error(cmd, "--no-boxes goes with --format json");
  return 0;
}

/* Loads the model and runs the pipeline; *out is freed by the caller. */
static ap_status load(const plan_args *a, ap_graph **out, ap_diag *d) {
  ap_graph *g = NULL;
  ap_status st = ap_load_onnx(a->model, &g, d);
  if (st == AP_OK && a->batch)
    st = ap_bind_batch(g, a->batch, d);
  if (st == AP_OK)
    st = cli_bind_dims(g, &a->dims, d);
  /* The binding compile makes, so that a plan is the one compile builds. */
  if (st == AP_OK && a->inputs)
    st = cg_bind_shape_inputs(g, a->inputs, d);
  if (st == AP_OK)
    st = ap_check_input_dims(g, d);
  if (st == AP_OK)
    st = ap_run_pipeline(g, &(ap_pipeline_opts){0}, d);
  if (st != AP_OK) {
    ap_graph_free(g);
    return st;
  }
  *out = g;
  return AP_OK;
}

typedef struct plan_job {
  ap_graph *g;
  const char *format; /* table, json, dot or html */
  bool no_boxes;      /* json without each node's boxes */
} plan_job;

static ap_status emit_plan(void *ctx, FILE *out) {
  plan_job *job = ctx;
  if (strcmp(job->format, "json") == 0)
    return job->no_boxes ? ap_plan_print_json_without_boxes(job->g, out)
                         : ap_plan_print_json(job->g, out);
  if (strcmp(job->format, "dot") == 0)
    return ap_plan_print_dot(job->g, out);
  if (strcmp(job->format, "html") == 0)
    return ap_plan_print_html(job->g, out);
  return ap_plan_print_table(job->g, out);
}

/* What plan and export share: parse, load, bind, run the pipeline and
 * partition. Returns the exit status to use now, or -1 with *g planned. */
static int plan_model(const char *cmd, const char *usage, bool wants_output, int argc,
                      char **argv, plan_args *a, ap_devices *dv, ap_graph **g, ap_diag *d) {
  int rc = parse(cmd, usage,
                 WITH_SEARCH | WITH_MEM_LIMIT | WITH_NO_BOXES | (wants_output ? WITH_OUTPUT : 0),
                 argc, argv, a);
  if (rc)
    return rc < 0 ? 0 : rc;
  if (a->devices && ap_devices_parse(a->devices, dv, d) != AP_OK)
    return cli_fail(d);
  a->opts.devices = dv;
  if (load(a, g, d) != AP_OK)
    return cli_fail(d);
  ap_status st = a->plan_file ? cli_load_plan(*g, a->plan_file, a->devices ? dv : NULL, dv, d)
                              : ap_partition(*g, &a->opts, d);
  if (st != AP_OK) {
    ap_graph_free(*g);
    return cli_fail(d);
  }
  return -1;
}

int cmd_plan(int argc, char **argv) {
  plan_args a;
  ap_devices dv;
  ap_diag d = {0};
  ap_graph *g = NULL;
  int rc = plan_model("plan", plan_usage, false, argc, argv, &a, &dv, &g, &d);
  if (rc >= 0)
    return rc;
  rc = cli_emit(stdout, emit_plan, &(plan_job){g, a.format, a.no_boxes}, &d);
  ap_graph_free(g);
  return rc;
}

/* ---- compare ---- */

static const ap_strategy compared[] = {AP_STRATEGY_DP, AP_STRATEGY_OWT, AP_STRATEGY_HYPAR,
                                       AP_STRATEGY_ACCPAR};
enum { N_COMPARED = sizeof compared / sizeof compared[0] };

typedef struct compare_job {
  const plan_args *a;
  const ap_devices *dv;
  int64_t batch;  /* the batch planned for: --batch, or the model's own */
  ap_plan_summary s[N_COMPARED];
  /* A strategy with no plan that fits: why (the planner's message from
   * after "no S plan fits: "), else "". */
  char no_fit[N_COMPARED][AP_DIAG_MAX];
  int levels;     /* of the array, from a plan that fits */
  bool json;
} compare_job;

/* dp's step time over another's: 1 when neither takes any time (a graph
 * without layers or transfers), infinite when only dp does; NaN (printed
 * as not known) when dp has no plan that fits. */
static double speedup(const compare_job *job, double step_s) {
  if (job->no_fit[0][0])
    return NAN;
  double dp_s = job->s[0].step_time_s;
  if (step_s > 0)
    return dp_s / step_s;
  return dp_s > 0 ? INFINITY : 1;
}

static ap_status emit_compare(void *ctx, FILE *out) {
  compare_job *job = ctx;
  if (job->json) {
    fprintf(out, "{\n  \"model\": ");
    ap_json_string(out, job->a->model, strlen(job->a->model));
    fprintf(out, ",\n  \"devices\": ");
    ap_json_string(out, job->a->devices, strlen(job->a->devices));
    fprintf(out, ",\n  \"batch\": %lld,\n  \"strategies\": [", (long long)job->batch);
    for (int i = 0; i < N_COMPARED; i++) {
      const ap_plan_summary *s = &job->s[i];
      fprintf(out, "%s\n    {\"strategy\": \"%s\", \"fits\": %s", i ? "," : "",
              ap_strategy_name(compared[i]), job->no_fit[i][0] ? "false" : "true");
      if (job->no_fit[i][0]) {
        fprintf(out, ", \"why\": ");
        ap_json_string(out, job->no_fit[i], strlen(job->no_fit[i]));
        fprintf(out, "}");
        continue;
      }
      double up = speedup(job, s->step_time_s);
      /* JSON has no infinity: null, as for a speedup over a dp that does
       * not fit. */
      char up_s[32] = "null";
      if (isfinite(up))
        snprintf(up_s, sizeof up_s, "%.6g", up);
      fprintf(out,
              ", \"step_time_s\": %.9g, \"speedup_over_dp\": "
              "%s, \"comm_bytes\": %.9g, \"paper_cost\": %.9g, \"max_mem_bytes\": %.9g, "
              "\"optimality\": ",
              s->step_time_s, up_s, s->comm_bytes, s->paper_cost, s->max_mem_bytes);
      ap_json_string(out, s->optimality, strlen(s->optimality));
      fprintf(out, "}");
    }
    fprintf(out, "\n  ]\n}\n");
  } else {
    fprintf(out, "compare: %s  devices %s  batch %lld (%d devices, %d levels)\n",
            job->a->model, job->a->devices, (long long)job->batch, job->dv->n_devices,
            job->levels);
    fprintf(out, "%-8s  %14s  %10s  %14s  %14s  %s\n", "strategy", "step_time_s", "speedup",
            "comm_bytes", "max_mem_bytes", "optimality");
    for (int i = 0; i < N_COMPARED; i++) {
      const ap_plan_summary *s = &job->s[i];
      if (job->no_fit[i][0]) {
        fprintf(out, "%-8s  does not fit: %s\n", ap_strategy_name(compared[i]), job->no_fit[i]);
        continue;
      }
      double up = speedup(job, s->step_time_s);
      char up_s[32] = "-";
      if (!isnan(up))
        snprintf(up_s, sizeof up_s, "%.2fx", up);
      fprintf(out, "%-8s  %14.6e  %10s  %14.6e  %14.6e  %s\n", ap_strategy_name(s->strategy),
              s->step_time_s, up_s, s->comm_bytes, s->max_mem_bytes, s->optimality);
    }
  }
  return ferror(out) ? AP_ERR_IO : AP_OK;
}

/* The batch a model is planned with when --batch is not given: dim 0 of
 * its first fed input, as ap_bind_batch would bind (-1 if it has none). */
static int64_t model_batch(const ap_graph *g) {
  for (int i = 0; i < ap_graph_num_inputs(g); i++) {
    int v = ap_graph_input(g, i);
    if (!ap_value_is_constant(g, v) && ap_value_rank(g, v) >= 1)
      return ap_value_dim(g, v, 0);
  }
  return -1;
}

int cmd_compare(int argc, char **argv) {
  plan_args a;
  int rc = parse("compare", compare_usage, WITH_MEM_LIMIT, argc, argv, &a);
  if (rc)
    return rc < 0 ? 0 : rc;
  ap_diag d = {0};
  ap_devices dv;
  if (ap_devices_parse(a.devices, &dv, &d) != AP_OK)
    return cli_fail(&d);
  ap_graph *g = NULL;
  if (load(&a, &g, &d) != AP_OK)
    return cli_fail(&d);
  compare_job job = {.a = &a, .dv = &dv, .batch = a.batch ? a.batch : model_batch(g),
                     .json = strcmp(a.format, "json") == 0};
  /* A strategy none of whose plans fits is a result to show beside the
   * others (on 1024 CPUs GPT-2 small fits with dp and accpar, not with owt
   * or hypar); any other error, or none fitting, ends the command. */
  int fitting = 0;
  ap_diag last = {0};
  for (int i = 0; i < N_COMPARED && rc == 0; i++) {
    ap_plan_opts o = {.devices = &dv, .strategy = compared[i],
                      .mem_limit_bytes = a.opts.mem_limit_bytes};
    d = (ap_diag){0};
    ap_status st = ap_partition(g, &o, &d);
    if (st == AP_ERR_NO_FIT) {
      size_t n = strlen(a.model);
      const char *why = strncmp(d.message, a.model, n) == 0 && strncmp(d.message + n, ": ", 2) == 0
                            ? d.message + n + 2
                            : d.message;
      const char *fits = strstr(why, " plan fits: "); /* "no owt plan fits: " said above */
      snprintf(job.no_fit[i], sizeof job.no_fit[i], "%s", fits ? fits + 12 : why);
      last = d;
    } else if (st != AP_OK) {
      rc = cli_fail(&d);
    } else {
      ap_plan_get(g, &job.s[i]);
      job.levels = job.s[i].n_levels;
      fitting++;
    }
  }
  if (rc == 0 && fitting == 0)
    rc = cli_fail(&last);
  if (rc == 0)
    rc = cli_emit(stdout, emit_compare, &job, &d);
  ap_graph_free(g);
  return rc;
}

/* ---- export ---- */

int cmd_export(int argc, char **argv) {
  plan_args a;
  ap_devices dv;
  ap_diag d = {0};
  ap_graph *g = NULL;
  int rc = plan_model("export", export_usage, true, argc, argv, &a, &dv, &g, &d);
  if (rc >= 0)
    return rc;
  rc = 0;
  char *json = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&json, &len);
  ap_status st = !mem       ? AP_ERR_NOMEM
                 : a.no_boxes ? ap_plan_print_json_without_boxes(g, mem)
                              : ap_plan_print_json(g, mem);
  if (mem)
    fclose(mem);
  /* protobuf refuses a model of 2 GiB or more, and the plan's JSON goes
   * into it: refused here, before it is copied (every device's boxes of
   * ResNet-152 on 131,072 devices are 2.7 GB of JSON, whose copies into
   * the model ran out of 24 GB). */
  if (st == AP_OK && len >= (size_t)INT32_MAX)
    st = ap_error(&d, AP_ERR_UNSUPPORTED, a.output, NULL, NULL,
                  "the plan's JSON takes %zu bytes, beyond protobuf's 2 GiB limit for the "
                  "model%s",
                  len, a.no_boxes ? "" : "; --no-boxes leaves out its per-device boxes");
  if (st == AP_OK)
    st = ap_graph_set_metadata(g, "accpar.plan", json);
  if (st == AP_OK)
    st = ap_graph_set_metadata(g, "accpar.version", ap_version());
  /* The same plan in ONNX's own form, for what it can express. */
  int n_skipped = 0;
  const char **skipped = NULL;
  if (st == AP_OK)
    st = ap_plan_annotate_sharding(g, &n_skipped, &skipped, &d);
  char *skipped_list = NULL;
  if (st == AP_OK && n_skipped > 0) {
    size_t list_len = 0;
    FILE *lm = open_memstream(&skipped_list, &list_len);
    if (!lm)
      st = AP_ERR_NOMEM;
    for (int i = 0; lm && i < n_skipped; i++)
      fprintf(lm, "%s%s", i ? "," : "", skipped[i]);
    if (lm)
      fclose(lm);
    if (st == AP_OK)
      st = ap_graph_set_metadata(g, "accpar.sharding_unexpressed", skipped_list);
  }
  /* The writer goes through a temporary file and a rename, so a failure
   * leaves no half-written model behind. */
  if (st == AP_OK) {
    st = ap_write_onnx(g, a.output, &d);
    /* A plan's JSON under 2 GiB can still make the model too large. */
    if (st == AP_ERR_UNSUPPORTED && !a.no_boxes && len >= (size_t)1 << 30) {
      size_t at = strlen(d.message);
      snprintf(d.message + at, sizeof d.message - at,
               "; the plan's JSON takes %zu bytes of it, and --no-boxes leaves out its "
               "per-device boxes",
               len);
    }
  }
  if (st != AP_OK) {
    if (d.status == AP_OK)
      d.status = st;
    rc = cli_fail(&d);
  } else if (n_skipped > 0) {
    fprintf(stderr,
            "%s: %d of %d nodes have uneven shares ONNX's sharding annotations cannot express; "
            "metadata_props 'accpar.sharding_unexpressed' lists them, 'accpar.plan' has their "
            "plan\n",
            a.output, n_skipped, ap_graph_num_nodes(g));
  }
  free(skipped_list);
  free(json);
  ap_graph_free(g);
  return rc;
}
