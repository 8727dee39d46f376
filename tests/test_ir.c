/* The IR core: graph building, compaction, the verifier's checks and
 * topological sort, batch binding, dumps, and allocation failure. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static int value(ap_graph *g, const char *name, ap_value_kind kind, int rank,
                 const int64_t *dims) {
  int v = ap_graph_add_value(g, name, kind);
  cr_assert_geq(v, 0);
  g->values[v].dtype = AP_DT_FLOAT;
  g->values[v].rank = rank;
  for (int i = 0; i < rank; i++)
    g->values[v].dims[i] = dims[i];
  return v;
}

static int node(ap_graph *g, const char *name, const char *op, int n_in, const int *in,
                int out) {
  int n = ap_graph_add_node(g, name, "", op, n_in, 1, 0);
  cr_assert_geq(n, 0);
  for (int i = 0; i < n_in; i++)
    g->nodes[n].in[i] = in[i];
  g->nodes[n].out[0] = out;
  return n;
}

/* x -> relu -> r -> sigmoid -> y, with the nodes added in reverse order. */
static ap_graph *chain(void) {
  ap_graph *g = ap_graph_new("chain.onnx");
  int64_t d[2] = {2, 3};
  int x = value(g, "x", AP_VAL_INPUT, 2, d);
  int r = value(g, "r", AP_VAL_NODE, -1, d);
  int y = value(g, "y", AP_VAL_NODE, -1, d);
  ap_graph_add_input(g, x);
  ap_graph_add_output(g, y);
  node(g, "sig", "Sigmoid", 1, &r, y);
  node(g, "relu", "Relu", 1, &x, r);
  return g;
}

Test(graph, find_by_name_after_many_values) {
  ap_graph *g = ap_graph_new("many.onnx");
  char name[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(name, sizeof name, "v%d", i);
    cr_assert_eq(ap_graph_add_value(g, name, AP_VAL_NODE), i);
  }
  cr_expect_eq(ap_graph_find(g, "v0"), 0);
  cr_expect_eq(ap_graph_find(g, "v4999"), 4999);
  cr_expect_eq(ap_graph_find(g, "v5000"), -1);
  ap_graph_free(g);
}

Test(graph, unsupported_ops_are_marked_unknown) {
  ap_graph *g = ap_graph_new("m.onnx");
  int n = ap_graph_add_node(g, "k", "", "Unique", 1, 4, 0);
  int c = ap_graph_add_node(g, "c", "ai.onnx", "Conv", 2, 1, 0);
  int m = ap_graph_add_node(g, "m", "com.microsoft", "Conv", 2, 1, 0);
  cr_expect_eq(g->nodes[n].op, AP_OP_UNKNOWN);
  cr_expect_eq(g->nodes[c].op, AP_OP_CONV);
  cr_expect_eq(g->nodes[m].op, AP_OP_UNKNOWN, "other domains are not ONNX's Conv");
  ap_graph_free(g);
}

Test(verify, sorts_nodes_topologically) {
  ap_graph *g = chain();
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(g->nodes[0].name, "relu");
  cr_expect_str_eq(g->nodes[1].name, "sig");
  cr_expect_eq(g->values[ap_graph_find(g, "r")].producer, 0);
  ap_graph_free(g);
}

Test(verify, reports_a_cycle_naming_a_node) {
  ap_graph *g = ap_graph_new("cycle.onnx");
  int64_t d4[1] = {4};
  int x = value(g, "x", AP_VAL_INPUT, 1, d4);
  int a = value(g, "a", AP_VAL_NODE, -1, d4);
  int b = value(g, "b", AP_VAL_NODE, -1, d4);
  ap_graph_add_input(g, x);
  ap_graph_add_output(g, a);
  node(g, "add", "Add", 2, (int[]){x, b}, a);
  node(g, "relu", "Relu", 1, &a, b);
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_ERR_INVALID);
  cr_expect(strstr(d.message, "cycle.onnx: node '") != NULL, "%s", d.message);
  cr_expect(strstr(d.message, "is part of a cycle") != NULL, "%s", d.message);
  ap_graph_free(g);
}

Test(verify, lists_every_unsupported_type_and_node_once) {
  ap_graph *g = ap_graph_new("u.onnx");
  int64_t d4[1] = {4};
  int x = value(g, "x", AP_VAL_INPUT, 1, d4);
  int o[4];
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof name, "o%d", i);
    o[i] = value(g, name, AP_VAL_NODE, -1, d4);
  }
  ap_graph_add_input(g, x);
  node(g, "t1", "Unique", 1, &x, o[0]);
  node(g, "h", "Hardmax", 1, &o[0], o[1]);
  node(g, "t2", "Unique", 1, &o[1], o[2]);
  node(g, "r", "Relu", 1, &o[2], o[3]);
  ap_graph_add_output(g, o[3]);
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_ERR_UNSUPPORTED);
  cr_expect_str_eq(d.message,
                   "u.onnx: unsupported operators: Unique (nodes 't1', 't2'); Hardmax (nodes 'h')");
  ap_graph_free(g);
}

