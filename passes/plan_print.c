/* The plan as a table (one row per vertex, one column per level) and as
 * JSON (DESIGN.md: strategy, devices, step_time_s, comm_bytes, optimality,
 * and per node its types and per-device boxes). */
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"

static const char *const type_names[3] = {"I", "II", "III"};
static const char *const join_names[3] = {"b", "f", "r"}; /* split dim[0], dim[1], replicated */

const char *ap_plan_state_name(const ap_plan *p, int v, int level) {
  int s = p->state[(size_t)level * p->n_vertices + v] % 3;
  return p->v[v].join ? join_names[s] : type_names[s];
}

/* The table's cell: the state's name, then '=' where accpar shares by
 * device count instead of balancing (its ratio rule 1, partition.c). */
static const char *state_cell(const ap_plan *p, int v, int level, char *buf, size_t size) {
  bool by_count = p->state[(size_t)level * p->n_vertices + v] >= 3;
  snprintf(buf, size, "%s%s", ap_plan_state_name(p, v, level), by_count ? "=" : "");
  return buf;
}

/* A layout of vertex v at one level, in state s with ratio r among k
 * children of a group of class cls. */
typedef ap_layout (*layout_fn)(const ap_plan *p, const ap_graph *g, int v, int level, int cls,
                               int k, int s, int arg);

/* Device dev's box of a tensor of v, level by level inside the box the level
 * above left, each level's layout from layout_at. */
static void walk_levels(const ap_plan *p, const ap_graph *g, int v, int dev, const ap_value *val,
                        layout_fn layout_at, int arg, int64_t *lo, int64_t *hi) {
  for (int i = 0; i < val->rank; i++) {
    lo[i] = 0;
    hi[i] = val->dims[i];
  }
  ap_group grp = ap_group_root(&p->dev);
  int cls = 0;
  for (int l = 0; l < p->n_levels; l++) {
    ap_group ch[AP_MAX_CHILDREN];
    int k = ap_group_children(&p->dev, &grp, ch), i = 0;
    while (i < k - 1 && dev >= ch[i].first_dev + ch[i].count)
      i++;
    int s = p->state[(size_t)l * p->n_vertices + v];
    ap_layout lay = layout_at(p, g, v, l, cls, k, s, arg);
    int64_t clo[AP_MAX_RANK], chi[AP_MAX_RANK];
    ap_layout_child_box(val->rank, lo, hi, k, &lay, i, clo, chi);
    memcpy(lo, clo, sizeof(int64_t) * (size_t)val->rank);
    memcpy(hi, chi, sizeof(int64_t) * (size_t)val->rank);
    cls = p->child_map[l][cls * AP_MAX_CHILDREN + i];
    grp = ch[i];
  }
}

static ap_layout port_layout_at(const ap_plan *p, const ap_graph *g, int v, int level, int cls,
                                int k, int s, int port) {
  double ratio[AP_MAX_CHILDREN], pr[AP_MAX_CHILDREN];
  ap_plan_level_ratio(p, g, level, cls, v, ratio);
  ap_plan_port_ratio(p, g, p->cls[level][cls].ext + 2 * p->v[v].ext_base, v, port, s, k, ratio,
                     pr);
  return ap_plan_port_layout(p, v, port, s, pr);
}

/* II splits the weight's I dim (as the input's I dim when it has one), III
 * its O dim, in the units of those ports. */
static ap_layout weight_layout_at(const ap_plan *p, const ap_graph *g, int v, int level, int cls,
                                  int k, int s, int unused) {
  const ap_vertex *vx = &p->v[v];
  int type = s % 3;
  ap_layout lay = {.kind = AP_LAYOUT_REPLICATED};
  if (type > 0 && vx->w_dim[type - 1] >= 0) {
    lay.kind = AP_LAYOUT_SPLIT;
    lay.dim = vx->w_dim[type - 1];
    lay.unit = type == 1 ? vx->port[1].unit[1] : vx->port[0].unit[1];
    ap_plan_level_ratio(p, g, level, cls, v, lay.ratio);
  }
  return lay;
}

/* Every device's box of a tensor of v, as walk_levels gives each, but
 * each group's box computed once from its parent's: device d's box is
 * lo[d * stride ...], hi[d * stride ...]. */
