/* Helpers shared by the subcommands: uniform error lines and all-or-nothing
 * output. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ir/ir.h"
#include "passes/passes.h"
#include "tools/commands.h"

int cli_fail(const ap_diag *d) {
  fprintf(stderr, "accparc: error: %s\n", d->message[0] ? d->message : ap_status_name(d->status));
  return d->status == AP_ERR_USAGE ? 2 : 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  fprintf(stderr, "accparc %s: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 2;
}

int cli_parse_int64(const char *cmd, const char *flag, const char *text, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end)
    return cli_usage_error(cmd, "%s expects an integer, got '%s'", flag, text);
  *out = v;
  return 0;
}

int cli_emit(FILE *out, ap_status (*fn)(void *ctx, FILE *stream), void *ctx, ap_diag *d) {
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (!mem) {
    fprintf(stderr, "accparc: error: out of memory\n");
    return 1;
  }
  ap_status s = fn(ctx, mem);
  fclose(mem);
  if (s == AP_OK && fwrite(buf, 1, len, out) != len)
    s = AP_ERR_IO;
  free(buf);
  if (s != AP_OK) {
    if (d->status == AP_OK)
      d->status = s;
    return cli_fail(d);
  }
  return fflush(out) == 0 ? 0 : 1;
}

int cli_parse_dim(const char *cmd, const char *text, cli_dims *dims) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text)
    return cli_usage_error(cmd, "--dim expects NAME=VALUE, got '%s'", text);
  if (dims->n == CLI_MAX_DIMS)
    return cli_usage_error(cmd, "at most %d --dim options", CLI_MAX_DIMS);
  int64_t size;
  if (cli_parse_int64(cmd, "--dim", eq + 1, &size))
    return 2;
  if (size < 1)
    return cli_usage_error(cmd, "--dim %s: the size must be at least 1", text);
  if (eq - text >= 256)
    return cli_usage_error(cmd, "--dim: the name is longer than 255 characters");
  dims->name[dims->n] = text;
  dims->name_len[dims->n] = (int)(eq - text);
  dims->size[dims->n++] = size;
  return 0;
}

ap_status cli_bind_dims(ap_graph *g, const cli_dims *dims, ap_diag *d) {
  for (int i = 0; i < dims->n; i++) {
    char name[256];
    snprintf(name, sizeof name, "%.*s", dims->name_len[i], dims->name[i]);
    ap_status s = ap_bind_dim(g, name, dims->size[i], d);
    if (s != AP_OK)
      return s;
  }
  return AP_OK;
}

static double monotonic_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cli_progress_start(cli_progress *p, const char *cmd) {
  p->cmd = cmd;
  p->on = isatty(STDERR_FILENO);
  p->start_s = monotonic_s();
}

void cli_phase(cli_progress *p, const char *fmt, ...) {
  if (!p->on)
    return;
  fprintf(stderr, "accparc %s: [%.2f s] ", p->cmd, monotonic_s() - p->start_s);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static ap_status cli_load_plan_text(ap_graph *g, const char *text, const char *path,
                                    const ap_devices *want, ap_devices *devices, ap_diag *d);

/* The plan a model written by accparc export carries (metadata_props
 * "accpar.plan"), copied; NULL with d filled when it has none. */
static char *exported_plan(const char *path, ap_diag *d) {
  ap_graph *annotated = NULL;
  if (ap_load_onnx(path, &annotated, d) != AP_OK)
    return NULL;
  const char *json = ap_graph_metadata(annotated, "accpar.plan");
  char *copy = json ? strdup(json) : NULL;
  if (!json) {
    snprintf(d->message, sizeof d->message,
             "%s: no plan in its metadata_props (accparc export writes one as 'accpar.plan')",
             path);
    d->status = AP_ERR_INVALID;
  } else if (!copy) {
    snprintf(d->message, sizeof d->message, "%s: out of memory", path);
    d->status = AP_ERR_NOMEM;
  }
  ap_graph_free(annotated);
  return copy;
}

ap_status cli_load_plan(ap_graph *g, const char *path, const ap_devices *want,
                        ap_devices *devices, ap_diag *d) {
  size_t path_len = strlen(path);
  if (path_len > 5 && strcmp(path + path_len - 5, ".onnx") == 0) {
    char *json = exported_plan(path, d);
    if (!json)
      return d->status;
    ap_status st = cli_load_plan_text(g, json, path, want, devices, d);
    free(json);
    return st;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(d->message, sizeof d->message, "%s: cannot open: %s", path, strerror(errno));
    d->status = AP_ERR_IO;
    return d->status;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  int c;
  while (mem && (c = getc(f)) != EOF)
    putc(c, mem);
  bool read_ok = !ferror(f);
  fclose(f);
  if (!mem || fclose(mem) != 0 || !read_ok) {
    free(text);
    snprintf(d->message, sizeof d->message, "%s: cannot read", path);
    d->status = AP_ERR_IO;
    return d->status;
  }
  ap_status st = cli_load_plan_text(g, text, path, want, devices, d);
  free(text);
  return st;
}

static ap_status cli_load_plan_text(ap_graph *g, const char *text, const char *path,
                                    const ap_devices *want, ap_devices *devices, ap_diag *d) {
  ap_devices saved;
  if (want)
    saved = *want;
  ap_status st = ap_partition_from_json(g, text, path, devices, d);
  if (st != AP_OK || !want)
    return st;
  bool same = saved.n_kinds == devices->n_kinds;
  for (int k = 0; same && k < saved.n_kinds; k++)
    same = strcmp(saved.kinds[k].name, devices->kinds[k].name) == 0 &&
           saved.kinds[k].count == devices->kinds[k].count;
  if (!same) {
    snprintf(d->message, sizeof d->message,
             "%s: the plan is for another device array than --devices gives", path);
    d->status = AP_ERR_USAGE;
    return d->status;
  }
  return AP_OK;
}

ap_graph *cli_one_device_plan(const ap_graph *g, const ap_devices *devs) {
  ap_graph *c = ap_graph_clone(g);
  if (!c)
    return NULL;
  ap_diag d = {0};
  ap_plan_opts po = {.devices = devs, .strategy = AP_STRATEGY_ACCPAR};
  if (ap_partition(c, &po, &d) == AP_OK)
    return c;
  ap_graph_free(c);
  return NULL;
}
