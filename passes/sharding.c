/* The plan in ONNX's standard multi-device form (IR version 11): a device
 * configuration naming every device of the array, and per node a
 * ShardingSpecProto for each input and output it reads or writes.
 *
 * The boxes come from the distribution (passes/distribute.h), which is what
 * the partitioned program computes: the box of each input a device reads
 * and of each output it computes. A type II layer's output is written as it
 * stands after its partial sums are resolved (ONNX's reduction rule: the
 * summed box on every device of the reduction), which is what its readers
 * get. A tensor's boxes are expressible when they form a grid: along every
 * axis the devices' intervals cut the axis into equal parts (ONNX shards
 * evenly), every cell of the grid is the box of one device or of a group of
 * devices holding copies, and no device holds more than one cell. Uneven
 * shares (a mixed array's ratios) and boxes that straddle cells are not;
 * such a node gets no annotation and is reported. */
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"

/* The cut of one axis: k intervals [cut[i], cut[i + 1]). */
typedef struct axis_cut {
  int k;
  int64_t *cut;  /* k + 1 bounds */
} axis_cut;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The intervals the participating devices' boxes cut axis a into; false
 * when they overlap without being equal or leave a gap. bounds has room for
 * 2 n_dev + 2 values. */
static bool cut_axis(const ap_dbox *box, const bool *part, int n_dev, int a, int64_t size,
                     int64_t *bounds, axis_cut *out) {
  int n = 0;
  for (int d = 0; d < n_dev; d++)
    if (part[d]) {
      bounds[n++] = box[d].lo[a];
      bounds[n++] = box[d].hi[a];
    }
  qsort(bounds, (size_t)n, sizeof *bounds, cmp_i64);
  int u = 0;
  for (int i = 0; i < n; i++)
    if (u == 0 || bounds[u - 1] != bounds[i])
      bounds[u++] = bounds[i];
  if (u < 2 || bounds[0] != 0 || bounds[u - 1] != size)
    return false;
  /* Every device's interval must be one of the cells. */
  for (int d = 0; d < n_dev; d++) {
    if (!part[d])
      continue;
    int64_t at = box[d].lo[a];
    int64_t *lo = bsearch(&at, bounds, (size_t)u, sizeof *bounds, cmp_i64);
    if (!lo || lo + 1 >= bounds + u || lo[1] != box[d].hi[a])
      return false;
  }
  out->k = u - 1;
  out->cut = bounds;
  return true;
}

/* Whether the k cells of [0, size) are equal, as ONNX's even shards are. */
static bool even(const axis_cut *c, int64_t size) {
  if (size % c->k)
    return false;
  for (int i = 0; i < c->k; i++)
    if (c->cut[i + 1] - c->cut[i] != size / c->k)
      return false;
  return true;
}

typedef enum spec_result {
  SPEC_OK,
  SPEC_NONE,        /* nothing to say: a shape not known, or a tensor no device touches */
  SPEC_UNEVEN,      /* boxes the standard form cannot express */
  SPEC_NOMEM
} spec_result;

