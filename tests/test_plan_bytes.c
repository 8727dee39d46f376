/* The cost model's bytes against the program's: for every device, the bytes
 * the partition pass charges (ap_plan_model_device_bytes, what its
 * communication time is made of) must be the bytes the partitioned program
 * sends (passes/distribute.c, which code generation emits and the runtime
 * measures). DESIGN.md: one conversion, computed by the same code in both. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/train.h"
#include "passes/distribute.h"
#include "passes/passes.h"

static const char *const models[] = {"mlp",       "lenet5",    "resnet_small", "inception_block",
                                     "gpt2_tiny", "bert_tiny", "vit_tiny"};
static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
static const char *const arrays[] = {"cpu:2",           "tpuv3:1,tpuv2:1", "cpu:3",
                                     "cpu:4",           "tpuv3:1,tpuv2:2", "tpuv3:2,tpuv2:2"};
enum { N_MODELS = 7, N_STRATEGIES = 4, N_ARRAYS = 6 };

/* Writes zoo models with accpar-zoo's options into a fresh folder of the
 * build named after the test (each test its own, as Criterion runs them in
 * parallel), whose path goes to dir. */
static void zoo_in(const char *test, const char *options, char *dir, size_t cap) {
  const char *bin = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  FILE *probe = fopen(bin, "rb");
  if (!probe)
    cr_skip_test("%s is not built", bin);
  fclose(probe);
  snprintf(dir, cap, "%s/tests/plan_bytes/%s", ACCPAR_BINARY_DIR, test);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && %s %s -o '%s' >/dev/null", dir, dir,
           bin, options, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The path of one model the zoo writes with `options` for test. */
static void zoo_model(const char *test, const char *options, const char *model, char *path,
                      size_t cap) {
  char dir[600];
  zoo_in(test, options, dir, sizeof dir);
  snprintf(path, cap, "%s/%s.onnx", dir, model);
}

/* The zoo's four CNNs and its three tiny transformers (16 tokens) at batch 8. */
static void zoo(const char *test, char *dir, size_t cap) {
  zoo_in(test,
         "--no-weights --batch 8 mlp lenet5 resnet_small inception_block gpt2_tiny bert_tiny "
         "vit_tiny",
         dir, cap);
}

/* The graph of the model at path, through the pipeline. */
static ap_graph *loaded(const char *path) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
  return g;
}

/* The model at path, through the pipeline, planned on array with strategy
 * (its devices into dv). */
static ap_graph *planned(const char *path, const char *array, const char *strategy,
                         ap_devices *dv) {
  ap_graph *g = loaded(path);
  ap_diag d = {0};
  ap_plan_opts o = {.devices = dv};
  cr_assert_eq(ap_devices_parse(array, dv, &d), AP_OK, "%s", d.message);
  cr_assert(ap_strategy_parse(strategy, &o.strategy));
  cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
  return g;
}

/* Plans the model `name` on array a with strategy s and counts the
 * devices whose bytes differ (forward, or a training step), logging each. */
static int mismatches_of(const char *dir, const char *name, const char *array,
                         const char *strategy, bool train) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  ap_devices dv;
  ap_graph *g = planned(path, array, strategy, &dv);
  ap_diag d = {0};
  ap_dist *dist;
  cr_assert_eq(train ? ap_distribute_train(g, NULL, NULL, &dist, &d) : ap_distribute(g, &dist, &d),
               AP_OK, "%s", d.message);
  ap_plan_summary sum;
  cr_assert(ap_plan_get(g, &sum));
  /* A step is its compute plus a communication that is never negative:
   * ap_partition skips pricing a base plan whose compute alone is slower. */
  cr_expect_geq(sum.comm_time_s, 0, "%s on %s with %s: communication %g s", name, array,
                strategy, sum.comm_time_s);
  int bad = 0, level_bad = 0;
  double model = 0, program = 0;
  for (int dev = 0; dev < dv.n_devices; dev++) {
    double want = train ? dist->step_bytes[dev] : dist->fwd_bytes[dev];
    double got = ap_plan_model_device_bytes(g->plan, dev, train);
    model += got;
    program += want;
    bad += got != want;
    level_bad += ap_plan_level_device_bytes(g->plan, dev, train) != want;
  }
  /* On one level the search's own pricing is the program's too: there the
   * levels price every candidate as the program would send it. */
  if (sum.n_levels == 1 && level_bad) {
    cr_log_info("%s on %s with %s: the levels' %s bytes differ from the program's on %d of "
                "%d devices", name, array, strategy, train ? "step" : "forward", level_bad,
                dv.n_devices);
    bad += level_bad;
  }
  if (bad)
    cr_log_info("%s on %s with %s: %s bytes, cost model %.0f, program %.0f (%+.1f%%), "
                "%d of %d devices differ", name, array, strategy,
                train ? "step" : "forward", model, program,
                program > 0 ? 100 * (model - program) / program : 0.0, bad, dv.n_devices);
  /* comm_bytes, which the plan prints, sums the devices' step bytes (in
   * another order: levels of three children leave thirds of bytes). */
  double off = sum.comm_bytes - model;
  if (train && (off > 1e-9 * model || -off > 1e-9 * model)) {
    cr_log_info("%s on %s with %s: comm_bytes %.0f, the devices' step bytes %.0f", name,
                array, strategy, sum.comm_bytes, model);
    bad++;
  }
  ap_graph_free(g);
  return bad;
}

static int mismatches_on(const char *dir, int m, const char *array, const char *strategy,
                         bool train) {
  return mismatches_of(dir, models[m], array, strategy, train);
}

static int mismatches(const char *dir, int m, int a, int s, bool train) {
  return mismatches_on(dir, m, arrays[a], strategies[s], train);
}

/* Every plan exact, device by device: over two levels the partition pass
 * prices the chosen plan's transfers as the program's distribution makes
 * them (program_bytes, partition.c, up to EXACT_MAX_WORK node-devices), each
 * on the vertex or edge whose cost it is; on one level what the levels
 * charge is what the program sends. */
static void check(bool train) {
  char dir[600];
  zoo(train ? "step" : "forward", dir, sizeof dir);
  int failed = 0, n = 0;
  for (int m = 0; m < N_MODELS; m++)
    for (int a = 0; a < N_ARRAYS; a++)
      for (int s = 0; s < N_STRATEGIES; s++, n++)
        failed += mismatches(dir, m, a, s, train) > 0;
  cr_assert_eq(failed, 0, "%d of %d plans: the cost model's %s bytes differ from the "
               "program's (see the log)", failed, n, train ? "step" : "forward");
  cr_assert_eq(n - failed, 168, "exact plans: %d", n - failed);
}

Test(plan_bytes, forward_bytes_of_the_cost_model_are_the_programs, .timeout = 600) {
  check(false);
}

/* A training step: the program runs the forward transfers, the loss's
 * transfer of whole rows, every transfer's adjoint and the sums of every
 * trainable weight's gradient (ap_distribute_train); the cost model prices
 * the same (docs/partition.md, "What a training step moves"), the chosen
 * plan's from the program's own transfers. */
