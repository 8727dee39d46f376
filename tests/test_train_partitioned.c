/* Partitioned training through the driver: every strategy (dp, owt, hypar,
 * accpar: type I, II and III layers) on 2, 3 and 4 devices, homogeneous and
 * heterogeneous, gives the losses and the updated weights of the one-device
 * program after 3 steps, the bytes each device sends equal the program's
 * prediction, and that prediction is the plan's training-step bytes
 * (`accparc plan --format json`, device_step_bytes). */
#define _GNU_SOURCE /* vasprintf */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "passes/distribute.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"
#include "tests/test_util.h"

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"
#define WORK ACCPAR_BINARY_DIR "/tests/train_partitioned"

enum { MAX_DEV = 8, STEPS = 3, JOBS = 2 };
/* Sums over the batch split across devices change the order of float
 * additions: agreement to 1e-4 relative (plus 1e-6 absolute for elements
 * near zero). */
static const double RTOL = 1e-4, ATOL = 1e-6;

/* Language models learn per token (labels [N, S]), BERT per sequence. */
static const char *const models[] = {"mlp",          "lenet5",    "resnet_small",
                                     "inception_block", "gpt2_tiny", "bert_tiny"};
/* Every model trains on every array; under the sanitizers, where memory
 * errors are looked for, on one of a homogeneous and a mixed array, the
 * models taking them in turn (model_array). */
#if defined(__SANITIZE_ADDRESS__)
static const char *const arrays[] = {"cpu:3", "tpuv3:1,tpuv2:2"};
static const int ndev[] = {3, 3};
enum { N_ARRAYS = 2, ARRAYS_PER_MODEL = 1 };
#else
static const char *const arrays[] = {"cpu:2", "cpu:3", "cpu:4", "tpuv3:1,tpuv2:2",
                                     "tpuv3:2,tpuv2:2"};
static const int ndev[] = {2, 3, 4, 3, 4};
enum { N_ARRAYS = 5, ARRAYS_PER_MODEL = N_ARRAYS };
#endif

/* The i-th array model m trains on (an index into arrays). */
static int model_array(int m, int i) { return (m + i) % N_ARRAYS; }
static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
enum { N_MODELS = 6, N_STRATEGIES = 4 };


/* A message, truncated if it must be. */
__attribute__((format(printf, 3, 4))) static void say(char *buf, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, cap, f, ap);
  va_end(ap);
}




static bool close_enough(double got, double want) {
  return fabs(got - want) <= ATOL + RTOL * fabs(want);
}

/* Every output_N.pb of want_dir (the logits, then the updated weights)
 * matches got_dir's; the count of outputs goes to *count. */
static bool outputs_close(const char *want_dir, const char *got_dir, int *count, char *why,
                          size_t cap) {
  *count = 0;
  for (int n = 0;; n++) {
    char want_path[4096], got_path[4096];
    fmt(want_path, sizeof want_path, "%s/output_%d.pb", want_dir, n);
    fmt(got_path, sizeof got_path, "%s/output_%d.pb", got_dir, n);
    if (!exists(want_path))
      return n > 0 || (say(why, cap, "%s holds no output", want_dir), false);
    ap_arena *a = ap_arena_new();
    ap_diag d = {0};
    ap_tensor got, want;
    cr_assert(a);
    bool ok = false;
    if (ap_read_tensor_pb(want_path, a, &want, NULL, &d) != AP_OK ||
        ap_read_tensor_pb(got_path, a, &got, NULL, &d) != AP_OK)
      say(why, cap, "%s", d.message);
    else if (got.numel != want.numel || got.dtype != want.dtype)
      say(why, cap, "%s: %lld elements, expected %lld", got_path, (long long)got.numel,
               (long long)want.numel);
    else {
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < want.numel; i++)
        if (!close_enough(ap_tensor_get_f64(&got, i), ap_tensor_get_f64(&want, i))) {
          if (first < 0)
            first = i;
          bad++;
        }
      ok = bad == 0;
      if (!ok)
        say(why, cap, "%s: %lld of %lld elements differ; first at %lld: %.9g, expected %.9g",
                 got_path, (long long)bad, (long long)want.numel, (long long)first,
                 ap_tensor_get_f64(&got, first), ap_tensor_get_f64(&want, first));
    }
    ap_arena_free(a);
    if (!ok)
      return false;
    (*count)++;
  }
}

