/* accparc tensor FILE.pb [--compare OTHER.pb] [--count N]
 * Prints a TensorProto file (ONNX test data, a program's output_N.pb): its
 * name, dtype, shape and first values; with --compare, the largest absolute
 * and relative differences from another tensor of the same shape. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"
#include "tools/commands.h"

static const char usage_text[] =
    "usage: accparc tensor FILE.pb [--compare OTHER.pb] [--count N]\n"
    "  --compare F   also print the largest differences from F (same shape)\n"
    "  --count N     values to print (default 10)\n";

static void print_tensor(const char *path, const char *name, const ap_tensor *t, int64_t count) {
  printf("%s: '%s' %s[", path, name, ap_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++)
    printf("%s%lld", i ? "," : "", (long long)t->dims[i]);
  printf("]");
  bool numeric = ap_dtype_size(t->dtype) > 0 && t->dtype != AP_DT_COMPLEX64 &&
                 t->dtype != AP_DT_COMPLEX128;
  for (int64_t i = 0; numeric && i < t->numel && i < count; i++)
    printf(i ? " %.6g" : " = %.6g", ap_tensor_get_f64(t, i));
  if (numeric && t->numel > count)
    printf(" ... (%lld values)", (long long)t->numel);
  printf("\n");
}

int cmd_tensor(int argc, char **argv) {
  const char *path = NULL, *other = NULL;
  int64_t count = 10;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (strcmp(a, "--compare") == 0 && i + 1 < argc) {
      other = argv[++i];
    } else if (strcmp(a, "--count") == 0 && i + 1 < argc) {
      if (cli_parse_int64("tensor", a, argv[++i], &count) || count < 0)
        return cli_usage_error("tensor", "--count expects a non-negative integer");
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("tensor", "unknown option or missing value: %s\n%s", a, usage_text);
    } else if (!path) {
      path = a;
    } else {
      return cli_usage_error("tensor", "more than one file given: %s", a);
    }
  }
  if (!path)
    return cli_usage_error("tensor", "no file given\n%s", usage_text);
  ap_arena *arena = ap_arena_new();
  if (!arena) {
    fprintf(stderr, "accparc: error: out of memory\n");
    return 1;
  }
  ap_diag d = {0};
  ap_tensor t, u;
  const char *name = NULL, *other_name = NULL;
  int rc = 0;
  if (ap_read_tensor_pb(path, arena, &t, &name, &d) != AP_OK ||
      (other && ap_read_tensor_pb(other, arena, &u, &other_name, &d) != AP_OK)) {
    rc = cli_fail(&d);
  } else if (other && (t.rank != u.rank || t.numel != u.numel ||
                       memcmp(t.dims, u.dims, (size_t)t.rank * sizeof t.dims[0]) != 0)) {
    ap_error(&d, AP_ERR_INVALID, other, NULL, NULL, "its shape differs from %s's", path);
    rc = cli_fail(&d);
  } else {
    print_tensor(path, name, &t, count);
    if (other) {
      print_tensor(other, other_name, &u, count);
      double max_abs = 0, max_rel = 0;
      for (int64_t i = 0; i < t.numel; i++) {
        double x = ap_tensor_get_f64(&t, i), y = ap_tensor_get_f64(&u, i);
        double diff = fabs(x - y);
        max_abs = fmax(max_abs, diff);
        if (fabs(y) > 0)
          max_rel = fmax(max_rel, diff / fabs(y));
      }
      printf("largest difference: %.3g absolute, %.3g relative\n", max_abs, max_rel);
    }
  }
  ap_arena_free(arena);
  return rc;
}