Test(plan_bytes, step_bytes_of_the_cost_model_are_the_programs, .timeout = 600) {
  check(true);
}

/* The training program's schedule (codegen/train.c) and the plan's figures
 * (ap_train_roles) train the same weights on models whose weights are
 * initializers (docs/partition.md, "Approximations": fed weights differ). */
Test(plan_bytes, the_schedule_trains_the_weights_the_plan_prices) {
  char dir[600], path[700];
  static const char *const names[] = {"mlp", "lenet5", "resnet_small", "inception_block",
                                      "gpt2_tiny", "bert_tiny", "vit_tiny"};
  zoo_in("roles", "--batch 2 mlp lenet5 resnet_small inception_block gpt2_tiny bert_tiny vit_tiny",
         dir, sizeof dir);
  for (size_t m = 0; m < sizeof names / sizeof *names; m++) {
    snprintf(path, sizeof path, "%s/%s.onnx", dir, names[m]);
    ap_graph *g = NULL;
    ap_diag d = {0};
    cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
    cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
    uint64_t *want;
    bool *trainable;
    cr_assert_eq(ap_train_roles(g, &want, &trainable, &d), AP_OK, "%s", d.message);
    cg_train_schedule s;
    cr_assert_eq(cg_train_schedule_build(g, false, &s, &d), AP_OK, "%s", d.message);
    int n = 0, differ = 0;
    for (int v = 0; v < g->n_values; v++) {
      n += trainable[v];
      if (trainable[v] != s.trainable[v]) {
        differ++;
        cr_log_error("%s: %s: the plan's %d, the schedule's %d", names[m], g->values[v].name,
                     trainable[v], s.trainable[v]);
      }
    }
    cr_expect_eq(differ, 0, "%s: %d of %d weights differ", names[m], differ, n);
    cr_expect_gt(n, 0, "%s", names[m]);
    ap_graph_free(g);
  }
}

/* The distribution keeps one array of boxes where a port's boxes equal
 * another's (distribute.h): an input read as its producer's devices hold
 * it shares their array, and a constant is held whole by every device. */
Test(plan_bytes, ports_share_the_boxes_they_equal) {
  char dir[600], path[700];
  static const char *const names[] = {"resnet_small", "gpt2_tiny", "bert_tiny"};
  static const char *const plans[][2] = {{"cpu:4", "accpar"}, {"tpuv3:2,tpuv2:4", "dp"},
                                         {"cpu:6", "hypar"}};
  zoo_in("share", "--no-weights --batch 8 resnet_small gpt2_tiny bert_tiny", dir, sizeof dir);
  for (size_t m = 0; m < sizeof names / sizeof *names; m++)
    for (size_t k = 0; k < sizeof plans / sizeof *plans; k++) {
      snprintf(path, sizeof path, "%s/%s.onnx", dir, names[m]);
      ap_devices dv;
      ap_graph *g = planned(path, plans[k][0], plans[k][1], &dv);
      ap_diag d = {0};
      ap_dist *dist;
      cr_assert_eq(ap_distribute_train(g, NULL, NULL, &dist, &d), AP_OK, "%s", d.message);
      bool *derived = calloc((size_t)g->n_values + 1, sizeof *derived);
      cr_assert(derived);
      ap_dist_weight_derived(g, derived); /* their boxes narrow after their readers read */
      int equal = 0, shared = 0;
      for (int ni = 0; ni < g->n_nodes; ni++) {
        const ap_node *n = &g->nodes[ni];
        const ap_dnode *dn = &dist->node[ni];
        if (n->dead || !dn->in)
          continue;
        for (int i = 0; i < n->n_in; i++) {
          int v = n->in[i];
          if (v < 0 || !ap_value_shape_known(&g->values[v]))
            continue;
          for (int dev = 0; dev < dist->n_dev && g->values[v].data; dev++) {
            ap_dbox h = ap_dist_held(g, dist, v, dev);
            cr_assert(ap_dbox_whole(&g->values[v], &h), "%s: %s on device %d", names[m],
                      g->values[v].name, dev);
          }
          if (!dist->held[v] || derived[v])
            continue;
          bool same = true;
          for (int dev = 0; dev < dist->n_dev && same; dev++)
            same = ap_dbox_equal(g->values[v].rank, &dn->in[i][dev], &dist->held[v][dev]);
          equal += same;
          shared += same && dn->in[i] == dist->held[v];
          cr_expect(!same || dn->in[i] == dist->held[v], "%s on %s: %s reads %s as held, in a "
                    "copy", names[m], plans[k][0], n->name, g->values[v].name);
        }
      }
      cr_expect_gt(shared, 0, "%s on %s", names[m], plans[k][0]);
      cr_expect_eq(shared, equal, "%s on %s", names[m], plans[k][0]);
      free(derived);
      ap_graph_free(g);
    }
}

/* How many plans of the first n_models models on `array`, every strategy,
 * forward and a training step, differ from the program's bytes. */
static int inexact_on(const char *dir, int n_models, const char *array) {
  int failed = 0;
  for (int m = 0; m < n_models; m++)
    for (int s = 0; s < N_STRATEGIES; s++)
      for (int train = 0; train < 2; train++)
        failed += mismatches_on(dir, m, array, strategies[s], train) > 0;
  return failed;
}

/* Deeper and uneven trees (three levels; a 2 x 3 split; kinds of unequal
 * counts) are priced from the program's transfers too: every plan exact
 * device by device, forward and a training step. */
Test(plan_bytes, plans_are_exact_on_deeper_trees, .timeout = 600) {
  char dir[600];
  zoo("deep", dir, sizeof dir);
  int failed = inexact_on(dir, N_MODELS, "cpu:8") + inexact_on(dir, N_MODELS, "cpu:6") +
               inexact_on(dir, N_MODELS, "tpuv3:2,tpuv2:4") +
               inexact_on(dir, N_MODELS, "tpuv3:1,tpuv2:6");
  cr_assert_eq(failed, 0, "%d plans differ from the program's bytes (see the log)", failed);
}

/* 32 and 64 devices: five and six binary levels, one array of two kinds. */
Test(plan_bytes, plans_are_exact_on_32_and_64_devices, .timeout = 900) {
  char dir[600];
  zoo("wide", dir, sizeof dir);
  int failed =
      inexact_on(dir, N_MODELS, "cpu:32") + inexact_on(dir, N_MODELS, "tpuv3:32,tpuv2:32");
  cr_assert_eq(failed, 0, "%d plans differ from the program's bytes (see the log)", failed);
}

/* Beyond 64 devices, plans of small graphs are priced from the program's
 * transfers too (EXACT_MAX_WORK, partition.c: 2^26 node-devices): eight and
 * ten binary levels, where a batch of 8 leaves most devices no rows. On
 * 1024 devices the transformers (83 to 132 live nodes) are within it; under
 * the sanitizers only the four CNNs are checked there, as they plan in a
 * tenth of the time. */