typedef struct box_walk {
  const ap_plan *p;
  const ap_graph *g;
  int v, rank, arg;
  layout_fn layout_at;
  ap_dbox *box; /* [n_devices] */
  struct class_memo {
    ap_layout lay;  /* as layout_at gives it for each of the class's groups alike */
    int k;          /* their children */
    int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK]; /* the last group box split, */
    int64_t clo[AP_MAX_CHILDREN][AP_MAX_RANK], chi[AP_MAX_CHILDREN][AP_MAX_RANK]; /* into */
    int walked;     /* the first device of a group of the class walked to the
                       devices, -1: none yet */
    int64_t wlo[AP_MAX_RANK], whi[AP_MAX_RANK]; /* that group's box */
  } *memo;         /* [the classes of every level], or NULL: asked each time */
  int *memo_at;    /* [n_levels]: where level l's classes start in memo */
  bool *known;
} box_walk;

static void walk_tree(const box_walk *w, const ap_group *grp, int l, int cls, const int64_t *lo,
                      const int64_t *hi) {
  const ap_plan *p = w->p;
  size_t bytes = sizeof(int64_t) * (size_t)w->rank;
  if (l == p->n_levels) {
    for (int d = grp->first_dev; d < grp->first_dev + grp->count; d++)
      for (int i = 0; i < w->rank; i++) { /* within AP_DCOORD_MAX: ap_dist_oversized */
        w->box[d].lo[i] = (ap_dcoord)lo[i];
        w->box[d].hi[i] = (ap_dcoord)hi[i];
      }
    return;
  }
  struct class_memo *m = w->memo ? &w->memo[w->memo_at[l] + cls] : NULL;
  /* A class's groups have the same kind and count, so the same subtree of
   * groups and classes below: one holding a box of the same extents as a
   * group walked before gives its devices that group's boxes moved by the
   * offset (shares depend on extents alone). Past MAX_CLASSES a class's
   * groups may differ in extents (partition.c, merge_class): walked. */
  if (m && w->known[w->memo_at[l] + cls] && m->walked >= 0) {
    bool same_extent = true;
    for (int d = 0; d < w->rank && same_extent; d++)
      same_extent = hi[d] - lo[d] == m->whi[d] - m->wlo[d];
    if (same_extent) {
      const ap_dbox *from = &w->box[m->walked];
      ap_dbox *to = &w->box[grp->first_dev];
      for (int j = 0; j < grp->count; j++)
        for (int d = 0; d < w->rank; d++) {
          to[j].lo[d] = (ap_dcoord)(from[j].lo[d] + (lo[d] - m->wlo[d]));
          to[j].hi[d] = (ap_dcoord)(from[j].hi[d] + (lo[d] - m->wlo[d]));
        }
      return;
    }
  }
  ap_group ch[AP_MAX_CHILDREN];
  int k = ap_group_children(&p->dev, grp, ch);
  int s = p->state[(size_t)l * p->n_vertices + w->v];
  int64_t clo[AP_MAX_CHILDREN][AP_MAX_RANK], chi[AP_MAX_CHILDREN][AP_MAX_RANK];
  if (m && w->known[w->memo_at[l] + cls] && m->k == k) {
    /* The class's last group split again, or this one moved by its offset
     * (a class's groups have equal extents). */
    bool same_extent = true;
    for (int d = 0; d < w->rank && same_extent; d++)
      same_extent = hi[d] - lo[d] == m->hi[d] - m->lo[d];
    if (!same_extent) {
      ap_layout_child_boxes(w->rank, lo, hi, k, &m->lay, m->clo, m->chi);
      memcpy(m->lo, lo, bytes);
      memcpy(m->hi, hi, bytes);
    }
    for (int i = 0; i < k; i++)
      for (int d = 0; d < w->rank; d++) {
        clo[i][d] = m->clo[i][d] - m->lo[d] + lo[d];
        chi[i][d] = m->chi[i][d] - m->lo[d] + lo[d];
      }
  } else {
    ap_layout lay = w->layout_at(p, w->g, w->v, l, cls, k, s, w->arg);
    ap_layout_child_boxes(w->rank, lo, hi, k, &lay, clo, chi);
    if (m) {
      m->lay = lay;
      m->k = k;
      memcpy(m->lo, lo, bytes);
      memcpy(m->hi, hi, bytes);
      memcpy(m->clo, clo, sizeof clo);
      memcpy(m->chi, chi, sizeof chi);
      m->walked = -1;
      w->known[w->memo_at[l] + cls] = true;
    }
  }
  for (int i = 0; i < k; i++)
    walk_tree(w, &ch[i], l + 1, p->child_map[l][cls * AP_MAX_CHILDREN + i], clo[i], chi[i]);
  if (m && m->walked < 0) {
    m->walked = grp->first_dev;
    memcpy(m->wlo, lo, bytes);
    memcpy(m->whi, hi, bytes);
  }
}

