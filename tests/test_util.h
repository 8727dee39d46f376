/* Helpers shared by the end-to-end suites that compile and run programs
 * (test_codegen_node, test_codegen_partitioned, test_train_partitioned):
 * bounded formatting, running shell commands a few at a time, and comparing
 * a program's output_N.pb files with expected ones. Static functions in a
 * header: each suite is one translation unit. The includer defines
 * _GNU_SOURCE (vasprintf) or _POSIX_C_SOURCE 200809L before any header and
 * includes Criterion first. */
#ifndef ACCPAR_TEST_UTIL_H
#define ACCPAR_TEST_UTIL_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"

/* The backends the end-to-end suites drive with the same test data: c
 * always, llvm when accparc was built with it (ACCPAR_HAVE_LLVM, a public
 * definition of the accpar library). A sanitized build runs the llvm
 * sweeps on every LLVM_SUBSET-th case: a representative subset, since every
 * case is run with the c backend there too. */
#ifdef ACCPAR_HAVE_LLVM
#define LLVM_BUILT true
#else
#define LLVM_BUILT false
#endif
#if defined(__SANITIZE_ADDRESS__)
#define LLVM_SUBSET 8
#else
#define LLVM_SUBSET 1
#endif

/* compile's option selecting backend ("c" or "llvm"), with a trailing
 * space. */
__attribute__((unused)) static const char *backend_option(const char *backend) {
  return strcmp(backend, "llvm") == 0 ? "--backend llvm " : "";
}

/* Whether case i of a sweep runs with backend. */
__attribute__((unused)) static bool backend_runs(const char *backend, int i) {
  return strcmp(backend, "llvm") != 0 || i % LLVM_SUBSET == 0;
}

/* The suites' programs are small or many: both backends build them
 * quickly, C with -O1, LLVM with the always-inliner and a per-function
 * clean-up (ACCPAR_LLVM_PASSES; LLVM's default<O1> inlines and optimises
 * the kernel library at every call and takes ten times as long). The
 * default<O3> pipeline is checked by the node tests and mnist-8. */
#define LLVM_FAST_PASSES "always-inline,function(sroa,early-cse,instcombine,simplifycfg)"
__attribute__((unused)) static void fast_builds(void) {
  setenv("CFLAGS", "-O1", 1);
  setenv("ACCPAR_LLVM_PASSES", LLVM_FAST_PASSES, 1);
}

/* snprintf that fails the test instead of truncating. */
__attribute__((format(printf, 3, 4), unused)) static void fmt(char *buf, size_t cap,
                                                              const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int w = vsnprintf(buf, cap, f, ap);
  va_end(ap);
  cr_assert(w >= 0 && (size_t)w < cap, "a path or message is longer than %zu bytes", cap);
}

__attribute__((unused)) static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

__attribute__((unused)) static bool ran(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Shell commands, jobs at a time; status[i] gets each one's wait status. */
__attribute__((unused)) static void run_all(char **cmds, int n, int jobs, int *status) {
  int next = 0, running = 0;
  pid_t *pid = calloc((size_t)n + 1, sizeof *pid);
  cr_assert(pid);
  while (next < n || running) {
    while (running < jobs && next < n) {
      pid[next] = fork();
      if (pid[next] == 0) {
        execl("/bin/sh", "sh", "-c", cmds[next], (char *)NULL);
        _exit(127);
      }
      cr_assert_gt(pid[next], 0, "fork failed");
      next++;
      running++;
    }
    int st;
    pid_t done = wait(&st);
    cr_assert_gt(done, 0, "wait failed: %s", strerror(errno));
    for (int i = 0; i < n; i++)
      if (pid[i] == done)
        status[i] = st;
    running--;
  }
  free(pid);
}

/* One produced .pb against the expected one: floats within atol + rtol*|want|
 * (NaN equals NaN), everything else bit for bit; a line into why otherwise. */
__attribute__((unused)) static bool same_tensor(const char *got_path, const char *want_path,
                                                double rtol, double atol, char *why, size_t cap) {
  ap_arena *a = ap_arena_new();
  ap_diag d = {0};
  ap_tensor got, want;
  bool ok = false;
  cr_assert(a);
  if (ap_read_tensor_pb(want_path, a, &want, NULL, &d) != AP_OK ||
      ap_read_tensor_pb(got_path, a, &got, NULL, &d) != AP_OK) {
    fmt(why, cap, "%s", d.message);
  } else if (got.dtype != want.dtype || got.rank != want.rank ||
             memcmp(got.dims, want.dims, (size_t)got.rank * sizeof *got.dims) != 0) {
    fmt(why, cap, "%s: %s of rank %d, expected %s of rank %d (or other dims)", got_path,
        ap_dtype_name(got.dtype), got.rank, ap_dtype_name(want.dtype), want.rank);
  } else if (ap_dtype_is_float(want.dtype)) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < want.numel; i++) {
      double g = ap_tensor_get_f64(&got, i), w = ap_tensor_get_f64(&want, i);
      if ((isnan(g) && isnan(w)) || fabs(g - w) <= atol + rtol * fabs(w))
        continue;
      if (first < 0)
        first = i;
      bad++;
    }
    ok = bad == 0;
    if (!ok)
      fmt(why, cap, "%s: %lld of %lld elements differ; first at %lld: %.9g, expected %.9g",
          got_path, (long long)bad, (long long)want.numel, (long long)first,
          ap_tensor_get_f64(&got, first), ap_tensor_get_f64(&want, first));
  } else {
    ok = memcmp(got.data, want.data, (size_t)want.numel * ap_dtype_size(want.dtype)) == 0;
    if (!ok)
      fmt(why, cap, "%s: integer elements differ", got_path);
  }
  ap_arena_free(a);
  return ok;
}

