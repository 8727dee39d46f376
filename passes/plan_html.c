/* The plan as one self-contained HTML page (accparc plan --format html): a
 * summary, the plan's table (one row per layer or join, one column per
 * level, coloured by type), the bytes each device sends (forward pass and
 * training step, passes/distribute.c) and its memory as inline SVG bar
 * charts, and each device's box of the largest activations drawn dimension
 * by dimension. No script, no stylesheet or font from elsewhere: the page
 * reads the same offline. */
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"

enum { N_LARGEST = 6,     /* activations whose boxes are drawn */
       CHART_W = 420,     /* px: the longest bar */
       LABEL_W = 150,     /* px: the labels left of the bars */
       ROW_H = 22 };      /* px: one bar */

/* Colours of the charts' two series (the types' are in the stylesheet). */
static const char *const series_fill[2] = {"#3d85c6", "#e69138"};

static void html_text(FILE *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '&': fputs("&amp;", out); break;
    case '"': fputs("&quot;", out); break;
    default: fputc(*s, out);
    }
  }
}

static void html_shape(FILE *out, const ap_value *v) {
  for (int d = 0; d < v->rank; d++)
    fprintf(out, "%s%lld", d ? "&#215;" : "", (long long)v->dims[d]);
  if (v->rank <= 0)
    fputs("scalar", out);
}

/* Device d's kind (devices are numbered kind by kind). */
static const char *device_kind(const ap_plan *p, int d) {
  for (int k = 0; k < p->dev.n_kinds; k++) {
    if (d < p->dev.kinds[k].count)
      return p->dev.kinds[k].name;
    d -= p->dev.kinds[k].count;
  }
  return "?";
}

/* A horizontal bar chart: one group of n_series bars per device, each bar
 * labelled with its value; values[s * n_dev + d]. */
static void bar_chart(FILE *out, const ap_plan *p, const char *title, int n_series,
                      const char *const *series, const double *values, const char *unit) {
  int n_dev = p->dev.n_devices;
  double max = 0;
  for (int i = 0; i < n_series * n_dev; i++)
    max = values[i] > max ? values[i] : max;
  int group_h = n_series * ROW_H + 8, legend_h = 24;
  int height = legend_h + n_dev * group_h, width = LABEL_W + CHART_W + 170;
  fprintf(out, "<svg class=\"chart\" role=\"img\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>",
          width, height, width, height);
  html_text(out, title);
  fputs("</title>\n", out);
  for (int s = 0; s < n_series; s++)
    fprintf(out, "<rect x=\"%d\" y=\"4\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                 "<text x=\"%d\" y=\"15\">%s</text>\n",
            LABEL_W + 180 * s, series_fill[s], LABEL_W + 180 * s + 16, series[s]);
  for (int d = 0; d < n_dev; d++) {
    int y0 = legend_h + d * group_h;
    fprintf(out, "<text x=\"0\" y=\"%d\">device %d (%s)</text>\n", y0 + ROW_H - 6, d,
            device_kind(p, d));
    for (int s = 0; s < n_series; s++) {
      double v = values[s * n_dev + d];
      int w = max > 0 ? (int)(CHART_W * v / max + 0.5) : 0;
      int y = y0 + s * ROW_H;
      fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"%d\">%.0f %s</text>\n",
              LABEL_W, y + 2, w, ROW_H - 4, series_fill[s], LABEL_W + w + 6, y + ROW_H - 6, v,
              unit);
    }
  }
  fputs("</svg>\n", out);
}

/* Each device's box of value v: one row per device, one bar per dimension
 * showing the index range [lo, hi) the device holds of it. */