static void make_models(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
  /* Batch 12: every device of every array gets a share. */
  cr_assert_eq(system("'" ZOO "' --seed 2 --batch 12 -o '" WORK "' mlp lenet5 resnet_small "
                      "inception_block gpt2_tiny bert_tiny >/dev/null"),
               0);
  fast_builds();
}

/* Compile for devices with a strategy, run 3 steps on the seeded data,
 * write the outputs and the report, and the plan's JSON beside. */
static char *job(const char *backend, const char *model, const char *devices,
                 const char *strategy, const char *work) {
  return xprintf(
      "rm -rf '%s' && mkdir -p '%s/out' && "
      "'%s' compile '" WORK "/%s.onnx' --devices %s --strategy %s --mode train %s-o '%s/prog' "
      ">'%s.log' 2>&1 && "
      "'%s/prog/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/out' --report "
      "'%s/report.json' >>'%s.log' 2>&1 && "
      "{ [ %s = cpu:1 ] || '%s' plan '" WORK "/%s.onnx' --devices %s --strategy %s "
      "--format json >'%s/plan.json' 2>>'%s.log'; } && rm -rf '%s/prog'",
      work, work, ACCPARC, model, devices, strategy, backend_option(backend), work, work, work,
      STEPS, work, work, work, devices, ACCPARC, model, devices, strategy, work, work, work);
}

/* The run in w trained as the one-device run in ref, whose losses are
 * want: the same losses and outputs (the logits, then the weights) within
 * the tolerances, and on each of its nd devices the bytes the runtime
 * counted equal to those lowering predicted and to the plan's step bytes
 * times the steps. The outputs compared go to *count. */
static bool trains_as_one_device(const char *w, const char *ref, const double *want, int nd,
                                 int *count) {
  char report[4200], out[4200], ref_out[4200], why[1024] = "";
  double got[STEPS + 1], sent[MAX_DEV], predicted[MAX_DEV], plan[MAX_DEV];
  fmt(report, sizeof report, "%s/report.json", w);
  cr_assert_eq(json_array(report, "losses", got, STEPS + 1), STEPS, "%s", report);
  bool same = true;
  for (int s = 0; s < STEPS; s++) {
    cr_expect(close_enough(got[s], want[s]), "%s: step %d loss %.9g, one device %.9g", w, s + 1,
              got[s], want[s]);
    same &= close_enough(got[s], want[s]);
  }
  fmt(out, sizeof out, "%s/out", w);
  fmt(ref_out, sizeof ref_out, "%s/out", ref);
  bool match = outputs_close(ref_out, out, count, why, sizeof why);
  cr_expect(match, "%s: %s", w, why);
  /* The logits and at least one weight per layer. */
  cr_expect_geq(*count, 4, "%s: %d outputs", w, *count);
  if (!match)
    *count = 0;
  cr_assert_eq(json_array(report, "bytes_sent", sent, MAX_DEV), nd, "%s", report);
  cr_assert_eq(json_array(report, "predicted_bytes", predicted, MAX_DEV), nd, "%s", report);
  fmt(report, sizeof report, "%s/plan.json", w);
  cr_assert_eq(json_array(report, "device_step_bytes", plan, MAX_DEV), nd, "%s", report);
  bool bytes = true;
  for (int dev = 0; dev < nd; dev++) {
    cr_expect_eq(sent[dev], predicted[dev], "%s: device %d sent %.0f bytes, predicted %.0f", w,
                 dev, sent[dev], predicted[dev]);
    cr_expect_gt(sent[dev], 0, "%s: device %d sent nothing", w, dev);
    cr_expect_eq(predicted[dev], STEPS * plan[dev],
                 "%s: device %d predicts %.0f bytes for %d steps; the plan's step is %.0f", w,
                 dev, predicted[dev], STEPS, plan[dev]);
    bytes &= sent[dev] == predicted[dev] && predicted[dev] == STEPS * plan[dev];
  }
  return same && match && bytes;
}

