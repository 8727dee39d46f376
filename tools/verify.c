/* accparc compile --verify: the partitioned program against the one-device
 * program, on the same seeded inputs (token ids inside their tables, masks
 * of 0 and 1, floats in [-1, 1)). The one-device program is compiled by this
 * same accparc, with the command line's options but the array, the
 * strategy and the output folder; both run (training programs two steps)
 * and every output must agree within rtol 1e-4, atol 1e-5, the tolerance
 * of ONNX's own backend tests. A disagreement is one error naming the first
 * differing output and element; the caller then removes OUTDIR/model. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "tools/commands.h"

static const double VERIFY_RTOL = 1e-4, VERIFY_ATOL = 1e-5;

/* Runs argv with stdout and stderr into log; true when it exits with 0. */
static bool run_logged(char *const argv[], const char *log) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return false;
  if (pid == 0) {
    FILE *f = freopen(log, "w", stdout);
    if (!f || dup2(fileno(stdout), 2) < 0)
      _exit(127);
    execv(argv[0], argv);
    _exit(127);
  }
  int st;
  return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* The last line of a log, for the error message. */
static void last_line(const char *log, char *buf, size_t cap) {
  FILE *f = fopen(log, "r");
  buf[0] = 0;
  char line[1024];
  while (f && fgets(line, sizeof line, f))
    if (line[0] != '\n')
      snprintf(buf, cap, "%s", line);
  if (f)
    fclose(f);
  buf[strcspn(buf, "\n")] = 0;
}

/* splitmix64: the inputs' values. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* DIR/input_N.pb for the inference program's inputs (the graph inputs that
 * are not weights, in order): a value bound before the pipeline as itself,
 * else seeded values: floats in [-1, 1), token ids inside the table they
 * index, other integers 0 or 1. */
static ap_status write_inputs(const ap_graph *g, const char *model, const char *dir,
                              ap_diag *d) {
  uint64_t state = 7;
  int n = 0;
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    if (v->kind == AP_VAL_WEIGHT)
      continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/input_%d.pb", dir, n++);
    ap_tensor t = ap_value_tensor(v);
    void *data = NULL;
    if (!v->data) {
      size_t es = ap_dtype_size(v->dtype);
      data = calloc(t.numel ? (size_t)t.numel : 1, es ? es : 1);
      if (!data || !es)
        return ap_error(d, data ? AP_ERR_UNSUPPORTED : AP_ERR_NOMEM, model, NULL, NULL,
                        "--verify: cannot make a value for input '%s'", v->name);
      t.data = data;
      int64_t rows = ap_value_index_rows(g, g->inputs[i]);
      for (int64_t k = 0; k < t.numel; k++) {
        uint64_t r = next_random(&state);
        if (ap_dtype_is_float(v->dtype))
          ap_tensor_set_f64(&t, k, (double)(r >> 11) / (double)(1ull << 52) - 1.0);
        else
          ap_tensor_set_f64(&t, k, (double)(r % (uint64_t)(rows > 0 ? rows : 2)));
      }
    }
    ap_status s = ap_write_tensor_pb(path, &t, v->name, d);
    free(data);
    if (s != AP_OK)
      return s;
  }
  return AP_OK;
}

/* Compares every output of one/ with part/; the first difference into d. */
static ap_status compare_outputs(const char *model, const char *one, const char *part,
                                 int ndev, ap_diag *d) {
  int n = 0;
  for (;; n++) {
    char want_path[4400], got_path[4400];
    snprintf(want_path, sizeof want_path, "%s/output_%d.pb", one, n);
    snprintf(got_path, sizeof got_path, "%s/output_%d.pb", part, n);
    if (access(want_path, R_OK) != 0)
      break;
    ap_arena *a = ap_arena_new();
    ap_tensor want, got;
    const char *name = NULL;
    ap_status s = a ? AP_OK : AP_ERR_NOMEM;
    if (s == AP_OK && (ap_read_tensor_pb(want_path, a, &want, &name, d) != AP_OK ||
                       ap_read_tensor_pb(got_path, a, &got, NULL, d) != AP_OK))
      s = AP_ERR_INVALID;
    if (s == AP_OK && (got.dtype != want.dtype || got.numel != want.numel))
      s = ap_error(d, AP_ERR_INVALID, model, NULL, NULL,
                   "--verify: output '%s' of the %d-device program has another type or shape "
                   "than the one-device program's",
                   name ? name : "?", ndev);
    for (int64_t i = 0; s == AP_OK && i < want.numel; i++) {
      double g = ap_tensor_get_f64(&got, i), w = ap_tensor_get_f64(&want, i);
      bool same = ap_dtype_is_float(want.dtype)
                      ? (isnan(g) && isnan(w)) || fabs(g - w) <= VERIFY_ATOL + VERIFY_RTOL * fabs(w)
                      : ap_tensor_get_i64(&got, i) == ap_tensor_get_i64(&want, i);
      if (!same)
        s = ap_error(d, AP_ERR_INVALID, model, NULL, NULL,
                     "--verify: output '%s' of the %d-device program differs from the "
                     "one-device program's: element %lld is %.9g, one device computes %.9g",
                     name ? name : "?", ndev, (long long)i, g, w);
    }
    ap_arena_free(a);
    if (s != AP_OK)
      return s == AP_ERR_NOMEM ? ap_error(d, s, model, NULL, NULL, "out of memory") : s;
  }
  if (n == 0)
    return ap_error(d, AP_ERR_INVALID, model, NULL, NULL,
                    "--verify: the one-device program wrote no output");
  return AP_OK;
}