/* The spec of tensor v given each device's box of it. */
static spec_result spec_of(ap_graph *g, int v, const ap_dbox *box, int n_dev,
                           ap_shard_spec *spec) {
  ap_arena *A = g->arena;
  const ap_value *val = &g->values[v];
  int rank = val->rank;
  bool *part = ap_arena_array(A, (size_t)n_dev, sizeof *part);
  int64_t *bounds = ap_arena_array(A, (size_t)(rank > 0 ? rank : 1) * (2 * (size_t)n_dev + 2),
                                   sizeof *bounds);
  int *cell_of = ap_arena_array(A, (size_t)n_dev, sizeof *cell_of);
  if (!part || !bounds || !cell_of)
    return SPEC_NOMEM;
  int n_part = 0;
  for (int d = 0; d < n_dev; d++)
    n_part += part[d] = ap_dbox_volume(rank, &box[d]) > 0;
  if (rank < 0 || n_part == 0)
    return SPEC_NONE;

  axis_cut cut[AP_MAX_RANK];
  int n_cells = 1, n_dims = 0;
  for (int a = 0; a < rank; a++) {
    if (!cut_axis(box, part, n_dev, a, val->dims[a], bounds + (size_t)a * (2 * n_dev + 2),
                  &cut[a]) ||
        !even(&cut[a], val->dims[a]))
      return SPEC_UNEVEN;
    if (cut[a].k > 1) {
      n_dims++;
      n_cells *= cut[a].k;
    }
  }
  /* Each participating device's cell, row-major over the sharded axes. */
  for (int d = 0; d < n_dev; d++) {
    cell_of[d] = -1;
    if (!part[d])
      continue;
    int c = 0;
    for (int a = 0; a < rank; a++)
      if (cut[a].k > 1)
        c = c * cut[a].k + (int)(box[d].lo[a] / (val->dims[a] / cut[a].k));
    cell_of[d] = c;
  }
  spec->tensor = val->name;
  spec->n_device = n_cells;
  spec->n_dims = n_dims;
  spec->device = ap_arena_array(A, (size_t)n_cells, sizeof *spec->device);
  spec->groups = ap_arena_array(A, (size_t)n_cells, sizeof *spec->groups);
  spec->dims = ap_arena_array(A, (size_t)(n_dims ? n_dims : 1), sizeof *spec->dims);
  if (!spec->device || !spec->groups || !spec->dims)
    return SPEC_NOMEM;
  for (int a = 0, i = 0; a < rank; a++)
    if (cut[a].k > 1)
      spec->dims[i++] = (ap_shard_dim){a, val->dims[a], cut[a].k};
  for (int c = 0; c < n_cells; c++) {
    int n = 0, first = -1;
    for (int d = 0; d < n_dev; d++)
      if (cell_of[d] == c) {
        n++;
        first = first < 0 ? d : first;
      }
    if (n == 0)
      return SPEC_UNEVEN; /* a hole: part of the tensor no device holds */
    if (n == 1) {
      spec->device[c] = first;
      continue;
    }
    ap_shard_group *gr = &spec->groups[spec->n_groups];
    gr->key = -(int64_t)(spec->n_groups + 1);
    gr->devices = ap_arena_array(A, (size_t)n, sizeof *gr->devices);
    if (!gr->devices)
      return SPEC_NOMEM;
    for (int d = 0; d < n_dev; d++)
      if (cell_of[d] == c)
        gr->devices[gr->n++] = d;
    spec->device[c] = gr->key;
    spec->n_groups++;
  }
  return SPEC_OK;
}

ap_status ap_plan_annotate_sharding(ap_graph *g, int *n_unexpressed, const char ***unexpressed,
                                    ap_diag *d) {
  *n_unexpressed = 0;
  *unexpressed = NULL;
  const ap_plan *p = g->plan;
  if (!p)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "sharding annotations need a plan (ap_partition first)");
  ap_dist *dist;
  ap_status st = ap_distribute(g, &dist, d);
  if (st != AP_OK)
    return st;
  ap_arena *A = g->arena;
  int n_dev = dist->n_dev;
  ap_devconf *dc = ap_arena_alloc(A, sizeof *dc);
  const char **skipped = ap_arena_array(A, (size_t)g->n_nodes + 1, sizeof *skipped);
  if (!dc || !skipped || !(dc->devices = ap_arena_array(A, (size_t)n_dev, sizeof *dc->devices)) ||
      !(dc->n_specs = ap_arena_array(A, (size_t)g->n_nodes + 1, sizeof *dc->n_specs)) ||
      !(dc->specs = ap_arena_array(A, (size_t)g->n_nodes + 1, sizeof *dc->specs)))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  dc->name = "accpar";
  dc->n_devices = n_dev;
  /* Devices are numbered kind by kind, as the runtime's ranks. */
  for (int k = 0, dev = 0; k < p->dev.n_kinds; k++)
    for (int i = 0; i < p->dev.kinds[k].count; i++, dev++) {
      char name[AP_DEVICE_NAME_MAX + 24];
      snprintf(name, sizeof name, "%s:%d", p->dev.kinds[k].name, dev);
      if (!(dc->devices[dev] = ap_arena_strdup(A, name)))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    }

  for (int n = 0; n < g->n_nodes; n++) {
    const ap_node *node = &g->nodes[n];
    const ap_dnode *dn = &dist->node[n];
    if (node->dead || !dn->out)
      continue;
    ap_shard_spec *specs = ap_arena_array(A, (size_t)(node->n_in + node->n_out) + 1,
                                          sizeof *specs);
    if (!specs)
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    int count = 0;
    spec_result r = SPEC_OK;
    for (int s = 0; s < node->n_in + node->n_out && r != SPEC_UNEVEN; s++) {
      bool is_in = s < node->n_in;
      int slot = is_in ? s : s - node->n_in;
      int v = is_in ? node->in[slot] : node->out[slot];
      if (v < 0)
        continue;
      const ap_dbox *box = is_in ? dn->in[slot] : dn->out[slot];
      r = spec_of(g, v, box, n_dev, &specs[count]);
      if (r == SPEC_NOMEM)
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      count += r == SPEC_OK;
    }
    if (r == SPEC_UNEVEN) {
      skipped[(*n_unexpressed)++] = node->name;
      continue;
    }
    dc->n_specs[n] = count;
    dc->specs[n] = specs;
  }
  g->devconf = dc;
  *unexpressed = skipped;
  return AP_OK;
}