static void every_strategy(const char *backend) {
  enum { PER_MODEL = 1 + N_STRATEGIES * ARRAYS_PER_MODEL, N = N_MODELS * PER_MODEL };
  fast_builds();
  /* The models this backend trains: all of them, or under the sanitizers
   * with llvm a CNN and a transformer (lenet5, gpt2_tiny). */
  const char *use[N_MODELS];
  int n_models = 0;
  for (int m = 0; m < N_MODELS; m++)
    if (LLVM_SUBSET == 1 || strcmp(backend, "llvm") != 0 || m == 1 || m == 4)
      use[n_models++] = models[m];
  char **cmds = calloc(N, sizeof *cmds);
  char (*works)[4096] = calloc(N, sizeof *works);
  int status[N] = {0}, n = 0;
  cr_assert(cmds && works);
  for (int m = 0; m < n_models; m++) {
    fmt(works[n], sizeof works[n], "%s/%s-%s-cpu1", WORK, backend, use[m]);
    cmds[n] = job(backend, use[m], "cpu:1", "dp", works[n]);
    n++;
    for (int st = 0; st < N_STRATEGIES; st++)
      for (int i = 0; i < ARRAYS_PER_MODEL; i++) {
        int a = model_array(m, i);
        fmt(works[n], sizeof works[n], "%s/%s-%s-%s-%s", WORK, backend, use[m], strategies[st],
            arrays[a]);
        cmds[n] = job(backend, use[m], arrays[a], strategies[st], works[n]);
        n++;
      }
  }
  run_all(cmds, n, JOBS, status);
  int agree = 0, weights = 0;
  for (int m = 0; m < n_models; m++) {
    int ref = m * PER_MODEL;
    cr_assert(ran(status[ref]), "%s on cpu:1 failed (see %s.log)", use[m], works[ref]);
    char report[4200];
    double want[STEPS + 1];
    fmt(report, sizeof report, "%s/report.json", works[ref]);
    cr_assert_eq(json_array(report, "losses", want, STEPS + 1), STEPS, "%s", report);
    for (int j = ref + 1; j < ref + PER_MODEL; j++) {
      int a = model_array(m, (j - ref - 1) % ARRAYS_PER_MODEL);
      cr_expect(ran(status[j]), "%s failed (see %s.log)", works[j], works[j]);
      if (!ran(status[j]))
        continue;
      int count;
      agree += trains_as_one_device(works[j], works[ref], want, ndev[a], &count);
      weights += count;
    }
  }
  for (int i = 0; i < n; i++)
    free(cmds[i]);
  free(cmds);
  free(works);
  int runs = n_models * N_STRATEGIES * ARRAYS_PER_MODEL;
  cr_log_info("training (%s): %d of %d model x strategy x array runs agree with one device (%d "
              "outputs compared)",
              backend, agree, runs, weights);
  cr_expect_eq(agree, runs);
}

Test(train_partitioned, every_strategy_equals_one_device_on_2_3_4_devices, .init = make_models,
     .timeout = 3600) {
  every_strategy("c");
}

Test(train_partitioned, every_strategy_equals_one_device_on_2_3_4_devices_llvm,
     .init = make_models, .timeout = 3600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  every_strategy("llvm");
}

/* Whether transfer t sends pieces from two devices holding equal boxes of
 * its value: a replicated box sent by several of its holders. */
static bool sent_by_replicas(const ap_graph *g, const ap_dist *dist, const ap_dxfer *t) {
  int rank = g->values[t->value].rank;
  for (int k = 0; k < t->n_pieces; k++)
    for (int q = 0; q < k; q++) {
      int a = t->pieces[k].from, b = t->pieces[q].from;
      ap_dbox ha = ap_dist_held(g, dist, t->value, a), hb = ap_dist_held(g, dist, t->value, b);
      if (a != b && a != t->pieces[k].to && b != t->pieces[q].to && ap_dbox_equal(rank, &ha, &hb))
        return true;
    }
  return false;
}

