/* Deterministic dumps of the IR: a readable text form for people and golden
 * files, and JSON for tools. Both print the same facts: every value with its
 * dtype and shape, every node with its attributes and, once planned, the
 * partition type chosen at each level. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "ir/ir.h"

enum { INLINE_ELEMS = 16 }; /* constants up to this size are printed in full */

static const char *kind_name(ap_value_kind k) {
  switch (k) {
  case AP_VAL_INPUT: return "input";
  case AP_VAL_WEIGHT: return "weight";
  case AP_VAL_CONST: return "const";
  case AP_VAL_NODE: return "node";
  }
  return "?";
}

static const char *type_name(uint8_t t) {
  static const char *const names[] = {"-", "I", "II", "III"};
  return t < 4 ? names[t] : "?";
}

/* Floats print with 9 significant digits: enough to round-trip a float32. */
static void print_float(FILE *out, double v, bool json) {
  if (isnan(v))
    fputs(json ? "\"nan\"" : "nan", out);
  else if (isinf(v))
    fputs(v > 0 ? (json ? "\"inf\"" : "inf") : (json ? "\"-inf\"" : "-inf"), out);
  else
    fprintf(out, "%.9g", v);
}

void ap_json_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

static void print_text_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      fprintf(out, "\\x%02x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

static void print_shape(FILE *out, const ap_value *v) {
  if (v->rank < 0) {
    fputs("[*]", out);
    return;
  }
  fputc('[', out);
  for (int i = 0; i < v->rank; i++) {
    if (i)
      fputc(',', out);
    if (v->dims[i] >= 0)
      fprintf(out, "%" PRId64, v->dims[i]);
    else if (v->sym[i])
      fputs(v->sym[i], out);
    else
      fputc('?', out);
  }
  fputc(']', out);
}

static void print_elems(FILE *out, const ap_tensor *t, bool json) {
  fputc('[', out);
  for (int64_t i = 0; i < t->numel; i++) {
    if (i)
      fputs(", ", out);
    if (t->dtype == AP_DT_STRING) {
      const char *s = ((const char *const *)t->data)[i];
      (json ? ap_json_string : print_text_string)(out, s, strlen(s));
    } else if (ap_dtype_is_float(t->dtype)) {
      print_float(out, ap_tensor_get_f64(t, i), json);
    } else if (t->dtype == AP_DT_UINT64) {
      fprintf(out, "%" PRIu64, ((const uint64_t *)t->data)[i]);
    } else if (ap_dtype_is_int(t->dtype) || t->dtype == AP_DT_BOOL) {
      fprintf(out, "%" PRId64, ap_tensor_get_i64(t, i));
    } else {
      fputs(json ? "null" : "?", out);
    }
  }
  fputc(']', out);
}

static bool printable_data(const ap_tensor *t) {
  return t->data && t->numel >= 0 && t->numel <= INLINE_ELEMS &&
         (t->dtype == AP_DT_STRING || ap_dtype_size(t->dtype) > 0) &&
         t->dtype != AP_DT_COMPLEX64 && t->dtype != AP_DT_COMPLEX128;
}

/* Small constants print in full, and so do small integer weights: those are
 * shape operands (Reshape targets, axes), not trainable parameters. */
static bool shows_data(const ap_value *v, const ap_tensor *t) {
  if (!printable_data(t))
    return false;
  return v->kind == AP_VAL_CONST || (v->kind == AP_VAL_WEIGHT && !ap_dtype_is_float(v->dtype));
}

static void print_tensor_text(FILE *out, const ap_tensor *t) {
  fprintf(out, "%s[", ap_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++)
    fprintf(out, "%s%" PRId64, i ? "," : "", t->dims[i]);
  fputc(']', out);
  if (printable_data(t)) {
    fputc(' ', out);
    print_elems(out, t, false);
  }
}

static void print_tensor_json(FILE *out, const ap_tensor *t) {
  fprintf(out, "{\"dtype\": \"%s\", \"shape\": [", ap_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++)
    fprintf(out, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  fputc(']', out);
  if (printable_data(t)) {
    fputs(", \"data\": ", out);
    print_elems(out, t, true);
  }
  fputc('}', out);
}

/* An attribute's value in either form: lists are comma-separated (with a
 * space in JSON), strings quoted by the form's own rules. */
static void print_attr_value(FILE *out, const ap_attr *a, bool json) {
  const char *sep = json ? ", " : ",";
  void (*print_string)(FILE *, const char *, size_t) = json ? ap_json_string : print_text_string;
  void (*print_tensor)(FILE *, const ap_tensor *) = json ? print_tensor_json : print_tensor_text;
  switch (a->type) {
  case AP_ATTR_INT: fprintf(out, "%" PRId64, a->i); break;
  case AP_ATTR_FLOAT: print_float(out, a->f, json); break;
  case AP_ATTR_STRING: print_string(out, a->s, a->s_len); break;
  case AP_ATTR_INTS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++)
      fprintf(out, "%s%" PRId64, i ? sep : "", a->ints[i]);
    fputc(']', out);
    break;
  case AP_ATTR_FLOATS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) {
      fputs(i ? sep : "", out);
      print_float(out, a->floats[i], json);
    }
    fputc(']', out);
    break;
  case AP_ATTR_STRINGS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) {
      fputs(i ? sep : "", out);
      print_string(out, a->strings[i], strlen(a->strings[i]));
    }
    fputc(']', out);
    break;
  case AP_ATTR_TENSOR:
    if (a->t)
      print_tensor(out, a->t);
    else if (json)
      fputs("null", out);
    break;
  case AP_ATTR_TENSORS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) {
      fputs(i ? ", " : "", out);
      print_tensor(out, &a->t[i]);
    }
    fputc(']', out);
    break;
  default: fputs(json ? "\"<graph>\"" : "<graph>", out); break;
  }
}



