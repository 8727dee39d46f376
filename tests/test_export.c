/* accparc export: the plan inside a valid ONNX file, readable by other
 * toolchains and by accpar itself: as JSON in metadata_props, and in ONNX's
 * own multi-device annotations (IR version 11), decoded by an independent
 * implementation of the newer schema (tests/ort/read_sharding.mjs) and
 * checked against the plan, and run by ONNX Runtime. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accpar/accpar.h"
#include "ort_compare.h"

#define MODEL ACCPAR_SOURCE_DIR "/tests/golden/models/small_cnn.onnx"
#define WORK ACCPAR_BINARY_DIR "/tests/export"
#define ARGS "--batch 8 --devices tpuv3:1,tpuv2:2"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  cr_assert(s);
  cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

static void make_work(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  mkdir(WORK, 0777);
}

#define ZOO ACCPAR_BINARY_DIR "/samples/accpar-zoo"

Test(export, carries_exactly_the_plan_json_and_passes_the_checker, .init = make_work) {
  cr_assert_eq(system("'" ACCPARC "' export '" MODEL "' " ARGS " -o '" WORK "/a.onnx'"), 0);
  cr_assert_eq(system("'" ACCPARC "' plan '" MODEL "' " ARGS " --format json > '" WORK
                      "/plan.json'"),
               0);
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(WORK "/a.onnx", &g, &d), AP_OK, "%s", d.message);
  const char *inside = ap_graph_metadata(g, "accpar.plan");
  cr_assert_not_null(inside);
  char *printed = slurp(WORK "/plan.json");
  cr_expect_str_eq(inside, printed);
  cr_expect_str_eq(ap_graph_metadata(g, "accpar.version"), ap_version());
  cr_expect(strstr(inside, "\"types\": [") != NULL, "the plan names each layer's types");
  free(printed);
  ap_graph_free(g);
  /* Debian's ONNX 1.12 checker refuses every IR version above its own (8)
   * before it looks at anything else; the annotations need 11. It checks
   * the file with the version lowered to 8: everything else as written,
   * the annotations kept as fields 1.12 does not know. ONNX Runtime runs
   * the file as written (sharding_annotations_run_in_onnx_runtime). */
  if (access("/usr/bin/python3", X_OK) == 0)
    cr_expect_eq(system("/usr/bin/python3 -c \"import onnx,sys; m = onnx.load(sys.argv[1]); "
                        "assert m.ir_version == 11; m.ir_version = onnx.IR_VERSION; "
                        "onnx.checker.check_model(m)\" '" WORK "/a.onnx'"),
                 0, "onnx.checker refused the exported model");
}

/* Every node of small CNNs planned over homogeneous and mixed arrays is
 * either annotated, with its output's shards exactly the plan's boxes, or
 * listed as unexpressed (and then not annotated); the file's configuration
 * is the plan's array. */
Test(export, sharding_annotations_decode_to_the_plans_boxes, .init = make_work) {
  char msg[2048];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  cr_assert_eq(system("'" ZOO "' -o '" WORK "' lenet5 resnet_block > /dev/null"), 0);
  static const char *const models[] = {MODEL, WORK "/lenet5.onnx", WORK "/resnet_block.onnx"};
  static const char *const arrays[] = {"cpu:2", "cpu:3", "cpu:4", "tpuv3:4", "tpuv3:1,tpuv2:2",
                                       "tpuv3:2,tpuv2:2"};
  int annotated = 0, total = 0;
  for (size_t m = 0; m < sizeof models / sizeof *models; m++)
    for (size_t a = 0; a < sizeof arrays / sizeof *arrays; a++) {
      char cmd[2048];
      snprintf(cmd, sizeof cmd,
               "'%s' export '%s' --batch 8 --devices %s -o '" WORK "/s.onnx' 2>'" WORK
               "/s.err' && '%s' plan '%s' --batch 8 --devices %s --format json > '" WORK
               "/s.json'",
               ACCPARC, models[m], arrays[a], ACCPARC, models[m], arrays[a]);
      cr_assert_eq(system(cmd), 0, "%s", cmd);
      char *args[] = {ORT_DIR "/read_sharding.mjs", WORK "/s.onnx", "--against", WORK "/s.json"};
      char *argv[] = {(char *)ort_node(), args[0], args[1], args[2], args[3], NULL};
      char out[2048];
      cr_assert_eq(ort_spawn(argv, out, sizeof out), 0, "%s on %s: %s", models[m], arrays[a],
                   out);
      int checked = 0, skipped = 0;
      cr_assert_eq(sscanf(out, "checked %d annotated nodes, %d unexpressed", &checked, &skipped),
                   2, "%s", out);
      bool even = strchr(arrays[a], ',') == NULL && strcmp(arrays[a], "cpu:3") != 0;
      annotated += even ? checked : 0;
      total += even ? checked + skipped : 0;
      /* Unexpressed nodes are said on stderr, in one line. */
      char *err = slurp(WORK "/s.err");
      cr_expect_eq(skipped > 0, strstr(err, "cannot express") != NULL, "%s on %s: stderr '%s'",
                   models[m], arrays[a], err);
      free(err);
    }
  /* Even arrays (two and four equal devices) annotate most of the nodes;
   * three devices and mixed arrays' ratios split unevenly. */
  cr_expect_gt(annotated, total / 2, "%d of %d nodes annotated", annotated, total);
}

