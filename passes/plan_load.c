/* A plan read back (accparc plan/export/compile --plan FILE.json): the JSON
 * that ap_plan_print_json writes. The file's devices, strategy and cost are
 * taken as they are; every layer's type and every join's layout at every
 * level as the file gives them (ap_partition_fixed; the ratios are the cost
 * model's, as the search would choose them); then the file's boxes, where
 * a node has them (a plan edited by hand may drop them), are checked: in
 * bounds, covering every dimension of each value between the devices, and
 * equal to the boxes the types give. Anything else is refused in one line
 * naming the node and the level. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"

/* ---- a small JSON reader, into the graph's arena ---- */

/* J_NUMS: an array of numbers alone, kept as the numbers (nums); a reader
 * wanting an array of values refuses it as not J_ARR. */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_NUMS, J_OBJ } jkind;

/* A plan on thousands of devices holds millions of numbers (every device's
 * box of every node): a value is kept small, an array's items without keys,
 * and an array of numbers alone as the numbers (J_NUMS, read through jnum). */
typedef struct jval {
  jkind kind;
  int n; /* array items or object members */
  union {
    double num;      /* J_NUM, J_BOOL */
    const char *str; /* J_STR */
  };
  union {
    struct jval **item; /* [n] */
    double *nums;       /* [n], J_NUMS */
  };
  const char **key; /* [n], objects; NULL for an array */
} jval;

typedef struct jreader {
  const char *s, *at;
  ap_arena *a;
  const char *error; /* the first problem, or NULL */
} jreader;

static void skip_space(jreader *r) {
  while (*r->at == ' ' || *r->at == '\n' || *r->at == '\t' || *r->at == '\r')
    r->at++;
}

static jval *jfail(jreader *r, const char *what) {
  if (!r->error)
    r->error = what;
  return NULL;
}

static jval *jnew(jreader *r, jkind k) {
  jval *v = ap_arena_alloc(r->a, sizeof *v);
  if (!v)
    return jfail(r, "out of memory");
  v->kind = k;
  return v;
}

static const char *jstring(jreader *r) {
  r->at++; /* the opening quote */
  const char *start = r->at;
  size_t len = 0;
  for (const char *p = start; *p != '"'; p++, len++) {
    if (!*p || (unsigned char)*p < 0x20)
      return (const char *)jfail(r, "an unterminated string");
    if (*p == '\\' && !*++p)
      return (const char *)jfail(r, "an unterminated string");
  }
  char *out = ap_arena_alloc(r->a, len + 1), *o = out;
  if (!out)
    return (const char *)jfail(r, "out of memory");
  while (*r->at != '"') {
    char c = *r->at++;
    if (c == '\\') {
      c = *r->at++;
      switch (c) {
      case 'n': c = '\n'; break;
      case 't': c = '\t'; break;
      case 'r': c = '\r'; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case 'u': {
        unsigned code = 0;
        for (int i = 0; i < 4; i++, r->at++) {
          char h = *r->at;
          int x = h >= '0' && h <= '9' ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (x < 0)
            return (const char *)jfail(r, "a bad \\u escape");
          code = code * 16 + (unsigned)x;
        }
        if (code >= 0x80) /* names accpar writes are ASCII; the rest is kept as '?' */
          code = '?';
        c = (char)code;
        break;
      }
      default: break; /* \" \\ \/ */
      }
    }
    *o++ = c;
  }
  r->at++;
  *o = 0;
  return out;
}

static bool jnumber(jreader *r, double *out) {
  char *end;
  errno = 0;
  *out = strtod(r->at, &end);
  if (end == r->at || errno) {
    jfail(r, "a value that is not JSON");
    return false;
  }
  r->at = end;
  return true;
}

/* Array v's numbers so far as values of their own: an item that is not a
 * number came. */
static bool jnums_to_items(jreader *r, jval *v, int cap) {
  jval **items = ap_arena_array_uncleared(r->a, (size_t)cap, sizeof *items);
  if (!items) {
    jfail(r, "out of memory");
    return false;
  }
  for (int i = 0; i < v->n; i++) {
    if (!(items[i] = jnew(r, J_NUM)))
      return false;
    items[i]->num = v->nums[i];
  }
  v->kind = J_ARR;
  v->item = items;
  return true;
}