/* Every output_N.pb of want_dir matches got_dir/output_N.pb. */
__attribute__((unused)) static bool outputs_match(const char *want_dir, const char *got_dir,
                                                  double rtol, double atol, char *why,
                                                  size_t cap) {
  for (int n = 0;; n++) {
    char want[4096], got[4096];
    fmt(want, sizeof want, "%s/output_%d.pb", want_dir, n);
    fmt(got, sizeof got, "%s/output_%d.pb", got_dir, n);
    if (!exists(want)) {
      if (n == 0)
        fmt(why, cap, "%s holds no output_0.pb", want_dir);
      return n > 0;
    }
    if (!same_tensor(got, want, rtol, atol, why, cap))
      return false;
  }
}

/* A formatted string in malloc'd memory (the caller frees it). */
__attribute__((format(printf, 1, 2), unused)) static char *xprintf(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(NULL, 0, f, ap);
  va_end(ap);
  cr_assert_geq(n, 0);
  char *s = malloc((size_t)n + 1);
  cr_assert(s);
  va_start(ap, f);
  vsnprintf(s, (size_t)n + 1, f, ap);
  va_end(ap);
  return s;
}

/* The log a job wrote to WORK.log, on one line, for a failure message. */
__attribute__((unused)) static void log_head(const char *work, char *buf, size_t cap) {
  char path[4096];
  fmt(path, sizeof path, "%s.log", work);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f)
    fclose(f);
  for (char *p = buf; *p; p++)
    if (*p == '\n')
      *p = ' ';
}

/* The numbers of the JSON array after "key": in the file at path (a
 * report or a plan's JSON), at most cap of them; -1 when absent. Byte
 * counts below 2^53 are exact as doubles. */
__attribute__((unused)) static int json_array(const char *path, const char *key, double *out, int cap) {
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  static char text[1 << 17];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  char quoted[64];
  fmt(quoted, sizeof quoted, "\"%s\":", key);
  char *p = strstr(text, quoted);
  if (!p || !(p = strchr(p, '[')))
    return -1;
  int n = 0;
  for (p++; *p && *p != ']' && n < cap;) {
    char *end;
    out[n++] = strtod(p, &end);
    if (end == p)
      return -1;
    p = end;
    while (*p == ',' || *p == ' ')
      p++;
  }
  return n;
}

/* bytes_sent equals predicted_bytes on every device of a program's report;
 * *moved gets the bytes of all devices. */
__attribute__((unused)) static bool bytes_as_predicted(const char *report, int ndev,
                                                       double *moved, char *why, size_t cap) {
  enum { MAX_REPORT_DEV = 64 };
  double sent[MAX_REPORT_DEV], predicted[MAX_REPORT_DEV];
  int ns = json_array(report, "bytes_sent", sent, MAX_REPORT_DEV);
  int np = json_array(report, "predicted_bytes", predicted, MAX_REPORT_DEV);
  *moved = 0;
  if (ns != ndev || np != ndev) {
    fmt(why, cap, "%s: %d bytes_sent and %d predicted_bytes entries for %d devices", report, ns,
        np, ndev);
    return false;
  }
  for (int i = 0; i < ndev; i++) {
    *moved += sent[i];
    if (sent[i] != predicted[i]) {
      fmt(why, cap, "%s: device %d sent %.0f bytes, predicted %.0f", report, i, sent[i],
          predicted[i]);
      return false;
    }
  }
  return true;
}

#endif