/* ONNX Runtime loads the IR version 11 file and computes what it computes
 * on the model as given. */
Test(export, sharding_annotations_run_in_onnx_runtime, .init = make_work) {
  char msg[2048];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  cr_assert_eq(system("'" ACCPARC "' export '" MODEL "' --batch 8 --devices cpu:2 -o '" WORK
                      "/r.onnx' && '" ACCPARC "' export '" MODEL "' --batch 8 --devices cpu:1 -o '" WORK
                      "/r1.onnx'"),
               0);
  cr_assert(ort_make_inputs(WORK "/r1.onnx", WORK "/r_in", 7, 0, msg, sizeof msg), "%s", msg);
  cr_assert(ort_run(WORK "/r1.onnx", WORK "/r_in", WORK "/r_out1", msg, sizeof msg), "%s", msg);
  cr_assert(ort_run(WORK "/r.onnx", WORK "/r_in", WORK "/r_out2", msg, sizeof msg), "%s", msg);
  cr_expect_eq(system("cmp -s '" WORK "/r_out1/output_0.pb' '" WORK "/r_out2/output_0.pb'"), 0,
               "ONNX Runtime computes something else on the annotated model");
}

Test(export, the_exported_model_plans_to_the_same_types, .init = make_work) {
  cr_assert_eq(system("'" ACCPARC "' export '" MODEL "' " ARGS " -o '" WORK "/b.onnx'"), 0);
  cr_assert_eq(system("'" ACCPARC "' plan '" MODEL "' " ARGS " > '" WORK "/t1.txt' && '" ACCPARC
                      "' plan '" WORK "/b.onnx' --devices tpuv3:1,tpuv2:2 > '" WORK "/t2.txt'"),
               0);
  char *a = slurp(WORK "/t1.txt"), *b = slurp(WORK "/t2.txt");
  /* The first line names the model file; everything after must agree. */
  cr_expect_str_eq(strchr(a, '\n'), strchr(b, '\n'));
  free(a);
  free(b);
}

Test(export, metadata_survives_a_write_and_a_read, .init = make_work) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(MODEL, &g, &d), AP_OK, "%s", d.message);
  cr_assert_null(ap_graph_metadata(g, "k"));
  cr_assert_eq(ap_graph_set_metadata(g, "k", "one"), AP_OK);
  cr_assert_eq(ap_graph_set_metadata(g, "k", "two"), AP_OK);
  cr_assert_eq(ap_graph_set_metadata(g, "other", "x\ny"), AP_OK);
  cr_assert_eq(ap_write_onnx(g, WORK "/m.onnx", &d), AP_OK, "%s", d.message);
  ap_graph_free(g);
  g = NULL;
  cr_assert_eq(ap_load_onnx(WORK "/m.onnx", &g, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(ap_graph_metadata(g, "k"), "two");
  cr_expect_str_eq(ap_graph_metadata(g, "other"), "x\ny");
  ap_graph_free(g);
}

Test(export, refuses_without_output_and_leaves_nothing_on_failure, .init = make_work) {
  int st = system("'" ACCPARC "' export '" MODEL "' " ARGS " 2>/dev/null");
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "a missing -o is a usage error");
  unlink(WORK "/never.onnx");
  st = system("'" ACCPARC "' export '" MODEL "' --devices tpuv3:1,tpuv2:2 -o '" WORK
              "/never.onnx' 2>/dev/null");
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2,
            "a symbolic batch left unbound is a usage error: the export must fail");
  cr_expect_neq(access(WORK "/never.onnx", F_OK), 0, "a failed export left a file behind");
}