/* What the plan of model (under WORK) on devices with strategy shows
 * (passes/distribute.h): AT_OWNERS_GRADIENT where a weight's gradient is
 * summed at its owners (AP_DX_OWNER_SUM), AT_OWNERS_PARTIAL where a
 * layer's partial sums (AP_DX_OWNER_REDUCE), BY_REPLICAS where a replicated box
 * is sent by several of its holders. */
enum { AT_OWNERS_GRADIENT = 1, AT_OWNERS_PARTIAL = 2, BY_REPLICAS = 4 };
static int sums_at_owners(const char *model, const char *devices, const char *strategy) {
  char *path = xprintf(WORK "/%s.onnx", model);
  ap_graph *g = NULL;
  ap_diag d = {0};
  ap_devices dv;
  ap_plan_opts o = {.devices = &dv};
  ap_dist *dist;
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_devices_parse(devices, &dv, &d), AP_OK, "%s", d.message);
  cr_assert(ap_strategy_parse(strategy, &o.strategy));
  cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_distribute_train(g, NULL, NULL, &dist, &d), AP_OK, "%s", d.message);
  int found = 0;
  for (int v = 0; v < g->n_values; v++)
    if (dist->wgrad[v] && dist->wgrad[v]->kind == AP_DX_OWNER_SUM)
      found |= AT_OWNERS_GRADIENT;
  for (int ni = 0; ni < g->n_nodes; ni++)
    if (!g->nodes[ni].dead && dist->node[ni].reduce &&
        dist->node[ni].reduce->kind == AP_DX_OWNER_REDUCE)
      found |= AT_OWNERS_PARTIAL;
  for (int ni = 0; ni < g->n_nodes; ni++)
    for (int i = 0; i < g->nodes[ni].n_in && !g->nodes[ni].dead && dist->node[ni].xfer_in; i++)
      if (dist->node[ni].xfer_in[i] && sent_by_replicas(g, dist, dist->node[ni].xfer_in[i]))
        found |= BY_REPLICAS;
  ap_graph_free(g);
  free(path);
  return found;
}

/* A weight whose devices' boxes meet without being equal has its gradient
 * summed at each element's owner and sent back: GPT-2 tiny's tied table
 * over seven devices, BERT tiny's word embeddings and ResNet's
 * convolutions split unevenly over mixed arrays. Partial sums of three
 * summands or more over such boxes are summed at their owners too (the
 * ResNet's, GPT-2 tiny's with hypar), their errors sent back to each
 * summand once. At batch 8 these plans have such sums (the sweep's batch
 * 12 has none). A box that several devices hold is sent by all of them,
 * taking the receivers in turn (passes/distribute.c, sender), and each
 * error goes back to the holder that sent the piece: the tiny transformers
 * on six devices, the small ResNet on a mixed array. Each plan trains as
 * on one device, and each device sends the bytes predicted. */