static jval *jparse(jreader *r, int depth) {
  skip_space(r);
  if (depth > 64)
    return jfail(r, "nesting too deep");
  char c = *r->at;
  if (c == '{' || c == '[') {
    bool obj = c == '{';
    jval *v = jnew(r, obj ? J_OBJ : J_ARR);
    int cap = 0;
    r->at++;
    skip_space(r);
    if (*r->at == (obj ? '}' : ']')) {
      r->at++;
      return v;
    }
    if (v && !obj)
      v->kind = J_NUMS; /* until an item that is not a number */
    while (v) {
      skip_space(r);
      const char *key = NULL;
      if (obj) {
        if (*r->at != '"')
          return jfail(r, "an object key that is not a string");
        if (!(key = jstring(r)))
          return NULL;
        skip_space(r);
        if (*r->at++ != ':')
          return jfail(r, "a missing ':'");
      }
      bool number = v->kind == J_NUMS && (*r->at == '-' || (*r->at >= '0' && *r->at <= '9'));
      double num = 0;
      jval *item = NULL;
      if (number ? !jnumber(r, &num) : !(item = jparse(r, depth + 1)))
        return NULL;
      if (v->n == cap) { /* from 2: a box's [lo, hi] fits exactly */
        cap = cap ? 2 * cap : 2;
        void *items = ap_arena_array_uncleared(
            r->a, (size_t)cap, v->kind == J_NUMS ? sizeof *v->nums : sizeof *v->item);
        const char **keys = obj ? ap_arena_array_uncleared(r->a, (size_t)cap, sizeof *keys)
                                : NULL;
        if (!items || (obj && !keys))
          return jfail(r, "out of memory");
        if (v->n) {
          memcpy(items, v->kind == J_NUMS ? (void *)v->nums : (void *)v->item,
                 (v->kind == J_NUMS ? sizeof *v->nums : sizeof *v->item) * (size_t)v->n);
          if (obj)
            memcpy(keys, v->key, sizeof *keys * (size_t)v->n);
        }
        if (v->kind == J_NUMS)
          v->nums = items;
        else
          v->item = items;
        v->key = keys;
      }
      if (!number && v->kind == J_NUMS && !jnums_to_items(r, v, cap))
        return NULL;
      if (obj)
        v->key[v->n] = key;
      if (number)
        v->nums[v->n++] = num;
      else
        v->item[v->n++] = item;
      skip_space(r);
      if (*r->at == ',') {
        r->at++;
        continue;
      }
      if (*r->at++ != (obj ? '}' : ']'))
        return jfail(r, obj ? "a missing ',' or '}'" : "a missing ',' or ']'");
      return v;
    }
    return NULL;
  }
  if (c == '"') {
    jval *v = jnew(r, J_STR);
    if (v && !(v->str = jstring(r)))
      return NULL;
    return v;
  }
  static const struct { const char *word; jkind kind; double num; } words[] = {
      {"null", J_NULL, 0}, {"true", J_BOOL, 1}, {"false", J_BOOL, 0}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strncmp(r->at, words[i].word, strlen(words[i].word)) == 0) {
      r->at += strlen(words[i].word);
      jval *v = jnew(r, words[i].kind);
      if (v)
        v->num = words[i].num;
      return v;
    }
  double num;
  if (!jnumber(r, &num))
    return NULL;
  jval *v = jnew(r, J_NUM);
  if (v)
    v->num = num;
  return v;
}

/* Item i of array a as a number, into *out; false if it is not one. */
static bool jnum(const jval *a, int i, double *out) {
  if (a->kind == J_NUMS)
    *out = a->nums[i];
  else if (a->kind == J_ARR && a->item[i]->kind == J_NUM)
    *out = a->item[i]->num;
  else
    return false;
  return true;
}

static const jval *member(const jval *obj, const char *key) {
  for (int i = 0; obj && obj->kind == J_OBJ && i < obj->n; i++)
    if (strcmp(obj->key[i], key) == 0)
      return obj->item[i];
  return NULL;
}

/* ---- the plan ---- */

typedef struct loader {
  ap_graph *g;
  const char *file;
  ap_diag *d;
} loader;

static ap_status bad(const loader *x, const ap_node *n, const char *what) {
  return ap_error(x->d, AP_ERR_INVALID, x->file, n ? n->name : NULL, n ? n->op_type : NULL,
                  "%s", what);
}

