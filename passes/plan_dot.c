/* The plan as a Graphviz graph (accparc plan --format dot): one node per
 * operator, coloured by its partition type at the top level and labelled
 * with its type at every level; joins (weightless nodes meeting several
 * activations) as hexagons with their layouts; the weightless nodes that
 * carry a layer's layout in grey; every edge labelled with the value it
 * carries and the bytes the partitioned program sends for it in the forward
 * pass (passes/distribute.c, the same bytes the runtime counts), drawn red
 * when it moves any. A node whose partial sums are resolved after it says
 * so, with the bytes. */
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"

/* Fill colours by type at level 0: I, II, III. */
static const char *const type_fill[3] = {"#cfe2f3", "#fce5cd", "#d9ead3"};

/* s inside a DOT double-quoted string. */
static void dot_text(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc('\\', out);
    if (*s == '\n')
      fputs("\\n", out);
    else
      fputc(*s, out);
  }
}

static void dot_shape(FILE *out, const ap_value *v) {
  if (v->rank < 0) {
    fputs("?", out);
    return;
  }
  for (int d = 0; d < v->rank; d++)
    fprintf(out, "%s%lld", d ? "x" : "", (long long)v->dims[d]);
  if (v->rank == 0)
    fputs("scalar", out);
}

/* The bytes transfer t sends over all devices (box: the node's output boxes,
 * for an all-reduce of partial sums). */
static double xfer_bytes(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box, int n_dev,
                         double *scratch) {
  memset(scratch, 0, sizeof *scratch * (size_t)n_dev);
  ap_dxfer_charge(g, t, box, n_dev, scratch);
  double sum = 0;
  for (int d = 0; d < n_dev; d++)
    sum += scratch[d];
  return sum;
}

ap_status ap_plan_print_dot(const ap_graph *g, FILE *out) {
  const ap_plan *p = g->plan;
  if (!p)
    return AP_ERR_USAGE;
  int L = p->n_levels, n_dev = p->dev.n_devices;
  ap_dist *dist;
  ap_diag dd = {0};
  /* Scratch in the graph's arena and without the pieces, as for the JSON. */
  if (ap_distribute_priced((ap_graph *)g, NULL, NULL, &dist, &dd) != AP_OK)
    return dd.status;
  int *vertex_of = calloc((size_t)g->n_nodes + 1, sizeof(int));
  int *carrier_of = calloc((size_t)g->n_nodes + 1, sizeof(int));
  double *scratch = calloc((size_t)n_dev, sizeof(double));
  if (!vertex_of || !carrier_of || !scratch) {
    free(vertex_of);
    free(carrier_of);
    free(scratch);
    return AP_ERR_NOMEM;
  }
  for (int v = 0; v < p->n_vertices; v++) {
    vertex_of[p->v[v].node] = v + 1;
    for (int k = 0; k < p->v[v].n_chain; k++)
      carrier_of[p->v[v].chain[k].node] = v + 1;
  }

  fputs("digraph plan {\n  graph [label=\"", out);
  dot_text(out, g->path);
  fprintf(out, "\\n%s on ", ap_strategy_name(p->opts.strategy));
  for (int k = 0; k < p->dev.n_kinds; k++)
    fprintf(out, "%s%s:%d", k ? "," : "", p->dev.kinds[k].name, p->dev.kinds[k].count);
  fprintf(out, " (%d devices, %d levels): step %.4g s, forward bytes", n_dev, L, p->step_time_s);
  for (int d = 0; d < n_dev; d++)
    fprintf(out, "%s%.0f", d ? " / " : " ", dist->fwd_bytes[d]);
  fputs("\", labelloc=t, fontname=\"Helvetica\", rankdir=TB];\n"
        "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", "
        "fontsize=11];\n"
        "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#666666\"];\n",
        out);

  /* Graph inputs fed at run time, then the nodes in graph order. */
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    if (v->kind != AP_VAL_INPUT)
      continue;
    fprintf(out, "  v%d [shape=ellipse, style=solid, label=\"", g->inputs[i]);
    dot_text(out, v->name);
    fputs("\\n", out);
    dot_shape(out, v);
    fputs("\"];\n", out);
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead)
      continue;
    fprintf(out, "  n%d [label=\"", ni);
    dot_text(out, n->name);
    fputs("\\n", out);
    dot_text(out, n->op_type);
    int vx = vertex_of[ni] - 1;
    if (vx >= 0) {
      fputs(p->v[vx].join ? "\\njoin" : "\\n", out);
      for (int l = 0; l < L; l++)
        fprintf(out, "%sL%d:%s", l || p->v[vx].join ? " " : "", l, ap_plan_state_name(p, vx, l));
    } else if (carrier_of[ni]) {
      fputs("\\ncarries ", out);
      dot_text(out, g->nodes[p->v[carrier_of[ni] - 1].node].name);
    }
    const ap_dnode *dn = &dist->node[ni];
    if (dn->reduce)
      fprintf(out, "\\n%s partial sums: %.0f B",
              dn->reduce->kind == AP_DX_ALLREDUCE    ? "all-reduce"
              : dn->reduce->kind == AP_DX_OWNER_REDUCE ? "owner-reduce"
                                                       : "reduce",
              xfer_bytes(g, dn->reduce, dn->out[0], n_dev, scratch));
    fputs("\"", out);
    if (vx >= 0 && p->v[vx].join)
      fputs(", shape=hexagon, style=filled, fillcolor=\"#eeeeee\"", out);
    else if (vx >= 0)
      fprintf(out, ", fillcolor=\"%s\"", type_fill[p->state[vx] % 3]);
    else if (carrier_of[ni])
      fputs(", style=rounded, color=\"#999999\", fontcolor=\"#555555\"", out);
    fputs("];\n", out);
  }

  /* Edges: every activation a node reads, with the bytes sent for it. */
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead)
      continue;
    for (int i = 0; i < n->n_in; i++) {
      int v = n->in[i];
      if (v < 0 || g->values[v].data)
        continue;
      const ap_value *val = &g->values[v];
      if (val->producer >= 0)
        fprintf(out, "  n%d -> n%d", val->producer, ni);
      else if (val->kind == AP_VAL_INPUT)
        fprintf(out, "  v%d -> n%d", v, ni);
      else
        continue;
      const ap_dxfer *t = dist->node[ni].xfer_in ? dist->node[ni].xfer_in[i] : NULL;
      double bytes = t ? xfer_bytes(g, t, NULL, n_dev, scratch) : 0;
      fputs(" [label=\"", out);
      dot_text(out, val->name);
      fputs("\\n", out);
      dot_shape(out, val);
      fprintf(out, "\\n%.0f B\"%s];\n", bytes,
              bytes > 0 ? ", color=\"#cc0000\", fontcolor=\"#cc0000\", penwidth=2" : "");
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const ap_value *v = &g->values[g->outputs[i]];
    fprintf(out, "  out%d [shape=ellipse, style=solid, label=\"", i);
    dot_text(out, v->name);
    fputs("\\n", out);
    dot_shape(out, v);
    fputs("\"];\n", out);
    if (v->producer >= 0)
      fprintf(out, "  n%d -> out%d;\n", v->producer, i);
  }
  fputs("}\n", out);
  free(vertex_of);
  free(carrier_of);
  free(scratch);
  return ferror(out) ? AP_ERR_IO : AP_OK;
}