static void walk_all(box_walk *w, const ap_value *val) {
  const ap_plan *p = w->p;
  int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK];
  w->rank = val->rank;
  for (int i = 0; i < val->rank; i++) {
    lo[i] = 0;
    hi[i] = val->dims[i];
  }
  /* A group's layout depends on its level and class alone: asked once per
   * class, not once per group (a thousand devices make 2047 groups). */
  int n_memo = 0;
  w->memo_at = malloc(((size_t)p->n_levels + 1) * sizeof *w->memo_at);
  for (int l = 0; l < p->n_levels && w->memo_at; l++) {
    w->memo_at[l] = n_memo;
    n_memo += p->n_cls[l];
  }
  w->memo = w->memo_at ? malloc(((size_t)n_memo + 1) * sizeof *w->memo) : NULL;
  w->known = w->memo ? calloc((size_t)n_memo + 1, sizeof *w->known) : NULL;
  if (!w->known) {
    free(w->memo);
    w->memo = NULL;
  }
  ap_group root = ap_group_root(&p->dev);
  walk_tree(w, &root, 0, 0, lo, hi);
  free(w->memo_at);
  free(w->memo);
  free(w->known);
}

void ap_plan_device_boxes(const ap_plan *p, const ap_graph *g, int v, int port, ap_dbox *box) {
  box_walk w = {p, g, v, 0, port, port_layout_at, box, NULL, NULL, NULL};
  walk_all(&w, &g->values[p->v[v].port[port].value]);
}

void ap_plan_weight_boxes(const ap_plan *p, const ap_graph *g, int v, ap_dbox *box) {
  box_walk w = {p, g, v, 0, 0, weight_layout_at, box, NULL, NULL, NULL};
  walk_all(&w, &g->values[p->v[v].weight]);
}

void ap_plan_device_box(const ap_plan *p, const ap_graph *g, int v, int port, int dev,
                        int64_t *lo, int64_t *hi) {
  walk_levels(p, g, v, dev, &g->values[p->v[v].port[port].value], port_layout_at, port, lo, hi);
}

void ap_plan_weight_box(const ap_plan *p, const ap_graph *g, int v, int dev, int64_t *lo,
                        int64_t *hi) {
  walk_levels(p, g, v, dev, &g->values[p->v[v].weight], weight_layout_at, 0, lo, hi);
}

static void print_devices(const ap_plan *p, FILE *out) {
  for (int k = 0; k < p->dev.n_kinds; k++)
    fprintf(out, "%s%s:%d", k ? "," : "", p->dev.kinds[k].name, p->dev.kinds[k].count);
}

ap_status ap_plan_print_table(const ap_graph *g, FILE *out) {
  const ap_plan *p = g->plan;
  if (!p)
    return AP_ERR_USAGE;
  int L = p->n_levels, name_w = 4, op_w = 2;
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_node *n = &g->nodes[p->v[v].node];
    int nl = (int)strlen(n->name), ol = (int)strlen(n->op_type);
    name_w = nl > name_w ? nl : name_w;
    op_w = ol > op_w ? ol : op_w;
  }
  fprintf(out, "plan: %s  strategy %s  cost %s  devices ", g->path,
          ap_strategy_name(p->opts.strategy), p->opts.cost == AP_COST_PAPER ? "paper" : "time");
  print_devices(p, out);
  fprintf(out, " (%d devices, %d levels)\n", p->dev.n_devices, L);
  fprintf(out, "%-*s  %-*s", name_w, "node", op_w, "op");
  for (int l = 0; l < L; l++)
    fprintf(out, "  L%-3d", l);
  fprintf(out, "  %12s\n", "time_s");
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_node *n = &g->nodes[p->v[v].node];
    fprintf(out, "%-*s  %-*s", name_w, n->name, op_w, n->op_type);
    for (int l = 0; l < L; l++) {
      char cell[8];
      fprintf(out, "  %-4s", state_cell(p, v, l, cell, sizeof cell));
    }
    fprintf(out, "  %12.6e\n", p->row_time_s[v]);
  }
  fprintf(out, "step time: %.6e s (compute %.6e s, communication %.6e s)\n", p->step_time_s,
          p->compute_time_s, p->comm_time_s);
  fprintf(out, "communication: %.6e bytes (paper metric: %.6e elements)\n", p->comm_bytes,
          p->paper_cost);
  fprintf(out, "memory per device:");
  for (int k = 0; k < p->dev.n_kinds; k++) {
    double mx = 0;
    for (int dv = 0; dv < p->dev.n_devices; dv++)
      if (p->cls[L][p->dev_class[dv]].g.kind == k)
        mx = p->class_mem[p->dev_class[dv]] > mx ? p->class_mem[p->dev_class[dv]] : mx;
    fprintf(out, " %s %.6e bytes%s", p->dev.kinds[k].name, mx,
            k + 1 < p->dev.n_kinds ? "," : "");
  }
  fprintf(out, "\noptimality: %s\nbytes priced: %s\nsearch priced: %s\n", p->optimality,
          p->bytes_priced, p->search_priced);
  return ferror(out) ? AP_ERR_IO : AP_OK;
}