static ap_status read_devices(const loader *x, const jval *list, ap_devices *dv) {
  memset(dv, 0, sizeof *dv);
  if (!list || list->kind != J_ARR || list->n < 1 || list->n > AP_MAX_KINDS)
    return bad(x, NULL, "\"devices\" must list 1 to 8 kinds of device");
  for (int k = 0; k < list->n; k++) {
    const jval *kind = member(list->item[k], "kind"), *count = member(list->item[k], "count");
    ap_device_kind *dk = &dv->kinds[k];
    if (!kind || kind->kind != J_STR || !count || count->kind != J_NUM || count->num < 1 ||
        count->num > 1e6 || count->num != floor(count->num) ||
        strlen(kind->str) >= sizeof dk->name)
      return bad(x, NULL, "every device needs a \"kind\" name and a positive integer \"count\"");
    strcpy(dk->name, kind->str);
    dk->count = (int)count->num;
    /* Plans written before the transcendentals, the convolutions' lowering,
     * the GEMMs' packing and Winograd were priced lack those figures: 0, as
     * in a device file. */
#define FIGURE(f, required) {#f, &dk->f, required},
    struct { const char *key; double *field; bool required; } figures[] = {
        AP_DEVICE_FIGURES(FIGURE)};
#undef FIGURE
    for (size_t f = 0; f < sizeof figures / sizeof figures[0]; f++) {
      const jval *num = member(list->item[k], figures[f].key);
      if ((num || figures[f].required) &&
          (!num || num->kind != J_NUM || !(num->num >= 0) || isinf(num->num)))
        return ap_error(x->d, AP_ERR_INVALID, x->file, NULL, NULL,
                        "device kind '%s' has no number \"%s\"", dk->name, figures[f].key);
      if (num)
        *figures[f].field = num->num;
    }
    dv->n_kinds++;
    dv->n_devices += dk->count;
  }
  return AP_OK;
}

/* The state named by s (1 + I, II, III; or 1 + b, f, r), 0 if none. */
static int state_of(const char *s, bool join) {
  static const char *const names[2][3] = {{"I", "II", "III"}, {"b", "f", "r"}};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[join][i]) == 0)
      return i + 1;
  return 0;
}

static int node_named(const ap_graph *g, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead && strcmp(g->nodes[i].name, name) == 0)
      return i;
  return -1;
}

