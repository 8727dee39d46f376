/* ONNX Runtime as the reference executor of the test suites.
 *
 * tests/ort/run_ort.js runs a model with onnxruntime-node on ONNX test data
 * (INPUT_DIR/input_N.pb -> OUTPUT_DIR/output_N.pb); make_inputs.js writes
 * seeded random inputs for a model. These helpers run both as child
 * processes and compare output folders with accpar's own TensorProto reader.
 * scripts/setup-ort.sh installs Node.js and the npm packages; when they are
 * missing every helper fails with a message saying so, so a suite using
 * them fails instead of passing without having checked anything.
 *
 * Typical use (an end-to-end test of a compiled model):
 *
 *   char msg[2048];
 *   cr_assert(ort_make_inputs(model, in_dir, 7, 2, msg, sizeof msg), "%s", msg);
 *   ... run OUTDIR/model --inputs in_dir --outputs got_dir ...
 *   cr_assert(ort_check(model, in_dir, got_dir, ORT_RTOL, ORT_ATOL, msg, sizeof msg), "%s",
 *             msg);
 *
 * Every function returns true on success, or false with one line in msg.
 * The includer defines _POSIX_C_SOURCE 200809L (or more) before any
 * system header and is built with ACCPAR_SOURCE_DIR (tests/CMakeLists.txt). */
#ifndef ACCPAR_TESTS_ORT_COMPARE_H
#define ACCPAR_TESTS_ORT_COMPARE_H

#include <dirent.h>
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
#include "ir/ir.h"

#define ORT_DIR ACCPAR_SOURCE_DIR "/tests/ort"
#define ORT_SETUP_HINT "run scripts/setup-ort.sh"

/* Tolerances of the comparisons against ONNX's expected outputs: those of
 * ONNX's own backend test runner (numpy.testing.assert_allclose). */
#define ORT_RTOL 1e-4
#define ORT_ATOL 1e-5

/* The node binary: $ACCPAR_NODE when set, else node from PATH. */
static inline const char *ort_node(void) {
  const char *n = getenv("ACCPAR_NODE");
  return n && *n ? n : "node";
}

