/* The device model: presets, device files, "kind:count" specs, and the tree
 * of levels the array is arranged in. Sources of the preset figures are in
 * docs/partition.md ("Device presets"). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"


/* Transcendental functions (exp_s, tanh_s). A TPU computes them on its
 * vector unit of 8 x 128 lanes (Jouppi et al., CACM 2020), at an assumed 10
 * cycles per element: 10 / (1024 lanes x 700 MHz) = 1.4e-11 s for v2,
 * 10 / (1024 x 940 MHz) = 1.0e-11 s for v3 (rounded, so that a plan's JSON
 * reads back exactly). Eyeriss has no such unit; 10 of its operations per
 * element are assumed (10 / 84e9 = 1.2e-10 s). The cpu preset's figures are
 * this host's, measured by `accparc calibrate`: the loss's softmax 2.7 ns
 * per logit (2026-12-03: its maximum, the vectorised exp in double, its
 * sum), the kernels' vectorised tanh 0.62 ns per element (2026-11-27).
 *
 * The convolutions' lowering (lower_row_s, lower_float_s, lower_gather_s)
 * and the one-input-channel direct convolution (direct_flops) are what this
 * host's kernels do (docs/partition.md, "Cost model"). The accelerators run
 * neither: their figures are assumptions, a lowering that streams each float
 * in and out at the memory bandwidth with no cost per row (8 bytes over
 * mem_bw, rounded), and a direct convolution at the peak rate. The cpu
 * preset's are `accparc calibrate`'s on this host (2026-11-27).
 *
 * A GEMM's packing of its B operand (pack_float_s, pack_transposed_s): the
 * accelerators' figures are the assumption the cost model made before it
 * was measured, each float loaded, stored and loaded again at the memory
 * bandwidth (12 bytes over mem_bw, rounded); the cpu preset's are `accparc
 * calibrate`'s on this host (2026-11-27): 0.1 ns a float copied from
 * contiguous rows, 0.2 ns gathered from a transposed operand. */

#define KIND(n, flops, bw, mem, link, latency, exp, tanh, row, flt, gather, direct, pack, \
             pack_t)                                                                         \
  {.name = n, .peak_flops = flops, .mem_bw_bytes_s = bw, .mem_bytes = mem,                    \
   .link_bw_bytes_s = link, .link_latency_s = latency, .exp_s = exp, .tanh_s = tanh,          \
   .lower_row_s = row, .lower_float_s = flt, .lower_gather_s = gather, .direct_flops = direct, \
   .pack_float_s = pack, .pack_transposed_s = pack_t}
static const ap_device_kind presets[] = {
    /* Cloud TPU v2 chip: 45 TFLOP/s bf16, 16 GiB HBM at 600 GB/s; ICI links of
     * 496 Gbit/s (Jouppi et al., CACM 2020, table 3). */
    KIND("tpuv2", 45e12, 600e9, 16.0 * 1073741824.0, 496e9 / 8, 1e-6, 1.4e-11, 1.4e-11,
         0, 1.3e-11, 1.3e-11, 45e12, 2.0e-11, 2.0e-11),
    /* Cloud TPU v3 chip: 123 TFLOP/s bf16, 32 GiB HBM2 at 900 GB/s; ICI links
     * of 656 Gbit/s (same sources). */
    KIND("tpuv3", 123e12, 900e9, 32.0 * 1073741824.0, 656e9 / 8, 1e-6, 1.0e-11, 1.0e-11,
         0, 8.9e-12, 8.9e-12, 123e12, 1.3e-11, 1.3e-11),
    /* HyPar's evaluation: Eyeriss-like accelerators of 84 GOP/s, each with an
     * HMC cube (8 GiB, 320 GB/s) on an H-tree of 1.6 GB/s-per-direction links. */
    KIND("eyeriss", 84e9, 320e9, 8.0 * 1073741824.0, 1.6e9, 1e-6, 1.2e-10, 1.2e-10,
         0, 2.5e-11, 2.5e-11, 84e9, 3.8e-11, 3.8e-11),
    /* This host, measured by `plan_time --measure-cpu` (bench/plan_time.c,
     * 2026-11-21): one core's float32 matrix multiply (31 GFLOP/s) and copy
     * bandwidth (11.3 GB/s read+write); a link between threads is a copy,
     * half that; 4 GiB per device and 5 us per hand-off are assumptions. */
    KIND("cpu", 3.1e10, 1.13e10, 4.0 * 1073741824.0, 5.66e9, 5e-6, 2.7e-9, 6.2e-10,
         5.8e-9, 4.0e-11, 3.5e-10, 4.6e10, 1e-10, 2e-10),
};
#undef KIND
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