#if defined(__SANITIZE_ADDRESS__)
enum { N_ON_1024 = 4 };
#else
enum { N_ON_1024 = N_MODELS };
#endif
Test(plan_bytes, small_graphs_are_exact_on_256_and_1024_devices, .timeout = 1200) {
  char dir[600];
  zoo("many", dir, sizeof dir);
  int failed = inexact_on(dir, N_MODELS, "cpu:256") + inexact_on(dir, N_ON_1024, "cpu:1024");
  cr_assert_eq(failed, 0, "%d plans differ from the program's bytes (see the log)", failed);
}

/* ResNet-101 at batch 8 (345 live nodes) on 1024 devices: 353,280
 * node-devices. Until 2026-12-02 the search compared its plans by closed
 * forms past 2^18 and priced only the chosen one from the program's
 * transfers; every plan it compares is now so priced (EXACT_MAX_WORK).
 * Under the sanitizers dp and accpar. */
#if defined(__SANITIZE_ADDRESS__)
enum { N_BEYOND = 2 };
static const char *const beyond[] = {"dp", "accpar"};
#else
enum { N_BEYOND = N_STRATEGIES };
static const char *const *const beyond = strategies;
#endif
Test(plan_bytes, plans_of_a_deep_cnn_on_1024_devices_are_exact, .timeout = 1200) {
  char dir[600];
  zoo_in("beyond", "--no-weights --batch 8 resnet101", dir, sizeof dir);
  int failed = 0;
  for (int s = 0; s < N_BEYOND; s++)
    for (int train = 0; train < 2; train++)
      failed += mismatches_of(dir, "resnet101", "cpu:1024", beyond[s], train) > 0;
  cr_assert_eq(failed, 0, "%d plans differ from the program's bytes (see the log)", failed);
}

/* The plan says how its search compared plans. accpar's rollout compares
 * them as the program runs them up to EXACT_MAX_WORK (2^26) node-devices
 * (`search priced: levels`: ResNet-101 on 1024 devices, by closed forms
 * until 2026-12-02), past it by closed forms (`search priced: closed
 * forms`: ResNet-152, 515 live nodes, on 131,072 devices), where the plan's
 * own bytes are by closed forms too; dp compares none. A plan read back
 * from its JSON keeps what the file says (the JSON of a plan on 131,072
 * devices, every device's boxes, takes 2.7 GB: the file of the plan on
 * 1024 is edited to say closed forms). */
Test(plan_bytes, a_plan_says_how_its_search_compared_plans, .timeout = 1200) {
  char path[700];
  ap_devices dv;
  zoo_model("beyond_said", "--no-weights --batch 8 resnet101 resnet152", "resnet152", path,
            sizeof path);
  ap_graph *g = planned(path, "cpu:131072", "dp", &dv);
  cr_expect_str_eq(((const ap_plan *)g->plan)->search_priced, "levels");
  cr_expect_str_eq(((const ap_plan *)g->plan)->bytes_priced, "closed forms");
  ap_graph_free(g);
  g = planned(path, "cpu:131072", "accpar", &dv);
  cr_expect_str_eq(((const ap_plan *)g->plan)->search_priced, "closed forms");
  cr_expect_str_eq(((const ap_plan *)g->plan)->bytes_priced, "closed forms");
  ap_graph_free(g);
  char *cut = strstr(path, "resnet152.onnx");
  cr_assert(cut);
  memcpy(cut, "resnet101", 9);
  g = planned(path, "cpu:1024", "accpar", &dv);
  cr_expect_str_eq(((const ap_plan *)g->plan)->search_priced, "levels");
  cr_expect_str_eq(((const ap_plan *)g->plan)->bytes_priced, "program");
  char *json = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&json, &len);
  cr_assert(mem);
  cr_assert_eq(ap_plan_print_json(g, mem), AP_OK);
  fclose(mem);
  ap_graph_free(g);
  static const char said[] = "\"search_priced\": \"levels\"";
  char *at = strstr(json, said);
  cr_assert(at, "not in the JSON: %s", said);
  size_t n = strlen(json), head = (size_t)(at - json);
  char *edited = malloc(n + 16);
  cr_assert(edited);
  snprintf(edited, n + 16, "%.*s\"search_priced\": \"closed forms\"%s", (int)head, json,
           at + strlen(said));
  g = loaded(path);
  ap_diag d = {0};
  cr_assert_eq(ap_partition_from_json(g, edited, "p.json", &dv, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(((const ap_plan *)g->plan)->search_priced, "closed forms");
  free(edited);
  free(json);
  ap_graph_free(g);
}

/* Past 1024 devices (where the chosen plan was priced by closed forms until
 * 2026-11-28) the plan is the program's too: the gathers to every device
 * and the partial sums sent summand by summand, whose pieces grow with the
 * square of the device count, are priced by classes of equal boxes, and
 * must still equal the pieces the program enumerates. Mixed kinds, so the
 * classes are uneven. */
Test(plan_bytes, the_chosen_plan_is_exact_past_1024_devices, .timeout = 1200) {
  char dir[600];
  zoo("past1024", dir, sizeof dir);
  for (int m = 0; m < 2; m++) { /* priced from the program, not by closed forms */
    char path[700];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, models[m]);
    ap_devices dv;
    ap_graph *g = planned(path, "cpu:4096", "accpar", &dv);
    cr_expect_str_eq(((const ap_plan *)g->plan)->bytes_priced, "program", "%s", models[m]);
    ap_graph_free(g);
  }
  int failed = inexact_on(dir, 2, "cpu:4096") + inexact_on(dir, 1, "tpuv3:1024,tpuv2:1024");
  for (int train = 0; train < 2; train++)
    failed += mismatches_of(dir, "gpt2_tiny", "cpu:4096", "accpar", train) > 0;
  cr_assert_eq(failed, 0, "%d plans differ from the program's bytes (see the log)", failed);
}

/* The search prices what the program sends: on a tree of levels accpar
 * refines each level against the program's transfers (refine_exact,
 * partition.c), so that changing one vertex's type at one level, the plan
 * priced again as the program runs it, never makes a faster plan, on two
 * and three levels. Where the levels alone priced the search (before the
 * refinement), 9 such changes on 6 of the 21 two-level plans were faster. */