static void owner_sums(const char *backend) {
  static const char *const cases[][3] = {{"owners/gpt2_tiny", "tpuv3:1,tpuv2:6", "accpar"},
                                         {"owners/bert_tiny", "tpuv3:1,tpuv2:2", "hypar"},
                                         {"owners/resnet_small", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"owners/gpt2_tiny", "tpuv3:2,tpuv2:6", "hypar"},
                                         {"owners/gpt2_tiny", "cpu:6", "accpar"},
                                         {"owners/bert_tiny", "cpu:6", "accpar"},
                                         {"owners/resnet_small", "tpuv3:2,tpuv2:6", "accpar"}};
  static const int nd[] = {7, 3, 8, 8, 6, 6, 8};
  static const int at_owners[] = {AT_OWNERS_GRADIENT, AT_OWNERS_GRADIENT,
                                  AT_OWNERS_GRADIENT | AT_OWNERS_PARTIAL, AT_OWNERS_PARTIAL,
                                  BY_REPLICAS, BY_REPLICAS, BY_REPLICAS};
  enum { N_CASES = 7 };
  fast_builds();
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
  cr_assert_eq(system("'" ZOO "' --seed 2 --batch 8 -o '" WORK "/owners' gpt2_tiny bert_tiny "
                      "resnet_small >/dev/null"),
               0);
  char *cmds[2 * N_CASES], works[2 * N_CASES][4096];
  int status[2 * N_CASES] = {0};
  for (int c = 0; c < N_CASES; c++) {
    int found = sums_at_owners(cases[c][0], cases[c][1], cases[c][2]);
    cr_assert_eq(found & at_owners[c], at_owners[c],
                 "%s on %s (%s) shows %d of the features %d", cases[c][0], cases[c][1],
                 cases[c][2], found & at_owners[c], at_owners[c]);
    fmt(works[2 * c], sizeof works[2 * c], "%s/%s-%s-cpu1-%d", WORK, backend, cases[c][0], c);
    cmds[2 * c] = job(backend, cases[c][0], "cpu:1", "dp", works[2 * c]);
    fmt(works[2 * c + 1], sizeof works[2 * c + 1], "%s/%s-%s-%s-%d", WORK, backend,
        cases[c][0], cases[c][2], c);
    cmds[2 * c + 1] = job(backend, cases[c][0], cases[c][1], cases[c][2], works[2 * c + 1]);
  }
  run_all(cmds, 2 * N_CASES, JOBS, status);
  for (int c = 0; c < N_CASES; c++) {
    const char *ref = works[2 * c], *w = works[2 * c + 1];
    char report[4200];
    double want[STEPS + 1];
    int count;
    cr_assert(ran(status[2 * c]), "%s failed (see %s.log)", ref, ref);
    cr_assert(ran(status[2 * c + 1]), "%s failed (see %s.log)", w, w);
    fmt(report, sizeof report, "%s/report.json", ref);
    cr_assert_eq(json_array(report, "losses", want, STEPS + 1), STEPS, "%s", report);
    cr_expect(trains_as_one_device(w, ref, want, nd[c], &count), "%s", w);
  }
  for (int i = 0; i < 2 * N_CASES; i++)
    free(cmds[i]);
}

Test(train_partitioned, gradients_summed_at_their_owners_train_as_on_one_device,
     .timeout = 1800) {
  owner_sums("c");
}

Test(train_partitioned, gradients_summed_at_their_owners_train_as_on_one_device_llvm,
     .timeout = 1800) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  owner_sums("llvm");
}

/* Two runs of one model in w, run x and run y (their outputs in w/x and
 * w/y, their reports w/x.json and w/y.json), train alike: the same losses
 * and outputs (the weights) within the tolerances and the same bytes on
 * every device; the device count goes to *n_dev. */
static void runs_agree(const char *w, const char *x, const char *y, int *n_dev) {
  char a[4200], b[4200], why[1024] = "";
  double la[STEPS + 1], lb[STEPS + 1], sa[MAX_DEV], sb[MAX_DEV];
  fmt(a, sizeof a, "%s/%s.json", w, x);
  fmt(b, sizeof b, "%s/%s.json", w, y);
  cr_assert_eq(json_array(a, "losses", la, STEPS + 1), STEPS);
  cr_assert_eq(json_array(b, "losses", lb, STEPS + 1), STEPS);
  for (int s = 0; s < STEPS; s++)
    cr_expect(close_enough(lb[s], la[s]), "step %d: %s %.9g, %s %.9g", s + 1, y, lb[s], x,
              la[s]);
  *n_dev = json_array(a, "bytes_sent", sa, MAX_DEV);
  cr_assert_eq(json_array(b, "bytes_sent", sb, MAX_DEV), *n_dev);
  for (int dev = 0; dev < *n_dev; dev++)
    cr_expect_eq(sb[dev], sa[dev], "device %d: %s %.0f bytes, %s %.0f", dev, y, sb[dev], x,
                 sa[dev]);
  int count;
  fmt(a, sizeof a, "%s/%s", w, x);
  fmt(b, sizeof b, "%s/%s", w, y);
  cr_expect(outputs_close(a, b, &count, why, sizeof why), "%s", why);
}