static void box_chart(FILE *out, const ap_plan *p, const ap_graph *g, const ap_dist *dist, int v) {
  const ap_value *val = &g->values[v];
  int n_dev = p->dev.n_devices, rank = val->rank > 0 ? val->rank : 1;
  int dim_w = (CHART_W + 120) / rank;
  int height = 22 + n_dev * ROW_H, width = LABEL_W + rank * dim_w;
  fprintf(out, "<svg class=\"boxes\" role=\"img\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>boxes of ",
          width, height, width, height);
  html_text(out, val->name);
  fputs("</title>\n", out);
  for (int k = 0; k < rank && val->rank > 0; k++)
    fprintf(out, "<text x=\"%d\" y=\"14\">dim %d: %lld</text>\n", LABEL_W + k * dim_w, k,
            (long long)val->dims[k]);
  for (int d = 0; d < n_dev; d++) {
    ap_dbox held = ap_dist_held(g, dist, v, d);
    const ap_dbox *b = &held;
    int y = 22 + d * ROW_H;
    fprintf(out, "<text x=\"0\" y=\"%d\">device %d</text>\n", y + ROW_H - 8, d);
    if (ap_dbox_volume(val->rank, b) == 0) {
      fprintf(out, "<text x=\"%d\" y=\"%d\" fill=\"#999999\">holds none of it</text>\n",
              LABEL_W, y + ROW_H - 8);
      continue;
    }
    for (int k = 0; k < val->rank; k++) {
      int x0 = LABEL_W + k * dim_w, w = dim_w - 12;
      double n = val->dims[k] > 0 ? (double)val->dims[k] : 1;
      int lo = (int)(w * (double)b->lo[k] / n), hi = (int)(w * (double)b->hi[k] / n + 0.5);
      fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f3f3f3\" "
                   "stroke=\"#cccccc\"/>",
              x0, y + 2, w, ROW_H - 6);
      fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>"
                   "[%lld, %lld)</title></rect>\n",
              x0 + lo, y + 2, hi - lo > 1 ? hi - lo : 1, ROW_H - 6, series_fill[d % 2],
              (long long)b->lo[k], (long long)b->hi[k]);
    }
  }
  fputs("</svg>\n<table class=\"boxes\"><tr><th>device</th><th>box</th><th>elements</th></tr>\n",
        out);
  for (int d = 0; d < n_dev; d++) {
    ap_dbox held = ap_dist_held(g, dist, v, d);
    const ap_dbox *b = &held;
    fprintf(out, "<tr><td>%d (%s)</td><td>", d, device_kind(p, d));
    for (int k = 0; k < val->rank; k++)
      fprintf(out, "%s[%lld, %lld)", k ? " &#215; " : "", (long long)b->lo[k],
              (long long)b->hi[k]);
    fprintf(out, "</td><td>%lld</td></tr>\n", (long long)ap_dbox_volume(val->rank, b));
  }
  fputs("</table>\n", out);
}

/* The N_LARGEST largest values nodes compute (ties: the first computed). */
static int largest_values(const ap_graph *g, int *pick) {
  int n = 0;
  for (int v = 0; v < g->n_values; v++) {
    const ap_value *val = &g->values[v];
    if (val->producer < 0 || val->data || val->rank < 0 || g->nodes[val->producer].dead)
      continue;
    int64_t vol = ap_numel(val->rank, val->dims);
    int at = n < N_LARGEST ? n++ : N_LARGEST;
    while (at > 0 && ap_numel(g->values[pick[at - 1]].rank, g->values[pick[at - 1]].dims) < vol) {
      if (at < N_LARGEST)
        pick[at] = pick[at - 1];
      at--;
    }
    if (at < N_LARGEST)
      pick[at] = v;
  }
  return n;
}