Test(verify, checks_arity_from_ops_def) {
  ap_graph *g = ap_graph_new("a.onnx");
  int64_t d4[1] = {4};
  int x = value(g, "x", AP_VAL_INPUT, 1, d4);
  int y = value(g, "y", AP_VAL_NODE, -1, d4);
  ap_graph_add_input(g, x);
  ap_graph_add_output(g, y);
  node(g, "gemm", "Gemm", 1, &x, y);
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_ERR_INVALID);
  cr_expect_str_eq(d.message, "a.onnx: node 'gemm' (Gemm): has 1 inputs, expected 2 to 3");
  ap_graph_free(g);
}

Test(verify, refuses_a_missing_required_input) {
  ap_graph *g = ap_graph_new("a.onnx");
  int64_t d4[1] = {4};
  int x = value(g, "x", AP_VAL_INPUT, 1, d4);
  int y = value(g, "y", AP_VAL_NODE, -1, d4);
  ap_graph_add_input(g, x);
  ap_graph_add_output(g, y);
  node(g, "add", "Add", 2, (int[]){x, -1}, y);
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_ERR_INVALID);
  cr_expect_str_eq(d.message, "a.onnx: node 'add' (Add): required input 1 is missing");
  ap_graph_free(g);
}

Test(graph, compact_drops_dead_nodes_and_orphan_values) {
  ap_graph *g = chain();
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_OK);
  /* Rewire sigmoid to read x directly and kill relu: r is then unused. */
  g->nodes[1].in[0] = ap_graph_find(g, "x");
  g->nodes[0].dead = true;
  cr_assert(ap_graph_compact(g));
  cr_expect_eq(g->n_nodes, 1);
  cr_expect_eq(g->n_values, 2);
  cr_expect_eq(ap_graph_find(g, "r"), -1);
  cr_expect_eq(g->values[g->nodes[0].in[0]].name[0], 'x');
  cr_expect_eq(g->values[g->outputs[0]].producer, 0);
  ap_graph_free(g);
}

Test(bind, batch_follows_the_symbol_of_the_first_input) {
  ap_graph *g = ap_graph_new("b.onnx");
  int64_t d[2] = {-1, 3};
  int x = value(g, "x", AP_VAL_INPUT, 2, d);
  int m = value(g, "mask", AP_VAL_INPUT, 2, d);
  int w = value(g, "w", AP_VAL_WEIGHT, 2, (int64_t[]){3, 3});
  g->values[x].sym[0] = "N";
  g->values[m].sym[0] = "N";
  ap_graph_add_input(g, w);
  ap_graph_add_input(g, x);
  ap_graph_add_input(g, m);
  ap_diag diag = {0};
  cr_assert_eq(ap_bind_batch(g, 16, &diag), AP_OK, "%s", diag.message);
  cr_expect_eq(g->values[x].dims[0], 16);
  cr_expect_eq(g->values[m].dims[0], 16, "a shared symbol is the same batch");
  cr_expect_eq(g->values[w].dims[0], 3, "weights are never the batch");
  cr_expect_null(g->values[x].sym[0]);
  cr_expect_eq(ap_bind_batch(g, 0, &diag), AP_ERR_USAGE);
  ap_graph_free(g);
}

static char *dump_to_string(ap_graph *g, bool json) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_eq(json ? ap_dump_json(g, f) : ap_dump_text(g, f), AP_OK);
  fclose(f);
  return buf;
}

Test(dump, text_shows_values_nodes_attributes_and_types) {
  ap_graph *g = chain();
  ap_diag d = {0};
  cr_assert_eq(ap_verify(g, &d), AP_OK);
  ap_node *relu = &g->nodes[0];
  relu->attr = ap_arena_array(g->arena, 2, sizeof *relu->attr);
  relu->n_attr = 2;
  relu->attr[0] = (ap_attr){.name = "zeta", .type = AP_ATTR_INT, .i = 3};
  relu->attr[1] = (ap_attr){.name = "alpha", .type = AP_ATTR_STRING, .s = "a\"b", .s_len = 3};
  relu->types = (uint8_t[]){1, 3};
  relu->n_types = 2;
  char *text = dump_to_string(g, false);
  cr_expect_str_eq(text, "graph \"\" ir_version=0 opset=0\n"
                         "input  %x: float32[2,3]\n"
                         "node   relu = Relu(%x) {alpha=\"a\\\"b\", zeta=3} types=[I,III]\n"
                         "         -> %r: float32[*]\n"
                         "node   sig = Sigmoid(%r)\n"
                         "         -> %y: float32[*]\n"
                         "output %y: float32[*]\n");
  free(text);
  char *json = dump_to_string(g, true);
  cr_expect(strstr(json, "\"attrs\": {\"alpha\": \"a\\\"b\", \"zeta\": 3}, \"types\": [\"I\", \"III\"]") != NULL, "%s", json);
  cr_expect(strstr(json, "{\"name\": \"x\", \"kind\": \"input\", \"dtype\": \"float32\", \"shape\": [2, 3]}") != NULL, "%s", json);
  free(json);
  ap_graph_free(g);
}