static int faster_single_changes(const char *dir, const char *model, const char *array) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, model);
  ap_graph *g = NULL;
  ap_diag d = {0};
  ap_devices dv;
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR};
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_devices_parse(array, &dv, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
  const ap_plan *p = g->plan;
  cr_assert_str_eq(p->search_priced, "program", "%s on %s", model, array);
  cr_assert_str_eq(p->bytes_priced, "program", "%s on %s", model, array);
  int L = p->n_levels, V = p->n_vertices, N = g->n_nodes, faster = 0;
  double step = p->step_time_s;
  uint8_t *state = malloc((size_t)L * N);
  cr_assert(state);
  memset(state, 0, (size_t)L * N);
  for (int l = 0; l < L; l++)
    for (int v = 0; v < V; v++) {
      int s = p->state[(size_t)l * V + v];
      state[(size_t)l * N + p->v[v].node] = (uint8_t)(1 + s % 3 + 4 * (s >= 3));
    }
  const ap_vertex *vx = p->v; /* the plan is replaced below; its vertices stay */
  for (int l = 0; l < L; l++)
    for (int v = 0; v < V; v++) {
      uint8_t *at = &state[(size_t)l * N + vx[v].node], was = *at;
      for (int t = 0; t < 3; t++) {
        if (!(vx[v].allowed >> t & 1) || was == 1 + t)
          continue;
        *at = (uint8_t)(1 + t);
        cr_assert_eq(ap_partition_fixed(g, &o, state, L, path, &d), AP_OK, "%s", d.message);
        const ap_plan *q = g->plan;
        if (q->step_time_s < step * (1 - 1e-9)) {
          faster++;
          cr_log_info("%s on %s: %s at level %d as type %d: %.6e s, the plan's %.6e s", model,
                      array, g->nodes[vx[v].node].name, l, t + 1, q->step_time_s, step);
        }
      }
      *at = was;
    }
  free(state);
  ap_graph_free(g);
  return faster;
}

Test(plan_bytes, no_single_change_priced_by_the_program_is_faster, .timeout = 600) {
  char dir[600];
  zoo("refined", dir, sizeof dir);
  static const char *const arrays2[] = {"cpu:4", "tpuv3:1,tpuv2:2", "tpuv3:2,tpuv2:2", "cpu:8",
                                       "tpuv3:2,tpuv2:4"};
  int faster = 0;
  for (int m = 0; m < N_MODELS; m++)
    for (int a = 0; a < 5; a++)
      faster += faster_single_changes(dir, models[m], arrays2[a]);
  cr_assert_eq(faster, 0, "%d single changes give faster plans (see the log)", faster);
}

/* Box coordinates are 32-bit (passes/distribute.h): a graph with a larger
 * dimension is refused in one line naming the value, never truncated. */
Test(plan_bytes, a_dimension_past_the_boxes_is_refused) {
  ap_graph *g = ap_graph_new("big.onnx");
  int x = ap_graph_add_value(g, "x", AP_VAL_INPUT);
  int y = ap_graph_add_value(g, "y", AP_VAL_NODE);
  cr_assert(x >= 0 && y >= 0);
  for (int v = 0; v < 2; v++) {
    g->values[v].dtype = AP_DT_UINT8;
    g->values[v].rank = 2;
    g->values[v].dims[0] = 2;
    g->values[v].dims[1] = (int64_t)AP_DCOORD_MAX + 1;
  }
  int n = ap_graph_add_node(g, "r", "", "Relu", 1, 1, 0);
  cr_assert_geq(n, 0);
  g->nodes[n].in[0] = x;
  g->nodes[n].out[0] = y;
  cr_assert(ap_graph_add_input(g, x) && ap_graph_add_output(g, y));
  cr_assert_eq(ap_dist_oversized(g), x);
  ap_dist *dist = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_distribute(g, &dist, &d), AP_ERR_UNSUPPORTED);
  cr_expect(strstr(d.message, "big.onnx") && strstr(d.message, "value 'x'") &&
                strstr(d.message, "2147483647") && !strchr(d.message, '\n'),
            "%s", d.message);
  g->values[x].dims[1] = g->values[y].dims[1] = AP_DCOORD_MAX;
  cr_assert_eq(ap_dist_oversized(g), -1);
  ap_graph_free(g);
}

/* accpar's plan, priced as the program runs it, is never slower than a base
 * plan so priced. Until 2026-12-02 its search compared plans by closed
 * forms past 2^18 node-devices: BERT tiny at batch 8 on 16384 devices chose
 * a plan of 38 ms a step where dp's takes 6.8 ms (before 2026-11-28), GPT-2
 * tiny on 4096 likewise, and later plans were up to 5% slower. */
Test(plan_bytes, accpar_is_never_slower_than_a_base_plan_as_the_program_runs,
     .timeout = 1200) {
  char dir[600];
  zoo_in("surprise", "--no-weights --batch 8 gpt2_tiny bert_tiny", dir, sizeof dir);
  static const char *const cases[][2] = {{"bert_tiny", "cpu:16384"}, {"gpt2_tiny", "cpu:4096"}};
  for (int c = 0; c < 2; c++) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, cases[c][0]);
    double step[N_STRATEGIES];
    for (int s = 0; s < N_STRATEGIES; s++) {
      ap_devices dv;
      ap_graph *g = NULL;
      ap_diag d = {0};
      ap_plan_opts o = {.devices = &dv};
      cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
      cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
      cr_assert_eq(ap_devices_parse(cases[c][1], &dv, &d), AP_OK, "%s", d.message);
      cr_assert(ap_strategy_parse(strategies[s], &o.strategy));
      step[s] = INFINITY; /* a base plan that does not fit */
      if (ap_partition(g, &o, &d) == AP_OK) {
        const ap_plan *p = g->plan;
        cr_assert_str_eq(p->bytes_priced, "program", "%s %s", cases[c][0], strategies[s]);
        step[s] = p->step_time_s;
      }
      ap_graph_free(g);
    }
    cr_assert(isfinite(step[3]), "%s: no accpar plan", cases[c][0]);
    for (int s = 0; s < 3; s++)
      cr_expect_leq(step[3], step[s], "%s on %s: accpar %g s a step, %s %g s",
                    cases[c][0], cases[c][1], step[3], strategies[s], step[s]);
  }
}

/* accpar's plan is never slower than any of its base plans as the program
 * runs both: each base plan that fits, read back with its states
 * (ap_partition_fixed, as `accparc plan --plan` does) and so priced from
 * the program's transfers, takes no less. On ResNet-50 at batch 512 over
 * 2048 devices, where the search compared its base plans by closed forms
 * until 2026-12-02, accpar's plan took 2.412102e-01 s a step, its own base
 * plan 2.409328e-01 s. A base plan the search did not price from the
 * program (outpaced) computes longer than the step of one it did. */