/* Attributes print sorted by name, whatever order the exporter used. */
static const ap_attr **sorted_attrs(const ap_graph *g, const ap_node *n) {
  const ap_attr **s = ap_arena_array(g->arena, (size_t)n->n_attr + 1, sizeof *s);
  if (!s)
    return NULL;
  for (int i = 0; i < n->n_attr; i++) {
    int j = i;
    while (j > 0 && strcmp(s[j - 1]->name, n->attr[i].name) > 0) {
      s[j] = s[j - 1];
      j--;
    }
    s[j] = &n->attr[i];
  }
  return s;
}

static void print_value_text(FILE *out, const ap_value *v) {
  fprintf(out, "%%%s: %s", v->name, ap_dtype_name(v->dtype));
  print_shape(out, v);
}

ap_status ap_dump_text(const ap_graph *g, FILE *out) {
  fprintf(out, "graph ");
  print_text_string(out, g->name, strlen(g->name));
  fprintf(out, " ir_version=%" PRId64 " opset=%" PRId64 "\n", g->ir_version, g->opset);
  for (int i = 0; i < g->n_rebatched; i++)
    fprintf(out, "rebatched %s\n", g->rebatched[i]);
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    if (v->kind != AP_VAL_INPUT)
      continue;
    fputs("input  ", out);
    print_value_text(out, v);
    fputc('\n', out);
  }
  for (int i = 0; i < g->n_values; i++) {
    const ap_value *v = &g->values[i];
    if (v->kind != AP_VAL_WEIGHT && v->kind != AP_VAL_CONST)
      continue;
    fprintf(out, "%-6s ", kind_name(v->kind));
    print_value_text(out, v);
    ap_tensor t = ap_value_tensor(v);
    if (shows_data(v, &t)) {
      fputs(" = ", out);
      print_elems(out, &t, false);
    }
    fputc('\n', out);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    fprintf(out, "node   %s = %s%s%s(", n->name, *n->domain ? n->domain : "",
            *n->domain ? "::" : "", n->op_type);
    for (int k = 0; k < n->n_in; k++)
      fprintf(out, "%s%%%s", k ? ", " : "", n->in[k] >= 0 ? g->values[n->in[k]].name : "");
    fputc(')', out);
    const ap_attr **attrs = sorted_attrs(g, n);
    if (n->n_attr && attrs) {
      fputs(" {", out);
      for (int k = 0; k < n->n_attr; k++) {
        if (k)
          fputs(", ", out);
        fprintf(out, "%s=", attrs[k]->name);
        print_attr_value(out, attrs[k], false);
      }
      fputc('}', out);
    }
    if (n->n_types) {
      fputs(" types=[", out);
      for (int k = 0; k < n->n_types; k++)
        fprintf(out, "%s%s", k ? "," : "", type_name(n->types[k]));
      fputc(']', out);
    }
    fputc('\n', out);
    for (int k = 0; k < n->n_out; k++) {
      if (n->out[k] < 0)
        continue;
      fputs("         -> ", out);
      print_value_text(out, &g->values[n->out[k]]);
      fputc('\n', out);
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    fputs("output ", out);
    print_value_text(out, &g->values[g->outputs[i]]);
    fputc('\n', out);
  }
  return ferror(out) ? AP_ERR_IO : AP_OK;
}