static inline void ort_msg(char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void ort_msg(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
}

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr captured
 * into out (NUL-terminated, cut to cap, trailing newlines dropped).
 * Returns the exit status; 127 when the program could not be started;
 * -1 when the child could not be created or did not exit normally. */
static inline int ort_spawn(char *const argv[], char *out, size_t cap) {
  int fds[2];
  if (cap)
    out[0] = '\0';
  if (pipe(fds) != 0)
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], argv);
    dprintf(STDERR_FILENO, "cannot run %s: %s", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    /* Keep reading past cap so the child never blocks on a full pipe. */
    for (ssize_t i = 0; i < n && len + 1 < cap; i++)
      out[len++] = buf[i];
  }
  close(fds[0]);
  if (cap) {
    while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r'))
      len--;
    out[len] = '\0';
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs one of the tests/ort scripts; on failure msg says what went wrong
 * and, when Node.js or the packages are missing, how to install them. */
static inline bool ort_script(char *const args[], int nargs, char *msg, size_t cap) {
  char *argv[16];
  char out[2048];
  if (nargs + 2 > (int)(sizeof argv / sizeof *argv)) {
    ort_msg(msg, cap, "ort_script: too many arguments");
    return false;
  }
  argv[0] = (char *)ort_node();
  for (int i = 0; i < nargs; i++)
    argv[i + 1] = args[i];
  argv[nargs + 1] = NULL;
  int rc = ort_spawn(argv, out, sizeof out);
  if (rc == 0)
    return true;
  if (rc == 127)
    ort_msg(msg, cap, "Node.js is not installed (%s): %s", out, ORT_SETUP_HINT);
  else
    ort_msg(msg, cap, "%s (exit %d)", out[0] ? out : "no message", rc);
  return false;
}

/* Checks that Node.js, onnxruntime-node and protobufjs are installed and
 * load; msg receives their versions on success. */
static inline bool ort_ready(char *msg, size_t cap) {
  char *argv[] = {(char *)ort_node(), ORT_DIR "/run_ort.js", "--check", NULL};
  char out[2048];
  int rc = ort_spawn(argv, out, sizeof out);
  if (rc == 0) {
    ort_msg(msg, cap, "%s", out);
    return true;
  }
  if (rc != 127 && strstr(out, ORT_SETUP_HINT))
    ort_msg(msg, cap, "the ONNX Runtime reference executor is not usable: %s", out);
  else
    ort_msg(msg, cap, "the ONNX Runtime reference executor is not usable (%s): %s",
            rc == 127 ? "Node.js is not installed" : out, ORT_SETUP_HINT);
  return false;
}

/* Runs model with ONNX Runtime on in_dir/input_N.pb, writing
 * out_dir/output_N.pb (out_dir is created if missing). */
static inline bool ort_run(const char *model, const char *in_dir, const char *out_dir,
                           char *msg, size_t cap) {
  char *args[] = {ORT_DIR "/run_ort.js", (char *)model, (char *)in_dir, (char *)out_dir};
  return ort_script(args, 4, msg, cap);
}

/* Writes seeded random inputs for model into dir (created if missing):
 * floats uniform in [-1, 1), integers in {0..9}; symbolic dimensions take
 * batch (batch <= 0: the model has none). Same arguments, same bytes. */
static inline bool ort_make_inputs(const char *model, const char *dir, unsigned seed, int batch,
                                   char *msg, size_t cap) {
  char seed_s[16], batch_s[16];
  snprintf(seed_s, sizeof seed_s, "%u", seed);
  snprintf(batch_s, sizeof batch_s, "%d", batch);
  char *args[] = {ORT_DIR "/make_inputs.js", (char *)model, (char *)dir, "--seed", seed_s,
                  "--batch", batch_s};
  return ort_script(args, batch > 0 ? 7 : 5, msg, cap);
}

/* The number of files dir/output_0.pb, output_1.pb... numbered from 0
 * without gaps; -1 when dir cannot be read or the numbering has a gap. */
static inline int ort_count_outputs(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0, max = -1;
  for (struct dirent *e; (e = readdir(d));) {
    int k, end = 0;
    if (sscanf(e->d_name, "output_%d.pb%n", &k, &end) == 1 && end > 0 &&
        e->d_name[end] == '\0' && k >= 0) {
      n++;
      if (k > max)
        max = k;
    }
  }
  closedir(d);
  return max + 1 == n ? n : -1;
}

static inline void ort_shape_str(const ap_tensor *t, char *s, size_t cap) {
  size_t len = 0;
  s[0] = '\0';
  for (int i = 0; i < t->rank && len < cap; i++)
    len += (size_t)snprintf(s + len, cap - len, "%s%lld", i ? "," : "", (long long)t->dims[i]);
}

/* Compares got with want element by element: floats as numpy's allclose
 * (|got - want| <= atol + rtol * |want|, NaN only matching NaN, infinities
 * only themselves), everything else exactly. */
static inline bool ort_compare_tensor(const char *what, const ap_tensor *want,
                                      const ap_tensor *got, double rtol, double atol, char *msg,
                                      size_t cap) {
  if (want->dtype != got->dtype) {
    ort_msg(msg, cap, "%s: dtype %s, expected %s", what, ap_dtype_name(got->dtype),
            ap_dtype_name(want->dtype));
    return false;
  }
  bool same = want->rank == got->rank;
  for (int i = 0; same && i < want->rank; i++)
    same = want->dims[i] == got->dims[i];
  if (!same) {
    char ws[256], gs[256];
    ort_shape_str(want, ws, sizeof ws);
    ort_shape_str(got, gs, sizeof gs);
    ort_msg(msg, cap, "%s: shape [%s], expected [%s]", what, gs, ws);
    return false;
  }
  int64_t bad = 0, first = -1, worst_i = -1;
  double worst = 0;
  for (int64_t i = 0; i < want->numel; i++) {
    bool ok;
    if (want->dtype == AP_DT_STRING) {
      ok = strcmp(((char **)want->data)[i], ((char **)got->data)[i]) == 0;
    } else if (ap_dtype_is_float(want->dtype)) {
      double w = ap_tensor_get_f64(want, i), g = ap_tensor_get_f64(got, i);
      if (isnan(w) || isnan(g))
        ok = isnan(w) && isnan(g);
      else if (isinf(w) || isinf(g))
        ok = w == g;
      else
        ok = fabs(g - w) <= atol + rtol * fabs(w);
      if (!ok && !isnan(w) && !isnan(g) && !isinf(w) && !isinf(g) && fabs(g - w) > worst) {
        worst = fabs(g - w);
        worst_i = i;
      }
    } else {
      ok = ap_tensor_get_i64(want, i) == ap_tensor_get_i64(got, i);
    }
    if (!ok) {
      bad++;
      if (first < 0)
        first = i;
    }
  }
  if (bad == 0)
    return true;
  if (want->dtype == AP_DT_STRING)
    ort_msg(msg, cap, "%s: %lld of %lld elements differ; element %lld is \"%s\", expected \"%s\"",
            what, (long long)bad, (long long)want->numel, (long long)first,
            ((char **)got->data)[first], ((char **)want->data)[first]);
  else if (worst_i >= 0)
    ort_msg(msg, cap,
            "%s: %lld of %lld elements differ (rtol %g, atol %g); element %lld is %.9g, "
            "expected %.9g; largest difference %.3g at element %lld",
            what, (long long)bad, (long long)want->numel, rtol, atol, (long long)first,
            ap_tensor_get_f64(got, first), ap_tensor_get_f64(want, first), worst,
            (long long)worst_i);
  else
    ort_msg(msg, cap, "%s: %lld of %lld elements differ; element %lld is %.9g, expected %.9g",
            what, (long long)bad, (long long)want->numel, (long long)first,
            ap_tensor_get_f64(got, first), ap_tensor_get_f64(want, first));
  return false;
}

/* Compares every want_dir/output_N.pb with got_dir/output_N.pb: same
 * number of files, same dtypes and shapes, values within the tolerance.
 * Tensor names are compared when both files carry one (a different name
 * means outputs came out in another order). */
static inline bool ort_compare_dirs(const char *want_dir, const char *got_dir, double rtol,
                                    double atol, char *msg, size_t cap) {
  int n_want = ort_count_outputs(want_dir), n_got = ort_count_outputs(got_dir);
  if (n_want <= 0) {
    ort_msg(msg, cap, "%s: no output_0.pb.. files numbered without gaps", want_dir);
    return false;
  }
  if (n_got != n_want) {
    ort_msg(msg, cap, "%s: %d output file(s) (-1: unreadable or gaps), %s has %d", got_dir,
            n_got, want_dir, n_want);
    return false;
  }
  bool ok = true;
  for (int i = 0; ok && i < n_want; i++) {
    char want_path[4096], got_path[4096], what[4200];
    snprintf(want_path, sizeof want_path, "%s/output_%d.pb", want_dir, i);
    snprintf(got_path, sizeof got_path, "%s/output_%d.pb", got_dir, i);
    ap_arena *a = ap_arena_new();
    if (!a) {
      ort_msg(msg, cap, "out of memory");
      return false;
    }
    ap_diag d = {0};
    ap_tensor want, got;
    const char *want_name = "", *got_name = "";
    if (ap_read_tensor_pb(want_path, a, &want, &want_name, &d) != AP_OK ||
        ap_read_tensor_pb(got_path, a, &got, &got_name, &d) != AP_OK) {
      ort_msg(msg, cap, "%s", d.message);
      ok = false;
    } else if (want_name[0] && got_name[0] && strcmp(want_name, got_name) != 0) {
      ort_msg(msg, cap, "%s: tensor '%s', expected '%s' as in %s", got_path, got_name,
              want_name, want_path);
      ok = false;
    } else {
      snprintf(what, sizeof what, "%s (output '%s')", got_path, want_name);
      ok = ort_compare_tensor(what, &want, &got, rtol, atol, msg, cap);
    }
    ap_arena_free(a);
  }
  return ok;
}

/* Removes dir and the output_N.pb files ort_run wrote into it. */
static inline void ort_remove_outputs(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, "output_", 7) == 0) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  }
  closedir(d);
  rmdir(dir);
}

/* Runs model with ONNX Runtime on in_dir/input_N.pb and checks
 * got_dir/output_N.pb (another executor's outputs for the same inputs, e.g.
 * an accpar executable's --outputs folder) against ONNX Runtime's, which
 * are the reference. They go to a temporary folder removed afterwards. */
static inline bool ort_check(const char *model, const char *in_dir, const char *got_dir,
                             double rtol, double atol, char *msg, size_t cap) {
  char tmp[] = "/tmp/accpar-ort-XXXXXX";
  if (!mkdtemp(tmp)) {
    ort_msg(msg, cap, "cannot create a temporary folder: %s", strerror(errno));
    return false;
  }
  bool ok = ort_run(model, in_dir, tmp, msg, cap) &&
            ort_compare_dirs(tmp, got_dir, rtol, atol, msg, cap);
  ort_remove_outputs(tmp);
  return ok;
}

#endif