Test(plan_bytes, accpar_is_never_slower_than_its_base_plans, .timeout = 1200) {
  char path[700];
  zoo_model("bases", "--no-weights --batch 512 resnet50", "resnet50", path, sizeof path);
  ap_devices dv;
  ap_graph *g = planned(path, "cpu:2048", "accpar", &dv);
  const ap_plan *p = g->plan;
  cr_assert_str_eq(p->search_priced, "levels");
  cr_assert_str_eq(p->bytes_priced, "program");
  int outpaced = 0;
  for (int i = 0; i < 4; i++) {
    const ap_plan *b = p->base[i];
    if (!b || !b->outpaced) {
      cr_expect(!b || strcmp(b->bytes_priced, "program") == 0, "base plan %d: %s", i,
                b->bytes_priced);
      continue;
    }
    outpaced++;
    cr_expect_str_eq(b->bytes_priced, "closed forms");
    cr_assert(b->rival);
    cr_expect_str_eq(b->rival->bytes_priced, "program");
    cr_expect_gt(b->compute_time_s, b->rival->step_time_s, "%s",
                 ap_strategy_name(b->opts.strategy));
  }
  cr_expect_geq(outpaced, 1, "dp, owt and hypar compute over 0.5 s, accpar 0.21 s");
  int L = p->n_levels, V = p->n_vertices, priced = 0;
  uint8_t *node_state = calloc((size_t)L * (size_t)g->n_nodes, 1);
  cr_assert(node_state);
  for (int i = 0; i < 4; i++) {
    const ap_plan *b = p->base[i];
    if (!b)
      continue;
    bool by_count = b->opts.strategy != AP_STRATEGY_ACCPAR;
    memset(node_state, 0, (size_t)L * (size_t)g->n_nodes);
    for (int l = 0; l < L; l++)
      for (int v = 0; v < V; v++) {
        int s = b->state[(size_t)l * V + v];
        node_state[(size_t)l * g->n_nodes + p->v[v].node] =
            (uint8_t)(1 + s % 3 + (by_count || s >= 3 ? 4 : 0));
      }
    ap_graph *h = loaded(path);
    ap_diag d = {0};
    ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR};
    if (ap_partition_fixed(h, &o, node_state, L, "base", &d) == AP_OK) {
      const ap_plan *q = h->plan;
      cr_expect_str_eq(q->bytes_priced, "program");
      cr_expect_leq(p->step_time_s, q->step_time_s, "accpar %.9g s a step, its base plan %s %.9g s",
                    p->step_time_s, ap_strategy_name(b->opts.strategy), q->step_time_s);
      priced++;
    }
    ap_graph_free(h);
  }
  cr_expect_geq(priced, 3, "only %d base plans read back", priced);
  free(node_state);
  ap_graph_free(g);
}

/* accpar rolls out from every base plan that fits and that it priced from
 * the program (not outpaced), and takes the fastest complete plan: the
 * levels' pricing of a deeper tree is not the program's, so where the
 * rollout starts decides where it ends. GPT-2 tiny at batch 8 on 4096
 * devices (12 levels) ends at 3.82 ms a step from accpar's own base plan,
 * the tentative one, and at 2.87 ms from dp's (2026-12-02); the Inception
 * block on a mixed array of 8 takes owt's. The plan taken, read back with
 * its states, is priced to the last bit as its rollout priced it. Under the
 * sanitizers the Inception block only: GPT-2 tiny on 4096 devices took 380
 * of the sanitized suite's seconds. */
#if defined(__SANITIZE_ADDRESS__)
enum { FIRST_ROLLOUT_CASE = 1 };
#else
enum { FIRST_ROLLOUT_CASE = 0 };
#endif
Test(plan_bytes, accpar_takes_the_fastest_of_its_rollouts, .timeout = 1200) {
  char dir[600];
  zoo("rollouts", dir, sizeof dir);
  static const char *const cases[][2] = {{"gpt2_tiny", "cpu:4096"},
                                         {"inception_block", "tpuv3:4,tpuv2:4"}};
  for (int c = FIRST_ROLLOUT_CASE; c < 2; c++) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, cases[c][0]);
    ap_devices dv;
    ap_graph *g = planned(path, cases[c][1], "accpar", &dv);
    const ap_plan *p = g->plan;
    cr_assert_str_eq(p->bytes_priced, "program");
    /* The tentative plan: the fastest base plan priced from the program. */
    int t = -1;
    for (int i = 0; i < 4; i++)
      if (p->base[i] && !p->base[i]->outpaced &&
          (t < 0 || p->base[i]->step_time_s < p->base[t]->step_time_s))
        t = i;
    cr_assert_geq(t, 0);
    cr_assert(p->rollout[t], "%s: no rollout from the tentative plan", cases[c][0]);
    cr_expect_leq(p->rollout[t]->step_time_s, p->base[t]->step_time_s,
                  "the rollout is never slower than the plan it starts from");
    int rolled = 0;
    for (int i = 0; i < 4; i++) {
      const ap_plan *r = p->rollout[i];
      cr_expect(!r == (!p->base[i] || p->base[i]->outpaced), "%s: base plan %d %s",
                cases[c][0], i, r ? "rolled out from" : "not rolled out from");
      if (!r)
        continue;
      rolled++;
      if (r->outpaced) {
        cr_expect_str_eq(r->bytes_priced, "closed forms");
        cr_expect_gt(r->compute_time_s, r->rival->step_time_s);
        continue;
      }
      cr_expect_str_eq(r->bytes_priced, "program");
      cr_expect_leq(p->step_time_s, r->step_time_s, "%s: %.9g s a step, the rollout from %s %.9g s",
                    cases[c][0], p->step_time_s, ap_strategy_name(p->base[i]->opts.strategy),
                    r->step_time_s);
    }
    cr_expect_geq(rolled, 3, "%s: %d rollouts", cases[c][0], rolled);
    cr_assert(p->start >= 0 && p->rollout[p->start]);
    const ap_plan *won = p->rollout[p->start];
    cr_expect_neq(p->start, t, "%s: the tentative plan's rollout was taken", cases[c][0]);
    cr_expect_lt(won->step_time_s, p->rollout[t]->step_time_s);
    /* Read back with the states of the rollout taken. */
    int L = p->n_levels, V = p->n_vertices;
    uint8_t *node_state = calloc((size_t)L * (size_t)g->n_nodes + 1, 1);
    cr_assert(node_state);
    for (int l = 0; l < L; l++)
      for (int v = 0; v < V; v++) {
        int s = won->state[(size_t)l * V + v];
        node_state[(size_t)l * g->n_nodes + p->v[v].node] = (uint8_t)(1 + s % 3 + (s >= 3 ? 4 : 0));
      }
    ap_graph *h = loaded(path);
    ap_diag d = {0};
    ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR};
    cr_assert_eq(ap_partition_fixed(h, &o, node_state, L, "rollout", &d), AP_OK, "%s", d.message);
    const ap_plan *back = h->plan;
    cr_expect_eq(back->step_time_s, won->step_time_s, "%s: read back %.17g s, rolled out %.17g s",
                 cases[c][0], back->step_time_s, won->step_time_s);
    cr_expect_eq(back->comm_bytes, won->comm_bytes);
    ap_graph_free(h);
    free(node_state);
    ap_graph_free(g);
  }
}

/* The flat indices of box b's elements into flat[] (the box's volume). */
static void box_elements(const ap_value *val, const ap_dbox *b, int64_t *flat) {
  int64_t idx[AP_MAX_RANK], at = 0;
  if (ap_dbox_volume(val->rank, b) == 0)
    return;
  for (int i = 0; i < val->rank; i++)
    idx[i] = b->lo[i];
  for (bool more = true; more;) {
    int64_t f = 0;
    for (int i = 0; i < val->rank; i++)
      f = f * val->dims[i] + idx[i];
    flat[at++] = f;
    more = false;
    for (int i = val->rank - 1; i >= 0 && !more; i--) {
      if (++idx[i] < b->hi[i])
        more = true;
      else
        idx[i] = b->lo[i];
    }
  }
}