static const char *const preset_names[] = {"tpuv2", "tpuv3", "eyeriss", "cpu", NULL};
static_assert(sizeof preset_names / sizeof preset_names[0] == N_PRESETS + 1,
              "one name per preset");

const char *const *ap_device_preset_names(void) { return preset_names; }

bool ap_device_preset(const char *name, ap_device_kind *out) {
  for (int i = 0; i < N_PRESETS; i++)
    if (strcmp(presets[i].name, name) == 0) {
      *out = presets[i];
      return true;
    }
  return false;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1]))
    *--e = 0;
  return s;
}

ap_status ap_device_file_read(const char *path, ap_device_kind *out, ap_diag *d) {
  FILE *f = fopen(path, "r");
  if (!f)
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot open device file: %s",
                    strerror(errno));
  memset(out, 0, sizeof *out);
#define KEY(f, required) {#f, &out->f, required},
  struct { const char *key; double *field; bool required; } keys[] = {AP_DEVICE_FIGURES(KEY)};
#undef KEY
  enum { N_KEYS = sizeof keys / sizeof keys[0] };
  bool seen[N_KEYS] = {false};
  char line[512];
  int lineno = 0;
  ap_status st = AP_OK;
  while (st == AP_OK && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash)
      *hash = 0;
    char *s = trim(line);
    if (!*s)
      continue;
    char *eq = strchr(s, '=');
    if (!eq) {
      st = ap_error(d, AP_ERR_PARSE, path, NULL, NULL, "line %d: expected 'key = value'",
                    lineno);
      break;
    }
    *eq = 0;
    char *key = trim(s), *val = trim(eq + 1);
    if (strcmp(key, "name") == 0) {
      snprintf(out->name, sizeof out->name, "%s", val);
      continue;
    }
    int k = 0;
    while (k < N_KEYS && strcmp(keys[k].key, key) != 0)
      k++;
    char *end;
    double x = k < N_KEYS ? strtod(val, &end) : 0;
    if (k == N_KEYS)
      st = ap_error(d, AP_ERR_PARSE, path, NULL, NULL, "line %d: unknown key '%s'", lineno,
                    key);
    else if (end == val || *end || !(x >= 0) || isinf(x) ||
             (x == 0 && keys[k].required && keys[k].field != &out->link_latency_s))
      st = ap_error(d, AP_ERR_PARSE, path, NULL, NULL,
                    "line %d: '%s' needs a positive number, got '%s'", lineno, key, val);
    else {
      *keys[k].field = x;
      seen[k] = true;
    }
  }
  fclose(f);
  if (st != AP_OK)
    return st;
  for (int k = 0; k < N_KEYS; k++)
    if (keys[k].required && !seen[k])
      return ap_error(d, AP_ERR_PARSE, path, NULL, NULL, "missing key '%s'", keys[k].key);
  if (!out->name[0]) {
    const char *base = strrchr(path, '/');
    snprintf(out->name, sizeof out->name, "%s", base ? base + 1 : path);
  }
  return AP_OK;
}