static void json_string(FILE *out, const char *s) { ap_json_string(out, s, strlen(s)); }

static ap_status print_json(const ap_graph *g, FILE *out, bool with_boxes) {
  const ap_plan *p = g->plan;
  if (!p)
    return AP_ERR_USAGE;
  int L = p->n_levels;
  fprintf(out, "{\n  \"model\": ");
  json_string(out, g->path);
  fprintf(out, ",\n  \"strategy\": \"%s\",\n  \"cost\": \"%s\",\n  \"devices\": [",
          ap_strategy_name(p->opts.strategy), p->opts.cost == AP_COST_PAPER ? "paper" : "time");
  for (int k = 0; k < p->dev.n_kinds; k++) {
    const ap_device_kind *dk = &p->dev.kinds[k];
    fprintf(out, "%s{\"kind\": ", k ? ", " : "");
    json_string(out, dk->name);
    fprintf(out, ", \"count\": %d", dk->count);
#define FIGURE(f, required) fprintf(out, ", \"" #f "\": %.6g", dk->f);
    AP_DEVICE_FIGURES(FIGURE)
#undef FIGURE
    fputc('}', out);
  }
  fprintf(out,
          "],\n  \"n_devices\": %d,\n  \"levels\": %d,\n  \"step_time_s\": %.9g,\n"
          "  \"compute_time_s\": %.9g,\n  \"comm_time_s\": %.9g,\n  \"comm_bytes\": %.9g,\n"
          "  \"paper_cost\": %.9g,\n  \"max_mem_bytes\": %.9g,\n  \"optimality\": ",
          p->dev.n_devices, L, p->step_time_s, p->compute_time_s, p->comm_time_s,
          p->comm_bytes, p->paper_cost, p->max_mem_bytes);
  json_string(out, p->optimality);
  fprintf(out, ",\n  \"bytes_priced\": ");
  json_string(out, p->bytes_priced);
  fprintf(out, ",\n  \"search_priced\": ");
  json_string(out, p->search_priced);
  fprintf(out, ",\n  \"device_mem_bytes\": [");
  for (int dv = 0; dv < p->dev.n_devices; dv++)
    fprintf(out, "%s%.9g", dv ? ", " : "", p->class_mem[p->dev_class[dv]]);
  /* What the partitioned program sends per device (passes/distribute.c):
   * the forward pass of inference and a training step, priced without the
   * pieces (over a thousand devices GPT-2 small's pieces took more than 6
   * GB). The distribution is scratch in the graph's arena, which printing
   * may grow. */
  ap_dist *dist;
  ap_diag dd = {0};
  if (ap_distribute_priced((ap_graph *)g, NULL, NULL, &dist, &dd) != AP_OK)
    return dd.status;
  fprintf(out, "],\n  \"device_forward_bytes\": [");
  for (int dv = 0; dv < p->dev.n_devices; dv++)
    fprintf(out, "%s%.0f", dv ? ", " : "", dist->fwd_bytes[dv]);
  fprintf(out, "],\n  \"device_step_bytes\": [");
  for (int dv = 0; dv < p->dev.n_devices; dv++)
    fprintf(out, "%s%.0f", dv ? ", " : "", dist->step_bytes[dv]);
  fprintf(out, "],\n  \"nodes\": [");
  /* Every node the plan reaches, in graph order: vertices with their types
   * or layouts, weightless chain nodes with the layout they carry. */
  int *vertex_of = calloc((size_t)g->n_nodes + 1, sizeof(int));
  int *chain_of = calloc((size_t)g->n_nodes + 1, sizeof(int));
  if (!vertex_of || !chain_of) {
    free(vertex_of);
    free(chain_of);
    return AP_ERR_NOMEM;
  }
  for (int v = 0; v < p->n_vertices; v++) {
    vertex_of[p->v[v].node] = v + 1;
    for (int k = 0; k < p->v[v].n_chain; k++) {
      vertex_of[p->v[v].chain[k].node] = v + 1;
      chain_of[p->v[v].chain[k].node] = k + 1;
    }
  }
  /* Each node's boxes, walked once for all devices (ap_plan_device_boxes):
   * walking the levels device by device took 88% of writing ResNet-152's
   * plan on 4096 devices. */
  ap_dbox *boxes = malloc(((size_t)p->dev.n_devices + 1) * sizeof *boxes);
  if (!boxes) {
    free(vertex_of);
    free(chain_of);
    return AP_ERR_NOMEM;
  }
  bool first = true;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!vertex_of[i])
      continue;
    int v = vertex_of[i] - 1;
    const ap_chain_op *op = chain_of[i] ? &p->v[v].chain[chain_of[i] - 1] : NULL;
    const ap_node *n = &g->nodes[i];
    fprintf(out, "%s\n    {\"name\": ", first ? "" : ",");
    first = false;
    json_string(out, n->name);
    fprintf(out, ", \"op\": ");
    json_string(out, n->op_type);
    if (!op) {
      fprintf(out, ", \"%s\": [", p->v[v].join ? "layouts" : "types");
      for (int l = 0; l < L; l++)
        fprintf(out, "%s\"%s\"", l ? ", " : "", ap_plan_state_name(p, v, l));
      fputc(']', out);
      /* Where a level's groups share by device count (the table's '='), so
       * that the plan reads back exactly. */
      bool by_count = false;
      for (int l = 0; l < L; l++)
        by_count |= p->state[(size_t)l * p->n_vertices + v] >= 3;
      for (int l = 0; by_count && l < L; l++)
        fprintf(out, "%s%s", l ? ", " : ", \"by_count\": [",
                p->state[(size_t)l * p->n_vertices + v] >= 3 ? "true" : "false");
      fprintf(out, "%s, \"time_s\": %.9g", by_count ? "]" : "", p->row_time_s[v]);
    } else {
      fprintf(out, ", \"carries\": ");
      json_string(out, g->nodes[p->v[v].node].name);
    }
    int value = op ? op->out_value : p->v[v].port[0].value;
    const ap_value *ov = &g->values[value], *pv = &g->values[p->v[v].port[0].value];
    fprintf(out, ",\n     \"output\": ");
    json_string(out, ov->name);
    if (!with_boxes) {
      fputc('}', out);
      continue;
    }
    fprintf(out, ", \"boxes\": [");
    ap_plan_device_boxes(p, g, v, 0, boxes);
    for (int dv = 0; dv < p->dev.n_devices; dv++) {
      int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK], olo[AP_MAX_RANK], ohi[AP_MAX_RANK];
      for (int d = 0; d < pv->rank; d++) {
        lo[d] = boxes[dv].lo[d];
        hi[d] = boxes[dv].hi[d];
      }
      for (int d = 0; d < ov->rank; d++) {
        olo[d] = op ? 0 : lo[d];
        ohi[d] = op ? ov->dims[d] : hi[d];
      }
      /* A chain node holds the slab of the vertex's output along the
       * dimensions it carries, scaled to its own size (Flatten's C to
       * C*H*W); the others whole. */
      for (int c = 0; op && c < 2; c++) {
        int d = p->v[v].port[0].dim[c], o = op->out_map[c];
        if (d < 0 || o < 0 || pv->dims[d] <= 0)
          continue;
        olo[o] = lo[d] * ov->dims[o] / pv->dims[d];
        ohi[o] = hi[d] * ov->dims[o] / pv->dims[d];
      }
      fprintf(out, "%s[", dv ? ", " : "");
      for (int d = 0; d < ov->rank; d++)
        fprintf(out, "%s[%lld, %lld]", d ? ", " : "", (long long)olo[d], (long long)ohi[d]);
      fputc(']', out);
    }
    fprintf(out, "]}");
  }
  free(boxes);
  free(vertex_of);
  free(chain_of);
  fprintf(out, "\n  ]\n}\n");
  return ferror(out) ? AP_ERR_IO : AP_OK;
}

ap_status ap_plan_print_json(const ap_graph *g, FILE *out) { return print_json(g, out, true); }

ap_status ap_plan_print_json_without_boxes(const ap_graph *g, FILE *out) {
  return print_json(g, out, false);
}