/* ---- JSON ---- */



static void print_shape_json(FILE *out, const ap_value *v) {
  if (v->rank < 0) {
    fputs("null", out);
    return;
  }
  fputc('[', out);
  for (int i = 0; i < v->rank; i++) {
    if (i)
      fputs(", ", out);
    if (v->dims[i] >= 0)
      fprintf(out, "%" PRId64, v->dims[i]);
    else if (v->sym[i])
      ap_json_string(out, v->sym[i], strlen(v->sym[i]));
    else
      fputs("null", out);
  }
  fputc(']', out);
}

static void print_name_list_json(FILE *out, const ap_graph *g, const int *ids, int n) {
  fputc('[', out);
  for (int i = 0; i < n; i++) {
    if (i)
      fputs(", ", out);
    const char *name = ids[i] >= 0 ? g->values[ids[i]].name : "";
    ap_json_string(out, name, strlen(name));
  }
  fputc(']', out);
}

ap_status ap_dump_json(const ap_graph *g, FILE *out) {
  fputs("{\n  \"graph\": ", out);
  ap_json_string(out, g->name, strlen(g->name));
  fprintf(out, ",\n  \"ir_version\": %" PRId64 ",\n  \"opset\": %" PRId64 ",\n", g->ir_version,
          g->opset);
  fputs("  \"inputs\": ", out);
  print_name_list_json(out, g, g->inputs, g->n_inputs);
  fputs(",\n  \"outputs\": ", out);
  print_name_list_json(out, g, g->outputs, g->n_outputs);
  fputs(",\n  \"values\": [", out);
  for (int i = 0; i < g->n_values; i++) {
    const ap_value *v = &g->values[i];
    fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", out);
    ap_json_string(out, v->name, strlen(v->name));
    fprintf(out, ", \"kind\": \"%s\", \"dtype\": \"%s\", \"shape\": ", kind_name(v->kind),
            ap_dtype_name(v->dtype));
    print_shape_json(out, v);
    ap_tensor t = ap_value_tensor(v);
    if (shows_data(v, &t)) {
      fputs(", \"data\": ", out);
      print_elems(out, &t, true);
    }
    fputc('}', out);
  }
  fputs("\n  ],\n  \"nodes\": [", out);
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", out);
    ap_json_string(out, n->name, strlen(n->name));
    fputs(", \"op\": ", out);
    ap_json_string(out, n->op_type, strlen(n->op_type));
    if (*n->domain) {
      fputs(", \"domain\": ", out);
      ap_json_string(out, n->domain, strlen(n->domain));
    }
    fputs(", \"inputs\": ", out);
    print_name_list_json(out, g, n->in, n->n_in);
    fputs(", \"outputs\": ", out);
    print_name_list_json(out, g, n->out, n->n_out);
    fputs(", \"attrs\": {", out);
    const ap_attr **attrs = sorted_attrs(g, n);
    for (int k = 0; attrs && k < n->n_attr; k++) {
      if (k)
        fputs(", ", out);
      ap_json_string(out, attrs[k]->name, strlen(attrs[k]->name));
      fputs(": ", out);
      print_attr_value(out, attrs[k], true);
    }
    fputc('}', out);
    if (n->n_types) {
      fputs(", \"types\": [", out);
      for (int k = 0; k < n->n_types; k++)
        fprintf(out, "%s\"%s\"", k ? ", " : "", type_name(n->types[k]));
      fputc(']', out);
    }
    fputc('}', out);
  }
  fputs("\n  ]\n}\n", out);
  return ferror(out) ? AP_ERR_IO : AP_OK;
}