static void under_mpi(const char *backend) {
  const char *lib = ACCPAR_BINARY_DIR "/runtime/libaccpar_rt_mpi.a";
  if (system("command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1") != 0 ||
      !exists(lib))
    cr_skip_test("no mpirun, mpicc or %s", lib);
  /* The same program under both transports: one process per device must
   * give the threads' losses, weights and bytes. */
  char w[4096], cmd[16384];
  fmt(w, sizeof w, "%s/mpi-%s", WORK, backend);
  /* OpenMPI's start-up allocations in every rank (from dlopen'd components)
   * are never freed; leak checking stays on for the same programs under
   * the threads transport. */
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/threads' '%s/mpi' && CC=mpicc ACCPAR_RT_LIB='%s' '%s' compile "
      "'" WORK "/lenet5.onnx' --devices tpuv3:1,tpuv2:2 --strategy accpar --mode train %s"
      "-o '%s/prog' "
      ">'%s.log' 2>&1 && '%s/prog/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/threads' "
      "--report '%s/threads.json' >>'%s.log' 2>&1 && ASAN_OPTIONS=detect_leaks=0 "
      "mpirun --allow-run-as-root --oversubscribe "
      "-np 3 '%s/prog/model' --transport mpi --steps %d --lr 0.05 --seed 4 --outputs '%s/mpi' "
      "--report '%s/mpi.json' >>'%s.log' 2>&1",
      w, w, w, lib, ACCPARC, backend_option(backend), w, w, w, STEPS, w, w, w, w, STEPS, w, w, w);
  cr_assert_eq(system(cmd), 0, "see %s.log", w);
  int n_dev;
  runs_agree(w, "threads", "mpi", &n_dev);
  cr_assert_eq(n_dev, 3);
  char b[4200];
  double sb[MAX_DEV], pb[MAX_DEV];
  fmt(b, sizeof b, "%s/mpi.json", w);
  cr_assert_eq(json_array(b, "bytes_sent", sb, MAX_DEV), 3);
  cr_assert_eq(json_array(b, "predicted_bytes", pb, MAX_DEV), 3);
  for (int dev = 0; dev < 3; dev++)
    cr_expect_eq(sb[dev], pb[dev], "device %d under mpi: %.0f bytes, predicted %.0f", dev, sb[dev],
                 pb[dev]);
}

Test(train_partitioned, accpar_under_mpi_equals_threads, .init = make_models, .timeout = 600) {
  under_mpi("c");
}

Test(train_partitioned, accpar_under_mpi_equals_threads_llvm, .init = make_models,
     .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  under_mpi("llvm");
}

/* A training program fuses each of LeNet-5's convolutions with its Relu
 * (codegen/fuse.c: the Relu's derivative reads only its output); on one
 * and on two devices the fused program trains as the one compiled with
 * fusion off, and sends the same bytes. */
static void fused_equals_unfused(const char *devices) {
  char w[4096], cmd[16384];
  fmt(w, sizeof w, "%s/fused-%s", WORK, devices);
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/fused' '%s/unfused' && "
      "'%s' compile '" WORK "/lenet5.onnx' --devices %s --mode train -o '%s/fp' >'%s.log' 2>&1 && "
      "ACCPAR_NO_FUSION=1 '%s' compile '" WORK "/lenet5.onnx' --devices %s --mode train "
      "-o '%s/up' >>'%s.log' 2>&1 && "
      "'%s/fp/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/fused' --report '%s/fused.json' "
      ">>'%s.log' 2>&1 && "
      "'%s/up/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/unfused' --report '%s/unfused.json' "
      ">>'%s.log' 2>&1 && grep -c 'fused relu Conv' '%s/fp/dev0.c' >'%s/n' && "
      "! grep -q 'fused relu' '%s/up/dev0.c'",
      w, w, w, ACCPARC, devices, w, w, ACCPARC, devices, w, w, w, STEPS, w, w, w, w, STEPS, w,
      w, w, w, w, w);
  cr_assert_eq(system(cmd), 0, "see %s.log", w);
  char a[4200];
  fmt(a, sizeof a, "%s/n", w);
  FILE *f = fopen(a, "r");
  int n = 0;
  cr_assert(f && fscanf(f, "%d", &n) == 1, "%s", a);
  fclose(f);
  cr_assert_eq(n, 2, "LeNet-5's two convolutions fused with their Relu: %d", n);
  int n_dev;
  runs_agree(w, "unfused", "fused", &n_dev);
}

Test(train_partitioned, fused_training_equals_unfused, .init = make_models, .timeout = 600) {
  fused_equals_unfused("cpu:1");
  fused_equals_unfused("cpu:2");
}