static int by_lo(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* The file's boxes of node ni's output (boxes: one [[lo, hi]...] per
 * device): in bounds, covering every dimension between the devices, and
 * equal to the plan's. */
static ap_status boxes_checked(const loader *x, int ni, const jval *boxes, int vx) {
  ap_graph *g = x->g;
  const ap_plan *p = g->plan;
  const ap_node *n = &g->nodes[ni];
  int n_dev = p->dev.n_devices;
  const ap_chain_op *chain = NULL;
  for (int k = 0; vx >= 0 && k < p->v[vx].n_chain; k++)
    if (p->v[vx].chain[k].node == ni)
      chain = &p->v[vx].chain[k];
  const ap_value *val = &g->values[chain ? chain->out_value : p->v[vx].port[0].value];
  if (!boxes || boxes->kind != J_ARR || boxes->n != n_dev)
    return ap_error(x->d, AP_ERR_INVALID, x->file, n->name, n->op_type,
                    "\"boxes\" must hold one box per device (%d)", n_dev);
  /* Each device's range of each dimension: [dim][dev][lo, hi), and one
   * dimension's sorted by lo. */
  int64_t(*range)[2] = ap_arena_array(g->arena, (size_t)val->rank * n_dev + 1, sizeof *range);
  int64_t(*sorted)[2] = ap_arena_array(g->arena, (size_t)n_dev + 1, sizeof *sorted);
  if (!range || !sorted)
    return ap_error(x->d, AP_ERR_NOMEM, x->file, NULL, NULL, "out of memory");
  for (int dev = 0; dev < n_dev; dev++) {
    const jval *box = boxes->item[dev];
    if (box->kind != J_ARR || box->n != val->rank)
      return ap_error(x->d, AP_ERR_INVALID, x->file, n->name, n->op_type,
                      "device %d's box has %d dimensions; '%s' has %d", dev, box->n,
                      val->name, val->rank);
    for (int dim = 0; dim < val->rank; dim++) {
      const jval *r = box->item[dim];
      double lo = 0, hi = 0;
      if (r->n != 2 || !jnum(r, 0, &lo) || !jnum(r, 1, &hi) ||
          !(lo >= 0) || !(lo <= hi) || !(hi <= (double)val->dims[dim]))
        return ap_error(x->d, AP_ERR_INVALID, x->file, n->name, n->op_type,
                        "device %d: dimension %d of its box is not [lo, hi] with "
                        "0 <= lo <= hi <= %lld",
                        dev, dim, (long long)val->dims[dim]);
      range[(size_t)dim * n_dev + dev][0] = (int64_t)lo;
      range[(size_t)dim * n_dev + dev][1] = (int64_t)hi;
    }
  }
  /* Between them the devices hold every index of every dimension (the
   * shares of a split dimension cover it). */
  for (int dim = 0; dim < val->rank; dim++) {
    int64_t(*r)[2] = sorted;
    memcpy(r, &range[(size_t)dim * n_dev], sizeof *r * (size_t)n_dev);
    qsort(r, (size_t)n_dev, sizeof *r, by_lo);
    int64_t reached = 0;
    for (int dev = 0; dev < n_dev && r[dev][0] <= reached; dev++)
      reached = r[dev][1] > reached ? r[dev][1] : reached;
    if (reached < val->dims[dim])
      return ap_error(x->d, AP_ERR_INVALID, x->file, n->name, n->op_type,
                      "the devices' boxes leave indices %lld.. of dimension %d (size %lld) "
                      "to no device",
                      (long long)reached, dim, (long long)val->dims[dim]);
  }
  /* The layer's boxes are the ones its types give (a carried layout is
   * scaled to each node's shape: only its coverage is checked). */
  ap_dbox *want = chain ? NULL : ap_arena_array(g->arena, (size_t)n_dev + 1, sizeof *want);
  if (!chain && !want)
    return ap_error(x->d, AP_ERR_NOMEM, x->file, NULL, NULL, "out of memory");
  if (!chain) /* walked once for all devices, not level by level per device */
    ap_plan_device_boxes(p, g, vx, 0, want);
  for (int dev = 0; dev < n_dev && !chain; dev++) {
    const ap_dcoord *lo = want[dev].lo, *hi = want[dev].hi;
    for (int dim = 0; dim < val->rank; dim++) {
      const int64_t *r = range[(size_t)dim * n_dev + dev];
      if (r[0] != lo[dim] || r[1] != hi[dim])
        return ap_error(x->d, AP_ERR_INVALID, x->file, n->name, n->op_type,
                        "device %d holds [%lld, %lld) of dimension %d; the types at its "
                        "levels give [%lld, %lld)",
                        dev, (long long)r[0], (long long)r[1], dim, (long long)lo[dim],
                        (long long)hi[dim]);
    }
  }
  return AP_OK;
}

/* boxes_checked, its scratch released (over thousands of devices a node's
 * ranges take megabytes). */
static ap_status check_boxes(const loader *x, int ni, const jval *boxes, int vx) {
  ap_arena_mark m = ap_arena_mark_now(x->g->arena);
  ap_status st = boxes_checked(x, ni, boxes, vx);
  ap_arena_release(x->g->arena, m);
  return st;
}

ap_status ap_partition_from_json(ap_graph *g, const char *json, const char *file,
                                 ap_devices *devices, ap_diag *d) {
  loader x = {g, file ? file : "<plan>", d};
  jreader r = {json, json, g->arena, NULL};
  const jval *root = jparse(&r, 0);
  if (root) {
    skip_space(&r);
    if (*r.at)
      root = jfail(&r, "text after the plan");
  }
  if (!root)
    return ap_error(d, AP_ERR_PARSE, x.file, NULL, NULL, "not a plan: %s at byte %ld", r.error,
                    (long)(r.at - json));
  const jval *strategy = member(root, "strategy"), *cost = member(root, "cost"),
             *levels = member(root, "levels"), *nodes = member(root, "nodes");
  ap_plan_opts o = {.devices = devices};
  if (!strategy || strategy->kind != J_STR || !ap_strategy_parse(strategy->str, &o.strategy))
    return bad(&x, NULL, "\"strategy\" must be dp, owt, hypar, accpar or exhaustive");
  if (!cost || cost->kind != J_STR ||
      (strcmp(cost->str, "time") != 0 && strcmp(cost->str, "paper") != 0))
    return bad(&x, NULL, "\"cost\" must be time or paper");
  o.cost = strcmp(cost->str, "paper") == 0 ? AP_COST_PAPER : AP_COST_TIME;
  if (!levels || levels->kind != J_NUM || levels->num < 1 || levels->num > AP_MAX_LEVELS ||
      levels->num != floor(levels->num))
    return bad(&x, NULL, "\"levels\" must be a positive integer");
  if (!nodes || nodes->kind != J_ARR)
    return bad(&x, NULL, "no \"nodes\" list");
  ap_status st = read_devices(&x, member(root, "devices"), devices);
  if (st != AP_OK)
    return st;
  int L = (int)levels->num;
  uint8_t *state = ap_arena_array(g->arena, (size_t)L * g->n_nodes + 1, 1);
  int *listed = ap_arena_array(g->arena, (size_t)nodes->n + 1, sizeof *listed);
  if (!state || !listed)
    return ap_error(d, AP_ERR_NOMEM, x.file, NULL, NULL, "out of memory");
  for (int i = 0; i < nodes->n; i++) {
    const jval *name = member(nodes->item[i], "name");
    if (!name || name->kind != J_STR)
      return bad(&x, NULL, "a node without a \"name\"");
    int ni = listed[i] = node_named(g, name->str);
    if (ni < 0)
      return ap_error(d, AP_ERR_INVALID, x.file, NULL, NULL, "%s has no node '%s'", g->path,
                      name->str);
    const ap_node *n = &g->nodes[ni];
    const jval *types = member(nodes->item[i], "types"), *layouts = member(nodes->item[i], "layouts");
    const jval *list = types ? types : layouts;
    if (!list)
      continue; /* a weightless node carrying a layer's layout */
    if (list->kind != J_ARR)
      return bad(&x, n, "\"types\" must be a list");
    if (list->n > L)
      return ap_error(d, AP_ERR_INVALID, x.file, n->name, n->op_type,
                      "%d types for %d levels", list->n, L);
    const jval *by_count = member(nodes->item[i], "by_count");
    if (by_count && (by_count->kind != J_ARR || by_count->n != list->n))
      return bad(&x, n, "\"by_count\" must hold one true or false per level");
    for (int l = 0; l < list->n; l++) {
      const jval *t = list->item[l];
      int s = t->kind == J_STR ? state_of(t->str, layouts != NULL) : 0;
      if (!s)
        return ap_error(d, AP_ERR_INVALID, x.file, n->name, n->op_type,
                        "level %d: %s must be %s", l, layouts ? "a layout" : "a type",
                        layouts ? "b, f or r" : "I, II or III");
      if (by_count && by_count->item[l]->kind != J_BOOL)
        return ap_error(d, AP_ERR_INVALID, x.file, n->name, n->op_type,
                        "level %d: \"by_count\" must be true or false", l);
      state[(size_t)l * g->n_nodes + ni] =
          (uint8_t)(s + (by_count && by_count->item[l]->num ? 4 : 0));
    }
  }
  if ((st = ap_partition_fixed(g, &o, state, L, x.file, d)) != AP_OK)
    return st;
  /* How the file's states were searched, where it says (a plan file
   * written before the field, or edited by hand, keeps "read back"). */
  static const char *const searched[] = {"levels", "closed forms", "program", "paper"};
  const jval *sp = member(root, "search_priced");
  for (size_t k = 0; sp && sp->kind == J_STR && k < sizeof searched / sizeof *searched; k++)
    if (strcmp(sp->str, searched[k]) == 0)
      ((ap_plan *)g->plan)->search_priced = searched[k];
  /* The boxes: every node the file lists that the plan reaches. */
  const ap_plan *p = g->plan;
  int *vertex_of = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *vertex_of);
  if (!vertex_of)
    return ap_error(d, AP_ERR_NOMEM, x.file, NULL, NULL, "out of memory");
  for (int v = 0; v < p->n_vertices; v++) {
    vertex_of[p->v[v].node] = v + 1;
    for (int k = 0; k < p->v[v].n_chain; k++)
      vertex_of[p->v[v].chain[k].node] = v + 1;
  }
  for (int i = 0; i < nodes->n; i++) {
    const jval *boxes = member(nodes->item[i], "boxes");
    if (!vertex_of[listed[i]])
      return ap_error(d, AP_ERR_INVALID, x.file, g->nodes[listed[i]].name,
                      g->nodes[listed[i]].op_type, "not a node the plan reaches");
    /* A plan edited by hand may leave the boxes out: its types give them. */
    if (boxes && (st = check_boxes(&x, listed[i], boxes, vertex_of[listed[i]] - 1)) != AP_OK) {
      g->plan = NULL;
      return st;
    }
  }
  return AP_OK;
}