/* Elements of the weight held by k devices (box[d] each): 2(k - 1) moves
 * of a sum at the owners into *owners, k(k - 1) of every copy sent to every
 * other into *pairs; counted element by element. */
static void count_copies(const ap_value *val, const ap_dbox *box, int n_dev, double *owners,
                         double *pairs) {
  int64_t numel = ap_numel(val->rank, val->dims);
  int *k = calloc((size_t)numel, sizeof *k);
  int64_t *flat = malloc((size_t)(numel ? numel : 1) * sizeof *flat);
  cr_assert(k && flat);
  for (int d = 0; d < n_dev; d++) {
    box_elements(val, &box[d], flat);
    for (int64_t q = 0; q < ap_dbox_volume(val->rank, &box[d]); q++)
      k[flat[q]]++;
  }
  free(flat);
  *owners = *pairs = 0;
  for (int64_t e = 0; e < numel; e++)
    if (k[e] > 0) {
      *owners += 2.0 * (k[e] - 1);
      *pairs += (double)k[e] * (k[e] - 1);
    }
  free(k);
}

/* A trainable weight whose devices' boxes meet without being equal (a
 * tied embedding table read by rows and by columns, an uneven split over a
 * mixed array) has its gradient summed at each element's owner and sent
 * back (AP_DX_OWNER_SUM): an element held by k devices moves 2(k - 1)
 * times, counted here element by element, where sending every copy to
 * every other moved it k(k - 1) times. Every piece lies in the boxes of
 * both its devices, and the owning is shared out among the holders. */
/* What the sums at the owners of the cases so far moved, in bytes, and
 * what sending every copy (every summand) to every device holding the
 * element would have moved. */
typedef struct owner_tally {
  int count;
  double owners, baseline;
} owner_tally;

/* One sum at the owners of case c (the transfer named name): the bytes
 * charged to its n devices must be 4 bytes for each of the owners
 * element moves counted element by element; baseline: the moves without
 * owners. */
static void tally(owner_tally *tl, const char *const *c, const char *name, const double *bytes,
                  int n, double owners, double baseline) {
  double total = 0;
  for (int e = 0; e < n; e++)
    total += bytes[e];
  cr_expect_eq(total, 4 * owners, "%s on %s (%s): %s moves %.0f bytes, its elements %.0f",
               c[0], c[1], c[2], name, total, 4 * owners);
  tl->count++;
  tl->owners += 4 * owners;
  tl->baseline += 4 * baseline;
}

/* Model case[0] of the batch-8 models the owners' tests share, planned on
 * case[1] with strategy case[2]. */
static ap_graph *owners_case(const char *const *c, ap_devices *dv) {
  char dir[600], path[700];
  zoo_in("owners", "--no-weights --batch 8 gpt2_tiny bert_tiny resnet_small vit_tiny", dir,
         sizeof dir);
  snprintf(path, sizeof path, "%s/%s.onnx", dir, c[0]);
  return planned(path, c[1], c[2], dv);
}

Test(plan_bytes, a_gradient_summed_at_its_owners_moves_each_copy_twice, .timeout = 600) {
  static const char *const cases[][3] = {{"gpt2_tiny", "tpuv3:1,tpuv2:6", "accpar"},
                                         {"gpt2_tiny", "tpuv3:3,tpuv2:6", "accpar"},
                                         {"bert_tiny", "tpuv3:1,tpuv2:2", "hypar"},
                                         {"resnet_small", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"vit_tiny", "tpuv3:1,tpuv2:4", "hypar"},
                                         {"gpt2_tiny", "cpu:256", "accpar"}};
  owner_tally tl = {0};
  double worst = 0;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ap_devices dv;
    ap_graph *g = owners_case(cases[c], &dv);
    ap_diag d = {0};
    ap_dist *dist;
    cr_assert_eq(ap_distribute_train(g, NULL, NULL, &dist, &d), AP_OK, "%s", d.message);
    int n = dist->n_dev;
    ap_dbox *box = calloc((size_t)n, sizeof *box);
    double *bytes = calloc((size_t)n, sizeof *bytes);
    cr_assert(box && bytes);
    int before = tl.count;
    for (int v = 0; v < g->n_values; v++) {
      const ap_dxfer *t = dist->wgrad[v];
      if (!t || t->kind != AP_DX_OWNER_SUM)
        continue;
      const ap_value *val = &g->values[v];
      const ap_dbox *wb = ap_dist_weight_boxes(g, dist, v, box);
      for (int k = 0; k < t->n_pieces; k++) {
        const ap_dpiece *pc = &t->pieces[k];
        cr_expect(pc->from != pc->to, "%s: a piece to itself", val->name);
        cr_expect(ap_dbox_volume(val->rank, &pc->box) > 0, "%s: an empty piece", val->name);
        bool in_sender = true, in_receiver = true;
        for (int i = 0; i < val->rank; i++) {
          in_sender &= wb[pc->from].lo[i] <= pc->box.lo[i] && pc->box.hi[i] <= wb[pc->from].hi[i];
          in_receiver &= wb[pc->to].lo[i] <= pc->box.lo[i] && pc->box.hi[i] <= wb[pc->to].hi[i];
        }
        cr_expect(in_sender && in_receiver, "%s: piece %d outside its devices' boxes",
                  val->name, k);
      }
      double owners, pairs;
      count_copies(val, wb, n, &owners, &pairs);
      for (int e = 0; e < n; e++)
        bytes[e] = 0;
      ap_dxfer_charge_sum(g, t, wb, n, bytes);
      for (int e = 0; e < n; e++) {
        double mine = 8.0 * (double)ap_dbox_volume(val->rank, &wb[e]);
        if (mine > 0 && bytes[e] / mine > worst)
          worst = bytes[e] / mine;
      }
      tally(&tl, cases[c], val->name, bytes, n, owners, pairs);
    }
    cr_expect_gt(tl.count, before, "%s on %s (%s): no gradient summed at its owners",
                 cases[c][0], cases[c][1], cases[c][2]);
    free(box);
    free(bytes);
    ap_graph_free(g);
  }
  cr_log_info("%d gradients summed at their owners: %.0f bytes, %.0f sending every copy to "
              "every other; worst device %.3f x twice its box",
              tl.count, tl.owners, tl.baseline, worst);
  cr_expect_lt(tl.owners, tl.baseline, "no element has three copies: nothing shows the saving");
  /* The owning shared out: no device sums and sends back much more than
   * its box (the lowest-ranked holder owning all made one device of GPT-2
   * tiny's 256 send 22 times its share). */
  cr_expect_leq(worst, 1.5, "a device sends %.3f times twice its box", worst);
}

static bool box_in(int rank, const ap_dbox *inner, const ap_dbox *outer) {
  for (int i = 0; i < rank; i++)
    if (inner->lo[i] < outer->lo[i] || inner->hi[i] > outer->hi[i])
      return false;
  return true;
}

