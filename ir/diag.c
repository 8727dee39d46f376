/* The two failure channels: ap_error for bad input (one line, naming file,
 * node and operator), ap_die for broken invariants. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

ap_status ap_error(ap_diag *d, ap_status s, const char *file, const char *node,
                   const char *op, const char *fmt, ...) {
  if (!d || d->status != AP_OK)
    return s;
  d->status = s;
  size_t len = 0, cap = sizeof d->message;
  int n = snprintf(d->message, cap, "%s: ", file ? file : "<input>");
  len = n > 0 ? (size_t)n : 0;
  if (node && len < cap) {
    n = snprintf(d->message + len, cap - len, "node '%s' (%s): ", node, op ? op : "?");
    len += n > 0 ? (size_t)n : 0;
  } else if (op && len < cap) {
    n = snprintf(d->message + len, cap - len, "%s: ", op);
    len += n > 0 ? (size_t)n : 0;
  }
  if (len < cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->message + len, cap - len, fmt, ap);
    va_end(ap);
  }
  /* One line, whatever the model's names contain. */
  for (char *p = d->message; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  return s;
}

ap_status ap_refuse(const ap_graph *g, ap_diag *d, int ni, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ap_error(d, AP_ERR_UNSUPPORTED, g->path, g->nodes[ni].name, g->nodes[ni].op_type, "%s",
                  msg);
}

_Noreturn void ap_die_at(const char *file, int line, const char *fmt, ...) {
  fprintf(stderr, "accpar: internal error at %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

const char *ap_status_name(ap_status s) {
  switch (s) {
  case AP_OK: return "ok";
  case AP_ERR_IO: return "io";
  case AP_ERR_PARSE: return "parse";
  case AP_ERR_UNSUPPORTED: return "unsupported";
  case AP_ERR_INVALID: return "invalid";
  case AP_ERR_NOMEM: return "out of memory";
  case AP_ERR_USAGE: return "usage";
  case AP_ERR_NO_FIT: return "does not fit";
  }
  return "?";
}

const char *ap_version(void) { return ACCPAR_VERSION_STRING; }
