/* Helpers shared by the subcommands: uniform error lines and all-or-nothing
 * output. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_parse_dim(const char *cmd, const char *text, cli_dims *dims) {
  const char *eq = strchr(text, '=');
  if (!eq || eq == text || (size_t)(eq - text) >= CLI_DIM_NAME_MAX)
    return cli_usage_error(cmd, "--dim expects NAME=VALUE, got '%s'", text);
  if (dims->n == CLI_MAX_DIMS)
    return cli_usage_error(cmd, "at most %d --dim options are allowed", CLI_MAX_DIMS);
  memcpy(dims->name[dims->n], text, (size_t)(eq - text));
  dims->name[dims->n][eq - text] = '\0';
  int64_t v;
  if (cli_parse_int64(cmd, "--dim", eq + 1, &v))
    return 2;
  if (v < 1)
    return cli_usage_error(cmd, "--dim %s: the value must be at least 1, got %lld",
                           dims->name[dims->n], (long long)v);
  dims->value[dims->n++] = v;
  return 0;
}

ap_status cli_bind_dims(ap_graph *g, const cli_dims *dims, ap_diag *d) {
  for (int i = 0; i < dims->n; i++) {
    ap_status s = ap_bind_dim(g, dims->name[i], dims->value[i], d);
    if (s != AP_OK)
      return s;
  }
  return AP_OK;
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
