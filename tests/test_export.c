/* accparc export: the plan inside a valid ONNX file, readable by other
 * toolchains (onnx.checker accepts it) and by accpar itself. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accpar/accpar.h"

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
  if (access("/usr/bin/python3", X_OK) == 0)
    cr_expect_eq(system("/usr/bin/python3 -c \"import onnx,sys; "
                        "onnx.checker.check_model(onnx.load(sys.argv[1]))\" '" WORK "/a.onnx'"),
                 0, "onnx.checker refused the exported model");
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
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1,
            "a symbolic batch cannot be planned: the export must fail");
  cr_expect_neq(access(WORK "/never.onnx", F_OK), 0, "a failed export left a file behind");
}