/* One partial-sum reduction summed at its owners, checked element by
 * element: each element has one owner among the devices holding it, which
 * receives every summand held there exactly once (its own by a local
 * piece), each from a device holding it; the spread sends the sum to every
 * other holder exactly once. The bytes are (k - 1) + (h - 1) elements for
 * an element held by h devices with k summands among them, into *owners,
 * where sending every device each other summand of its box moved h(k - 1),
 * into *all. Returns the elements that break a rule. */
static int64_t owner_reduce_errors(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box,
                                   int n, double *owners, double *all) {
  const ap_value *val = &g->values[t->value];
  int S = t->n_summands;
  int64_t numel = ap_numel(val->rank, val->dims), bad = 0;
  int *holders = calloc((size_t)numel, sizeof *holders);
  int *owner = malloc((size_t)numel * sizeof *owner);
  int *held_by = calloc((size_t)(numel * S), sizeof *held_by);   /* per summand */
  int *got = calloc((size_t)(numel * S), sizeof *got);           /* at the owner */
  uint8_t *holds = calloc((size_t)(numel * n), sizeof *holds);   /* per device */
  uint8_t *spread = calloc((size_t)(numel * n), sizeof *spread); /* sums received */
  int64_t *flat = malloc((size_t)(numel ? numel : 1) * sizeof *flat);
  cr_assert(holders && owner && held_by && got && holds && spread && flat);
  for (int64_t e = 0; e < numel; e++)
    owner[e] = -1;
  for (int d = 0; d < n; d++) {
    int64_t vol = ap_dbox_volume(val->rank, &box[d]);
    box_elements(val, &box[d], flat);
    for (int64_t q = 0; q < vol; q++) {
      holders[flat[q]]++;
      held_by[flat[q] * S + t->summand[d]]++;
      holds[flat[q] * n + d] = 1;
    }
  }
  for (int pass = 0; pass < 2; pass++) /* the owners (local pieces), then the summands */
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int64_t vol = ap_dbox_volume(val->rank, &pc->box);
      if ((pc->from == pc->to) != (pass == 0))
        continue;
      bad += !box_in(val->rank, &pc->box, &box[pc->from]) ||
             !box_in(val->rank, &pc->box, &box[pc->to]) || pc->summand != t->summand[pc->from];
      box_elements(val, &pc->box, flat);
      for (int64_t q = 0; q < vol; q++) {
        if (pass == 0)
          bad += owner[flat[q]] >= 0; /* two owners */
        if (pass == 0)
          owner[flat[q]] = pc->to;
        bad += owner[flat[q]] != pc->to; /* a summand not sent to the owner */
        got[flat[q] * S + pc->summand]++;
      }
    }
  for (int k = 0; t->spread && k < t->spread->n_pieces; k++) {
    const ap_dpiece *pc = &t->spread->pieces[k];
    int64_t vol = ap_dbox_volume(val->rank, &pc->box);
    box_elements(val, &pc->box, flat);
    for (int64_t q = 0; q < vol; q++) {
      bad += pc->from != owner[flat[q]] || pc->to == pc->from || !holds[flat[q] * n + pc->to];
      spread[flat[q] * n + pc->to]++;
    }
  }
  *owners = *all = 0;
  for (int64_t e = 0; e < numel; e++) {
    if (!holders[e])
      continue;
    int distinct = 0;
    bool ok = owner[e] >= 0;
    for (int s = 0; s < S; s++) {
      distinct += held_by[e * S + s] > 0;
      ok &= got[e * S + s] == (held_by[e * S + s] > 0);
    }
    for (int d = 0; d < n; d++)
      ok &= spread[e * n + d] == (holds[e * n + d] && d != owner[e]);
    bad += !ok;
    *owners += (distinct - 1) + (holders[e] - 1);
    *all += (double)holders[e] * (distinct - 1);
  }
  free(holders);
  free(owner);
  free(held_by);
  free(got);
  free(holds);
  free(spread);
  free(flat);
  return bad;
}

/* Partial sums of three summands or more over boxes that meet without
 * being equal (a type II layer under a split of another dimension over a
 * mixed array) are summed at each element's owner and the sum sent on
 * (AP_DX_OWNER_REDUCE), checked element by element (owner_reduce_errors);
 * the bytes the program moves and those ap_distribute_priced prices
 * without the pieces are (k - 1) + (h - 1) elements each, where sending
 * every device each other summand of its box moved h(k - 1). */
Test(plan_bytes, partial_sums_over_meeting_boxes_are_summed_at_their_owners, .timeout = 600) {
  static const char *const cases[][3] = {{"gpt2_tiny", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"gpt2_tiny", "tpuv3:1,tpuv2:3,cpu:2", "accpar"},
                                         {"bert_tiny", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"resnet_small", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"resnet_small", "tpuv3:1,tpuv2:3,cpu:2", "accpar"}};
  owner_tally tl = {0};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ap_devices dv;
    ap_graph *g = owners_case(cases[c], &dv);
    ap_diag d = {0};
    ap_dist *dist, *priced;
    cr_assert_eq(ap_distribute_train(g, NULL, NULL, &dist, &d), AP_OK, "%s", d.message);
    cr_assert_eq(ap_distribute_priced(g, NULL, NULL, &priced, &d), AP_OK, "%s", d.message);
    int n = dist->n_dev, before = tl.count;
    double *bytes = calloc((size_t)n, sizeof *bytes);
    cr_assert(bytes);
    for (int ni = 0; ni < g->n_nodes; ni++) {
      const ap_dxfer *t = dist->node[ni].reduce, *tp = priced->node[ni].reduce;
      if (g->nodes[ni].dead || !t || t->kind != AP_DX_OWNER_REDUCE)
        continue;
      cr_assert(tp && tp->kind == AP_DX_OWNER_REDUCE, "%s: priced as another kind",
                g->nodes[ni].name);
      double owners, all;
      int64_t bad = owner_reduce_errors(g, t, dist->node[ni].out[0], n, &owners, &all);
      cr_expect_eq(bad, 0, "%s on %s (%s): node %s: %lld elements break the owners' rules",
                   cases[c][0], cases[c][1], cases[c][2], g->nodes[ni].name, (long long)bad);
      for (int e = 0; e < n; e++)
        bytes[e] = 0;
      ap_dxfer_charge(g, t, dist->node[ni].out[0], n, bytes);
      for (int e = 0; e < n; e++) {
        cr_expect_eq(t->sent[e], tp->sent[e], "%s: device %d sends %.0f, priced %.0f",
                     g->nodes[ni].name, e, t->sent[e], tp->sent[e]);
        cr_expect_eq(t->received[e], tp->received[e], "%s: device %d receives %.0f, priced %.0f",
                     g->nodes[ni].name, e, t->received[e], tp->received[e]);
      }
      tally(&tl, cases[c], g->nodes[ni].name, bytes, n, owners, all);
    }
    cr_expect_gt(tl.count, before, "%s on %s (%s): no partial sums summed at their owners",
                 cases[c][0], cases[c][1], cases[c][2]);
    free(bytes);
    ap_graph_free(g);
  }
  cr_log_info("%d partial sums summed at their owners: %.0f bytes, %.0f sending every device "
              "each other summand", tl.count, tl.owners, tl.baseline);
  cr_expect_lt(tl.owners, tl.baseline, "no element has three summands: nothing shows the saving");
}