ap_status ap_devices_parse(const char *spec, ap_devices *out, ap_diag *d) {
  memset(out, 0, sizeof *out);
  if (!spec || !*spec)
    return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                    "expected kind:count[,kind:count...]");
  char buf[1024];
  if (strlen(spec) >= sizeof buf)
    return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL, "device spec too long");
  strcpy(buf, spec);
  for (char *item = buf, *next; item; item = next) {
    next = strchr(item, ',');
    if (next)
      *next++ = 0;
    char *colon = strrchr(item, ':');
    long count = 1;
    if (colon) {
      char *end;
      errno = 0;
      count = strtol(colon + 1, &end, 10);
      if (end == colon + 1 || *end || errno || count < 1 || count > 1 << 20)
        return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                        "'%s': the count must be a whole number from 1 to 1048576", item);
      *colon = 0;
    }
    ap_device_kind kind;
    if (!ap_device_preset(item, &kind)) {
      FILE *probe = fopen(item, "r");
      if (!probe)
        return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                        "'%s' is neither a preset (tpuv2, tpuv3, eyeriss, cpu) nor a device file",
                        item);
      fclose(probe);
      ap_status st = ap_device_file_read(item, &kind, d);
      if (st != AP_OK)
        return st;
    }
    int k = 0;
    while (k < out->n_kinds && strcmp(out->kinds[k].name, kind.name) != 0)
      k++;
    if (k < out->n_kinds &&
        (out->kinds[k].peak_flops != kind.peak_flops ||
         out->kinds[k].mem_bw_bytes_s != kind.mem_bw_bytes_s ||
         out->kinds[k].mem_bytes != kind.mem_bytes ||
         out->kinds[k].link_bw_bytes_s != kind.link_bw_bytes_s ||
         out->kinds[k].link_latency_s != kind.link_latency_s))
      return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                      "two kinds are named '%s' but their figures differ", kind.name);
    if (k == out->n_kinds) {
      if (k == AP_MAX_KINDS)
        return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                        "at most %d kinds of device", AP_MAX_KINDS);
      out->kinds[out->n_kinds++] = kind;
    }
    out->kinds[k].count += (int)count;
    out->n_devices += (int)count;
    if (out->n_devices > 1 << 20)
      return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL, "too many devices");
  }
  if (!out->n_kinds)
    return ap_error(d, AP_ERR_USAGE, "--devices", NULL, NULL,
                    "expected kind:count[,kind:count...]");
  return AP_OK;
}

/* ---- the tree of levels ---- */

int ap_group_children(const ap_devices *dv, const ap_group *g, ap_group *child) {
  if (g->kind < 0) { /* the root of a mixed array: one child per kind */
    int first = g->first_dev;
    for (int k = 0; k < dv->n_kinds; k++) {
      child[k] = (ap_group){.kind = k, .first_dev = first, .count = dv->kinds[k].count};
      first += dv->kinds[k].count;
    }
    return dv->n_kinds;
  }
  int c = g->count, f = 1;
  if (c == 1)
    f = 1;
  else if (c % 2 == 0)
    f = 2;
  else
    for (int p = 3; p < AP_MAX_CHILDREN && p <= c; p += 2)
      if (c % p == 0) {
        f = p;
        break;
      }
  if (c > 1 && f == 1) { /* a count with no small factor: two uneven halves */
    child[0] = (ap_group){.kind = g->kind, .first_dev = g->first_dev, .count = (c + 1) / 2};
    child[1] = (ap_group){.kind = g->kind, .first_dev = g->first_dev + (c + 1) / 2,
                          .count = c / 2};
    return 2;
  }
  for (int i = 0; i < f; i++)
    child[i] = (ap_group){.kind = g->kind, .first_dev = g->first_dev + i * (c / f),
                          .count = c / f};
  return f;
}

ap_group ap_group_root(const ap_devices *dv) {
  return (ap_group){.kind = dv->n_kinds > 1 ? -1 : 0, .first_dev = 0,
                    .count = dv->n_devices};
}

static int depth(const ap_devices *dv, const ap_group *g) {
  if (g->kind >= 0 && g->count == 1)
    return 0;
  ap_group ch[AP_MAX_CHILDREN];
  int k = ap_group_children(dv, g, ch), best = 0;
  for (int i = 0; i < k; i++) {
    int dd = depth(dv, &ch[i]);
    if (dd > best)
      best = dd;
  }
  return best + 1;
}

int ap_devices_levels(const ap_devices *dv) {
  ap_group root = ap_group_root(dv);
  return depth(dv, &root);
}

double ap_group_peak(const ap_devices *dv, const ap_group *g) {
  if (g->kind >= 0)
    return dv->kinds[g->kind].peak_flops * g->count;
  double s = 0;
  for (int k = 0; k < dv->n_kinds; k++)
    s += dv->kinds[k].peak_flops * dv->kinds[k].count;
  return s;
}