/* A language model learns: GPT-2 tiny's first loss (per token, over the 256
 * tokens of its vocabulary) is near ln 256, as for untrained logits, and
 * falls at every one of 4 steps on one batch. */
static void gpt2_learns(const char *backend) {
  char w[4096], cmd[8192];
  fmt(w, sizeof w, "%s/lm-%s", WORK, backend);
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s' && '%s' compile '" WORK "/gpt2_tiny.onnx' --devices cpu:1 "
      "--mode train %s-o '%s/prog' >'%s.log' 2>&1 && '%s/prog/model' --steps 4 --lr 0.1 --seed 3 "
      "--report '%s/report.json' >>'%s.log' 2>&1",
      w, w, ACCPARC, backend_option(backend), w, w, w, w, w);
  cr_assert_eq(system(cmd), 0, "see %s.log", w);
  char report[4200];
  double loss[5];
  fmt(report, sizeof report, "%s/report.json", w);
  cr_assert_eq(json_array(report, "losses", loss, 5), 4, "%s", report);
  cr_expect(fabs(loss[0] - log(256.0)) < 1.0, "first loss %.6f, ln 256 = %.6f", loss[0],
            log(256.0));
  for (int s = 1; s < 4; s++)
    cr_expect_lt(loss[s], loss[s - 1], "step %d: %.6f after %.6f", s + 1, loss[s], loss[s - 1]);
}

Test(train_partitioned, gpt2_tiny_learns_as_a_language_model, .init = make_models,
     .timeout = 600) {
  gpt2_learns("c");
}

Test(train_partitioned, gpt2_tiny_learns_as_a_language_model_llvm, .init = make_models,
     .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  gpt2_learns("llvm");
}

/* accparc run trains in memory as the compiled LLVM program does: the same
 * losses and the same weights, bit for bit, on a partitioned array. */
Test(train_partitioned, accparc_run_trains_as_the_compiled_program, .init = make_models,
     .timeout = 600) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc was built without LLVM");
  char w[4096], cmd[16384];
  fmt(w, sizeof w, "%s/run", WORK);
  fmt(cmd, sizeof cmd,
      "rm -rf '%s' && mkdir -p '%s/compiled' '%s/run' && '%s' compile '" WORK "/lenet5.onnx' "
      "--devices tpuv3:1,tpuv2:2 --mode train --backend llvm -o '%s/prog' >'%s.log' 2>&1 && "
      "'%s/prog/model' --steps %d --lr 0.05 --seed 4 --outputs '%s/compiled' "
      "--report '%s/compiled.json' >>'%s.log' 2>&1 && '%s' run '" WORK "/lenet5.onnx' "
      "--devices tpuv3:1,tpuv2:2 --mode train --steps %d --lr 0.05 --seed 4 --outputs '%s/run' "
      "--report '%s/run.json' >>'%s.log' 2>&1",
      w, w, w, ACCPARC, w, w, w, STEPS, w, w, w, ACCPARC, STEPS, w, w, w);
  cr_assert_eq(system(cmd), 0, "see %s.log", w);
  char a[4200], b[4200];
  double la[STEPS + 1], lb[STEPS + 1], sa[MAX_DEV], sb[MAX_DEV];
  fmt(a, sizeof a, "%s/compiled.json", w);
  fmt(b, sizeof b, "%s/run.json", w);
  cr_assert_eq(json_array(a, "losses", la, STEPS + 1), STEPS);
  cr_assert_eq(json_array(b, "losses", lb, STEPS + 1), STEPS);
  for (int s = 0; s < STEPS; s++)
    cr_expect_eq(lb[s], la[s], "step %d: run %.9g, compiled %.9g", s + 1, lb[s], la[s]);
  cr_assert_eq(json_array(a, "bytes_sent", sa, MAX_DEV), 3);
  cr_assert_eq(json_array(b, "bytes_sent", sb, MAX_DEV), 3);
  for (int dev = 0; dev < 3; dev++)
    cr_expect_eq(sb[dev], sa[dev], "device %d: run %.0f bytes, compiled %.0f", dev, sb[dev],
                 sa[dev]);
  for (int n = 0;; n++) {
    fmt(a, sizeof a, "%s/compiled/output_%d.pb", w, n);
    fmt(b, sizeof b, "%s/run/output_%d.pb", w, n);
    if (!exists(a)) {
      cr_assert_gt(n, 4, "only %d outputs", n);
      break;
    }
    fmt(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    cr_expect_eq(system(cmd), 0, "output %d differs between run and the compiled program", n);
  }
}