/* Fails the n-th allocation: every failure path must report, not crash. */
static long fail_at, allocs;
static void *failing_realloc(void *p, size_t size, void *user) {
  (void)user;
  if (size == 0) {
    free(p);
    return NULL;
  }
  if (allocs++ == fail_at)
    return NULL;
  return realloc(p, size);
}

Test(arena, every_allocation_failure_is_reported) {
  for (fail_at = 0;; fail_at++) {
    allocs = 0;
    ap_set_allocator(failing_realloc, NULL);
    ap_graph *g = ap_graph_new("oom.onnx");
    bool ok = g != NULL;
    char name[16];
    for (int i = 0; ok && i < 3000; i++) {
      snprintf(name, sizeof name, "v%d", i);
      ok = ap_graph_add_value(g, name, AP_VAL_NODE) >= 0;
    }
    ap_graph_free(g);
    ap_set_allocator(NULL, NULL);
    if (ok)
      break;
  }
  cr_expect_gt(fail_at, 3, "the loop must have exercised several failure points");
}

/* An arena whose chunks failing_realloc counts (allocs), none failing
 * until fail_at is set; free_counted puts the default allocator back. */
static ap_arena *counted_arena(void) {
  allocs = 0;
  fail_at = -1;
  ap_set_allocator(failing_realloc, NULL);
  ap_arena *a = ap_arena_new();
  cr_assert(a);
  return a;
}

static void free_counted(ap_arena *a) {
  ap_arena_free(a);
  ap_set_allocator(NULL, NULL);
}

/* What is allocated after a mark goes back at the release, and the same
 * allocations made again take no new memory: small blocks on the marked
 * chunk, a large block's own chunk put behind it, chunks taken on top. */
Test(arena, release_to_a_mark_reuses_the_memory) {
  ap_arena *a = counted_arena();
  char *kept = ap_arena_alloc(a, 100);
  memset(kept, 7, 100);
  ap_arena_mark m = ap_arena_mark_now(a);
  long before = -1;
  char *first[4] = {0};
  for (int round = 0; round < 3; round++) {
    size_t sizes[4] = {200, 1 << 20, 300, 5 << 20}; /* one large behind, one on top */
    for (int i = 0; i < 4; i++) {
      char *p = ap_arena_alloc(a, sizes[i]);
      cr_assert(p);
      for (size_t j = 0; j < sizes[i]; j += 4096)
        cr_assert_eq(p[j], 0, "round %d block %d is not zeroed", round, i);
      memset(p, 0xab, sizes[i]);
      if (round == 0)
        first[i] = p;
      else
        cr_expect_eq(p, first[i], "round %d block %d is not where it was", round, i);
    }
    if (round == 0)
      before = allocs;
    else
      cr_expect_eq(allocs, before, "round %d took new chunks", round);
    ap_arena_release(a, m);
  }
  for (int j = 0; j < 100; j++)
    cr_assert_eq(kept[j], 7, "the block before the mark changed");
  free_counted(a);
}

/* A copy holds the source's bytes, aligned as every block is, and the
 * blocks around it are untouched; a failed allocation gives NULL. */
Test(arena, a_copy_holds_its_source_and_nothing_else) {
  ap_arena *a = counted_arena();
  unsigned char src[3 * 4096 + 5];
  for (size_t j = 0; j < sizeof src; j++)
    src[j] = (unsigned char)(j * 131 + 7);
  size_t sizes[] = {1, 17, 4096, sizeof src, 200 << 10};
  unsigned char *copy[5], *zero[5];
  for (int i = 0; i < 5; i++) {
    size_t n = sizes[i] < sizeof src ? sizes[i] : sizeof src;
    copy[i] = ap_arena_copy(a, src, n);
    zero[i] = ap_arena_alloc(a, 64);
    cr_assert(copy[i] && zero[i]);
    cr_expect_eq((uintptr_t)copy[i] % 16, 0, "copy %d is not 16-byte aligned", i);
  }
  for (int i = 0; i < 5; i++) {
    size_t n = sizes[i] < sizeof src ? sizes[i] : sizeof src;
    cr_expect_eq(memcmp(copy[i], src, n), 0, "copy %d differs from its source", i);
    for (int j = 0; j < 64; j++)
      cr_expect_eq(zero[i][j], 0, "the block after copy %d is not zeroed", i);
  }
  fail_at = allocs; /* the next chunk cannot be had */
  cr_expect_null(ap_arena_copy(a, src, 64 << 20), "a failed copy must give NULL");
  free_counted(a);
}

Test(verify, accepts_a_graph_without_nodes) {
  ap_graph *g = ap_graph_new("empty.onnx");
  int64_t d4[1] = {4};
  int x = value(g, "x", AP_VAL_INPUT, 1, d4);
  ap_graph_add_input(g, x);
  ap_graph_add_output(g, x);
  ap_diag d = {0};
  cr_expect_eq(ap_verify(g, &d), AP_OK, "%s", d.message);
  cr_expect_eq(ap_run_pipeline(g, NULL, &d), AP_OK, "%s", d.message);
  ap_graph_free(g);
}