ap_status ap_plan_print_html(const ap_graph *g, FILE *out) {
  const ap_plan *p = g->plan;
  if (!p)
    return AP_ERR_USAGE;
  int L = p->n_levels, n_dev = p->dev.n_devices;
  ap_dist *dist;
  ap_diag dd = {0};
  /* Scratch in the graph's arena and without the pieces, as for the JSON. */
  if (ap_distribute_priced((ap_graph *)g, NULL, NULL, &dist, &dd) != AP_OK)
    return dd.status;
  double *values = calloc((size_t)n_dev * 2 + 1, sizeof(double));
  if (!values)
    return AP_ERR_NOMEM;

  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>accpar plan: ",
        out);
  html_text(out, g->path);
  fputs("</title>\n<style>\n"
        "body { font-family: sans-serif; margin: 2em; color: #222; }\n"
        "table { border-collapse: collapse; margin: 0.5em 0 1.5em; }\n"
        "td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }\n"
        "td.num { text-align: right; font-variant-numeric: tabular-nums; }\n"
        "td.t1 { background: #cfe2f3; } td.t2 { background: #fce5cd; }\n"
        "td.t3 { background: #d9ead3; } td.join { background: #eeeeee; }\n"
        "svg text { font-family: sans-serif; font-size: 12px; }\n"
        ".device { display: inline-block; vertical-align: top; }\n"
        "</style>\n</head>\n<body>\n<h1>Plan of ",
        out);
  html_text(out, g->path);
  fprintf(out, "</h1>\n<p id=\"summary\">Strategy <b>%s</b> on <b>", ap_strategy_name(p->opts.strategy));
  for (int k = 0; k < p->dev.n_kinds; k++) {
    fputs(k ? "," : "", out);
    html_text(out, p->dev.kinds[k].name);
    fprintf(out, ":%d", p->dev.kinds[k].count);
  }
  fprintf(out, "</b> (%d devices, %d levels): predicted step time %.4g s (compute %.4g s, "
               "communication %.4g s), %.0f bytes sent per training step by the cost model, "
               "optimality %s.</p>\n",
          n_dev, L, p->step_time_s, p->compute_time_s, p->comm_time_s, p->comm_bytes,
          p->optimality);

  fputs("<h2>Layers</h2>\n<p>Types: I splits the batch, II the input features, III the output "
        "features; joins: b, f split dimension 0 or 1, r replicates.</p>\n"
        "<table id=\"plan\"><tr><th>node</th><th>op</th>",
        out);
  for (int l = 0; l < L; l++)
    fprintf(out, "<th>L%d</th>", l);
  fputs("<th>time (s)</th></tr>\n", out);
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_node *n = &g->nodes[p->v[v].node];
    fputs("<tr><td>", out);
    html_text(out, n->name);
    fputs("</td><td>", out);
    html_text(out, n->op_type);
    fputs("</td>", out);
    for (int l = 0; l < L; l++) {
      int s = p->state[(size_t)l * p->n_vertices + v] % 3;
      if (p->v[v].join)
        fprintf(out, "<td class=\"join\">%s</td>", ap_plan_state_name(p, v, l));
      else
        fprintf(out, "<td class=\"t%d\">%s</td>", s + 1, ap_plan_state_name(p, v, l));
    }
    fprintf(out, "<td class=\"num\">%.4g</td></tr>\n", p->row_time_s[v]);
  }
  fputs("</table>\n", out);

  static const char *const bytes_series[2] = {"forward pass", "training step"};
  for (int d = 0; d < n_dev; d++) {
    values[d] = dist->fwd_bytes[d];
    values[n_dev + d] = dist->step_bytes[d];
  }
  fputs("<h2>Bytes sent per device</h2>\n<p>What the partitioned program sends, device by "
        "device (the runtime's <code>bytes_sent</code>).</p>\n",
        out);
  bar_chart(out, p, "bytes sent per device", 2, bytes_series, values, "B");
  static const char *const mem_series[1] = {"weights, gradients and kept activations"};
  for (int d = 0; d < n_dev; d++)
    values[d] = p->class_mem[p->dev_class[d]];
  fputs("<h2>Memory per device</h2>\n", out);
  bar_chart(out, p, "memory per device", 1, mem_series, values, "B");

  int pick[N_LARGEST];
  int n_pick = largest_values(g, pick);
  fprintf(out, "<h2>Boxes of the %d largest activations</h2>\n<p>The index range each device "
               "holds of every dimension.</p>\n",
          n_pick);
  for (int i = 0; i < n_pick; i++) {
    const ap_value *val = &g->values[pick[i]];
    fputs("<h3>", out);
    html_text(out, val->name);
    fputs(" <small>", out);
    html_shape(out, val);
    fprintf(out, " (%lld elements)</small></h3>\n", (long long)ap_numel(val->rank, val->dims));
    box_chart(out, p, g, dist, pick[i]);
  }
  fputs("</body>\n</html>\n", out);
  free(values);
  return ferror(out) ? AP_ERR_IO : AP_OK;
}