/* LSTM, GRU, If and Loop, rewritten into existing operators (ir/control.c,
 * ir/recurrent.c), train through time on a mixed array as on one device:
 * tests/op_models.py's ops_recurrent (the R of every time step one weight,
 * the batch split) under every strategy on tpuv3:1,tpuv2:2 (accpar alone
 * under the sanitizers: the unrolled steps make large programs). */
Test(train_partitioned, recurrent_layers_train_as_on_one_device, .timeout = 1200) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
  mkdir(WORK "/op-models", 0777);
  cr_assert_eq(system("/usr/bin/python3 '" ACCPAR_SOURCE_DIR "/tests/op_models.py' '" WORK
                      "/op-models' >/dev/null"),
               0, "op_models.py failed");
  fast_builds();
#if defined(__SANITIZE_ADDRESS__)
  enum { N = 2, FIRST = N_STRATEGIES - 1 };
#else
  enum { N = 1 + N_STRATEGIES, FIRST = 0 };
#endif
  const char *model = "op-models/ops_recurrent", *array = "tpuv3:1,tpuv2:2";
  char *cmds[N], works[N][4096];
  int status[N] = {0};
  fmt(works[0], sizeof works[0], "%s/c-ops_recurrent-cpu1", WORK);
  cmds[0] = job("c", model, "cpu:1", "dp", works[0]);
  for (int st = FIRST; st < N_STRATEGIES; st++) {
    int j = 1 + st - FIRST;
    fmt(works[j], sizeof works[j], "%s/c-ops_recurrent-%s-%s", WORK, strategies[st], array);
    cmds[j] = job("c", model, array, strategies[st], works[j]);
  }
  run_all(cmds, N, JOBS, status);
  cr_assert(ran(status[0]), "ops_recurrent on cpu:1 failed (see %s.log)", works[0]);
  char report[4200], out[4200], ref_out[4200], why[1024];
  double want[STEPS + 1], got[STEPS + 1], sent[MAX_DEV], predicted[MAX_DEV];
  fmt(report, sizeof report, "%s/report.json", works[0]);
  cr_assert_eq(json_array(report, "losses", want, STEPS + 1), STEPS, "%s", report);
  fmt(ref_out, sizeof ref_out, "%s/out", works[0]);
  for (int j = 1; j < N; j++) {
    const char *w = works[j];
    cr_assert(ran(status[j]), "%s failed (see %s.log)", w, w);
    fmt(report, sizeof report, "%s/report.json", w);
    cr_assert_eq(json_array(report, "losses", got, STEPS + 1), STEPS, "%s", report);
    for (int s = 0; s < STEPS; s++)
      cr_expect(close_enough(got[s], want[s]), "%s: step %d loss %.9g, one device %.9g", w,
                s + 1, got[s], want[s]);
    int count;
    fmt(out, sizeof out, "%s/out", w);
    cr_expect(outputs_close(ref_out, out, &count, why, sizeof why), "%s: %s", w, why);
    /* The output and the 11 trained weights (w0, LSTM's 3, GRU's 3, wl, w1-w3). */
    cr_expect_eq(count, 12, "%s: %d outputs", w, count);
    cr_assert_eq(json_array(report, "bytes_sent", sent, MAX_DEV), 3, "%s", report);
    cr_assert_eq(json_array(report, "predicted_bytes", predicted, MAX_DEV), 3, "%s", report);
    for (int dev = 0; dev < 3; dev++)
      cr_expect_eq(sent[dev], predicted[dev], "%s: device %d sent %.0f bytes, predicted %.0f", w,
                   dev, sent[dev], predicted[dev]);
  }
  for (int i = 0; i < N; i++)
    free(cmds[i]);
}