/* The exchanges of one plan, checked piece by piece against the boxes
 * replicas hold (devices holding an equal box of the value): every piece
 * lies in its sender's box, no receiver receives an element twice, and the
 * bytes priced without the pieces are the pieces' device by device. For
 * each replicated box something is sent from, its busiest holder's
 * elements go to *busiest, and the mean of its holders that could send
 * (no more than the receivers) to *share. Counts the elements that break
 * a rule into bad. */
typedef struct replica_tally {
  int64_t bad;
  int groups, spread; /* replicated boxes something was sent from; by more than one holder */
  double busiest, share;
} replica_tally;

static int cmp_piece_to(const void *a, const void *b) {
  const ap_dpiece *x = *(const ap_dpiece *const *)a, *y = *(const ap_dpiece *const *)b;
  return (x->to > y->to) - (x->to < y->to);
}

static void replica_sends(const ap_graph *g, const ap_dist *dist, const ap_dxfer *t,
                          const ap_dxfer *priced, replica_tally *rt) {
  const ap_value *val = &g->values[t->value];
  int n = dist->n_dev;
  int64_t numel = ap_numel(val->rank, val->dims);
  int *stamp = malloc((size_t)numel * sizeof *stamp), *group = malloc((size_t)n * sizeof *group);
  int *receivers = calloc((size_t)n, sizeof *receivers), *last = malloc((size_t)n * sizeof *last);
  int64_t *flat = malloc((size_t)numel * sizeof *flat);
  double *sent = calloc((size_t)n, sizeof *sent);
  ap_dbox *held = malloc((size_t)n * sizeof *held);
  const ap_dpiece **by_to = malloc((size_t)(t->n_pieces + 1) * sizeof *by_to);
  cr_assert(stamp && group && receivers && last && flat && sent && held && by_to);
  for (int64_t e = 0; e < numel; e++)
    stamp[e] = -1;
  for (int d = 0; d < n; d++) {
    cr_expect_eq(t->sent[d], priced->sent[d], "%s: device %d sends %.0f, priced %.0f",
                 val->name, d, t->sent[d], priced->sent[d]);
    cr_expect_eq(t->received[d], priced->received[d], "%s: device %d receives %.0f, priced %.0f",
                 val->name, d, t->received[d], priced->received[d]);
    held[d] = ap_dist_held(g, dist, t->value, d);
    last[d] = -1;
    group[d] = d;
    for (int f = 0; f < d && group[d] == d; f++)
      if (ap_dbox_equal(val->rank, &held[f], &held[d]))
        group[d] = f;
  }
  for (int k = 0; k < t->n_pieces; k++)
    by_to[k] = &t->pieces[k];
  qsort(by_to, (size_t)t->n_pieces, sizeof *by_to, cmp_piece_to);
  for (int k = 0; k < t->n_pieces; k++) {
    const ap_dpiece *pc = by_to[k];
    if (pc->from == pc->to)
      continue;
    int64_t vol = ap_dbox_volume(val->rank, &pc->box);
    rt->bad += box_in(val->rank, &pc->box, &held[pc->from]) ? 0 : vol;
    box_elements(val, &pc->box, flat);
    for (int64_t q = 0; q < vol; q++) {
      rt->bad += stamp[flat[q]] == pc->to;
      stamp[flat[q]] = pc->to;
    }
    sent[pc->from] += (double)vol;
    receivers[pc->from] += last[pc->from] != pc->to;
    last[pc->from] = pc->to;
  }
  for (int f = 0; f < n; f++) {
    int r = 0, senders = 0, served = 0;
    double total = 0, most = 0;
    for (int d = f; d < n; d++)
      if (group[d] == f) {
        r++;
        senders += sent[d] > 0;
        served += receivers[d];
        total += sent[d];
        most = sent[d] > most ? sent[d] : most;
      }
    if (r < 2 || total == 0)
      continue;
    rt->groups++;
    rt->spread += senders > 1;
    rt->busiest += most;
    rt->share += total / (served < r ? served : r);
  }
  free(stamp);
  free(group);
  free(receivers);
  free(last);
  free(flat);
  free(sent);
  free(held);
  free(by_to);
}

/* A box that several devices hold (the levels below a replicated layout)
 * is sent by all of them, its holders taking the receivers in turn
 * (passes/distribute.c, sender). Its first holder sending to every
 * receiver made that device send 21 times its share on BERT-base over 2048
 * devices. */
Test(plan_bytes, a_box_its_replicas_hold_is_sent_by_all_of_them, .timeout = 600) {
  static const char *const cases[][2] = {
      {"bert_tiny", "cpu:64"}, {"gpt2_tiny", "cpu:256"}, {"vit_tiny", "cpu:64"},
      {"bert_tiny", "cpu:256"}, {"gpt2_tiny", "tpuv3:8,tpuv2:56"}};
  char dir[600], path[700];
  zoo_in("replicas", "--no-weights --batch 8 gpt2_tiny bert_tiny vit_tiny", dir, sizeof dir);
  replica_tally all = {0};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ap_devices dv;
    snprintf(path, sizeof path, "%s/%s.onnx", dir, cases[c][0]);
    ap_graph *g = planned(path, cases[c][1], "accpar", &dv);
    ap_diag d = {0};
    ap_dist *dist, *priced;
    cr_assert_eq(ap_distribute_train(g, NULL, NULL, &dist, &d), AP_OK, "%s", d.message);
    cr_assert_eq(ap_distribute_priced(g, NULL, NULL, &priced, &d), AP_OK, "%s", d.message);
    replica_tally rt = {0};
    for (int ni = 0; ni < g->n_nodes; ni++)
      for (int i = 0; i < g->nodes[ni].n_in && !g->nodes[ni].dead && dist->node[ni].xfer_in; i++)
        if (dist->node[ni].xfer_in[i])
          replica_sends(g, dist, dist->node[ni].xfer_in[i], priced->node[ni].xfer_in[i], &rt);
    if (dist->loss_xfer)
      replica_sends(g, dist, dist->loss_xfer, priced->loss_xfer, &rt);
    cr_expect_eq(rt.bad, 0, "%s on %s: %lld elements received twice or from a device without "
                 "them", cases[c][0], cases[c][1], (long long)rt.bad);
    cr_log_info("%s on %s: %d replicated boxes sent, %d by several holders; busiest holder "
                "%.3f times the mean",
                cases[c][0], cases[c][1], rt.groups, rt.spread,
                rt.share > 0 ? rt.busiest / rt.share : 0);
    all.groups += rt.groups;
    all.spread += rt.spread;
    all.busiest += rt.busiest;
    all.share += rt.share;
    ap_graph_free(g);
  }
  cr_expect_gt(all.spread, 0, "no replicated box was sent by several holders");
  cr_expect_leq(all.busiest, 1.25 * all.share,
                "the busiest holders of replicated boxes send %.3f times their mean",
                all.busiest / all.share);
}