/* Options of the command line that the one-device program does not take:
 * with a value, then alone. */
static bool dropped(const char *a, bool *with_value) {
  static const char *const valued[] = {"--devices", "--strategy", "-o", "--plan", "--transport",
                                       "--backend"};
  static const char *const alone[] = {"--verify", "--no-build"};
  for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++)
    if (strcmp(a, valued[i]) == 0)
      return *with_value = true;
  for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++)
    if (strcmp(a, alone[i]) == 0) {
      *with_value = false;
      return true;
    }
  return false;
}

ap_status cli_verify(int argc, char **argv, const ap_graph *g, const char *model,
                     const char *outdir, int ndev, bool train, ap_diag *d) {
  const char *tmpdir = getenv("TMPDIR");
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s/accparc-verify-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(tmp))
    return ap_error(d, AP_ERR_IO, model, NULL, NULL, "--verify: cannot make a folder in %s",
                    tmpdir && *tmpdir ? tmpdir : "/tmp");
  char exe[4096], ref[4200], one[4200], part[4200], log[4200], prog[4400], in[4200];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  snprintf(ref, sizeof ref, "%s/one-device", tmp);
  snprintf(one, sizeof one, "%s/one", tmp);
  snprintf(part, sizeof part, "%s/part", tmp);
  snprintf(log, sizeof log, "%s/log", tmp);
  snprintf(in, sizeof in, "%s/in", tmp);
  ap_status s = AP_OK;
  char **args = calloc((size_t)argc + 8, sizeof *args);
  if (!args || len <= 0 || mkdir(one, 0777) != 0 || mkdir(part, 0777) != 0 ||
      mkdir(in, 0777) != 0) {
    s = ap_error(d, AP_ERR_IO, model, NULL, NULL, "--verify: cannot prepare %s", tmp);
    goto done;
  }
  /* Training programs make their own seeded inputs and labels. */
  if (!train && (s = write_inputs(g, model, in, d)) != AP_OK)
    goto done;
  int n = 0;
  args[n++] = exe;
  for (int i = 0; i < argc; i++) {
    bool with_value;
    if (dropped(argv[i], &with_value)) {
      i += with_value;
      continue;
    }
    args[n++] = argv[i];
  }
  args[n++] = "--devices";
  args[n++] = "cpu:1";
  args[n++] = "-o";
  args[n++] = ref;
  args[n] = NULL;
  char why[1024];
  if (!run_logged(args, log)) {
    last_line(log, why, sizeof why);
    s = ap_error(d, AP_ERR_INVALID, model, NULL, NULL,
                 "--verify: the one-device program does not compile: %s", why);
    goto done;
  }
  const char *steps = train ? "2" : "1";
  snprintf(prog, sizeof prog, "%s/model", ref);
  char *run_one[] = {prog, "--seed", "7", "--steps", (char *)steps, "--outputs", one,
                     train ? NULL : "--inputs", in, NULL};
  if (!run_logged(run_one, log)) {
    last_line(log, why, sizeof why);
    s = ap_error(d, AP_ERR_INVALID, model, NULL, NULL,
                 "--verify: the one-device program failed: %s", why);
    goto done;
  }
  snprintf(prog, sizeof prog, "%s/model", outdir);
  char *run_part[] = {prog, "--seed", "7", "--steps", (char *)steps, "--outputs", part,
                      train ? NULL : "--inputs", in, NULL};
  if (!run_logged(run_part, log)) {
    last_line(log, why, sizeof why);
    s = ap_error(d, AP_ERR_INVALID, model, NULL, NULL, "--verify: the program failed: %s", why);
    goto done;
  }
  s = compare_outputs(model, one, part, ndev, d);
done:
  free(args);
  nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return s;
}
