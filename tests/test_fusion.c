/* Fusion in inference programs (codegen/fuse.c) on tests/fusion_models.py's
 * models: the fused program agrees with ONNX Runtime (C and LLVM backends)
 * and with the same program compiled unfused (ACCPAR_NO_FUSION=1); the
 * fusions named in dev0.c's step comments are the expected ones, and none
 * where a value has another reader; partitioned on two devices the fused
 * program gives the one-device outputs and sends exactly the bytes
 * predicted, the same bytes as unfused. */
#define _GNU_SOURCE /* vasprintf */
#include <criterion/criterion.h>

#include "tests/ort_compare.h"
#include "tests/test_util.h"

#define WORK ACCPAR_BINARY_DIR "/tests/fusion"

static void make_models(void) {
  mkdir(ACCPAR_BINARY_DIR "/tests", 0777);
  fast_builds();
  char cmd[2048];
  fmt(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/fusion_models.py' '%s' >/dev/null 2>&1",
      ACCPAR_SOURCE_DIR, WORK);
  cr_assert_eq(system(cmd), 0, "fusion_models.py failed: %s", cmd);
}

/* Compiles WORK/model.onnx into WORK/tag and runs it on the model's
 * inputs into WORK/tag/got, with the report WORK/tag/report.json. */
static void compile_run(const char *model, const char *tag, const char *env, const char *devices,
                        const char *options) {
  char cmd[8192], why[1024] = "";
  fmt(cmd, sizeof cmd,
      "rm -rf '%s/%s' && %s '%s' compile '%s/%s.onnx' --devices %s --mode infer %s-o '%s/%s' "
      ">'%s/%s.log' 2>&1 && mkdir -p '%s/%s/got' && '%s/%s/model' --inputs '%s/%s_data' "
      "--outputs '%s/%s/got' --report '%s/%s/report.json' >>'%s/%s.log' 2>&1",
      WORK, tag, env, ACCPARC, WORK, model, devices, options, WORK, tag, WORK, tag, WORK, tag,
      WORK, tag, WORK, model, WORK, tag, WORK, tag, WORK, tag);
  int st = system(cmd);
  if (st != 0) {
    char work[1024];
    fmt(work, sizeof work, "%s/%s", WORK, tag);
    log_head(work, why, sizeof why);
  }
  cr_assert_eq(st, 0, "compiling or running %s (%s) failed: %s", model, tag, why);
}

/* The step comments of dev0.c naming a fusion, one per line, in order. */
static void fused_lines(const char *tag, char *buf, size_t cap) {
  char path[1024];
  fmt(path, sizeof path, "%s/%s/dev0.c", WORK, tag);
  FILE *f = fopen(path, "r");
  cr_assert(f, "no %s", path);
  char line[1024];
  size_t len = 0;
  buf[0] = 0;
  while (fgets(line, sizeof line, f)) {
    const char *s = strstr(line, "/* fused ");
    if (!s)
      continue;
    int w = snprintf(buf + len, cap - len, "%s", s + 3);
    cr_assert(w >= 0 && (size_t)w < cap - len, "too many fusions");
    len += (size_t)w;
  }
  fclose(f);
}

static void agrees_with_ort(const char *model, const char *tag) {
  char in[1024], got[1024], msg[2048];
  cr_assert(ort_ready(msg, sizeof msg), "%s", msg);
  fmt(in, sizeof in, "%s/%s_data", WORK, model);
  fmt(got, sizeof got, "%s/%s/got", WORK, tag);
  char onnx[1024];
  fmt(onnx, sizeof onnx, "%s/%s.onnx", WORK, model);
  cr_assert(ort_check(onnx, in, got, ORT_RTOL, ORT_ATOL, msg, sizeof msg), "%s (%s): %s", model,
            tag, msg);
}

static const struct {
  const char *model, *fused; /* the step comments of the fused program's dev0.c */
} cases[] = {
    {"fuse_block", "fused bn+t relu Conv 'conv1' */\n"
                   "fused bn+t Conv 'conv2' */\n"
                   "fused bn+t add relu Conv 'proj' */\n"
                   "fused bn clip(0,6) Conv 'conv3' */\n"
                   "fused sigmoid Conv 'conv4' */\n"},
    {"fuse_fed_weight", "fused bn+s+t leakyrelu(0.200000003) Conv 'conv' */\n"},
    {"fuse_none", ""},
    {"fuse_bn_only", "fused bn Conv 'conv' */\n"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

Test(fusion, c_backend_ort_and_unfused, .init = make_models) {
  for (int i = 0; i < N_CASES; i++) {
    char tag[256], untag[256], fused[4096], want[1024], got[1024], why[1024];
    fmt(tag, sizeof tag, "%s.c", cases[i].model);
    fmt(untag, sizeof untag, "%s.c.unfused", cases[i].model);
    compile_run(cases[i].model, tag, "", "cpu:1", "");
    fused_lines(tag, fused, sizeof fused);
    cr_assert_str_eq(fused, cases[i].fused, "%s: the fusions in dev0.c", cases[i].model);
    agrees_with_ort(cases[i].model, tag);
    if (strcmp(cases[i].model, "fuse_bn_only") == 0) { /* no epilogue: the library call alone */
      char kernels[1024], cmd[2048];
      fmt(kernels, sizeof kernels, "%s/%s/kernels.c", WORK, tag);
      fmt(cmd, sizeof cmd, "! grep -q 'for (' '%s'", kernels);
      cr_assert_eq(system(cmd), 0, "%s has a loop: an empty epilogue", kernels);
    }
    compile_run(cases[i].model, untag, "ACCPAR_NO_FUSION=1", "cpu:1", "");
    fused_lines(untag, fused, sizeof fused);
    cr_assert_str_eq(fused, "", "%s: ACCPAR_NO_FUSION=1 still fused", cases[i].model);
    fmt(want, sizeof want, "%s/%s/got", WORK, untag);
    fmt(got, sizeof got, "%s/%s/got", WORK, tag);
    cr_assert(outputs_match(want, got, 1e-5, 1e-6, why, sizeof why), "%s fused vs unfused: %s",
              cases[i].model, why);
  }
}

Test(fusion, llvm_backend_ort, .init = make_models) {
  if (!LLVM_BUILT)
    cr_skip_test("accparc is built without LLVM");
  for (int i = 0; i < N_CASES; i++) {
    char tag[256];
    fmt(tag, sizeof tag, "%s.llvm", cases[i].model);
    compile_run(cases[i].model, tag, "", "cpu:1", "--backend llvm ");
    agrees_with_ort(cases[i].model, tag);
  }
}

/* Two devices, each strategy: the one-device outputs, the bytes predicted,
 * and the same bytes unfused; dp splits the batch, so each device's
 * program fuses as the one-device program does. */
Test(fusion, partitioned, .init = make_models) {
  static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
  for (int s = 0; s < 4; s++) {
    char tag[256], untag[256], one[1024], got[1024], rep[1024], why[1024], fused[4096];
    char opt[64];
    fmt(opt, sizeof opt, "--strategy %s ", strategies[s]);
    fmt(tag, sizeof tag, "fuse_block.2.%s", strategies[s]);
    fmt(untag, sizeof untag, "fuse_block.2.%s.unfused", strategies[s]);
    compile_run("fuse_block", "fuse_block.1", "", "cpu:1", "");
    compile_run("fuse_block", tag, "", "cpu:2", opt);
    compile_run("fuse_block", untag, "ACCPAR_NO_FUSION=1", "cpu:2", opt);
    fmt(one, sizeof one, "%s/fuse_block.1/got", WORK);
    fmt(got, sizeof got, "%s/%s/got", WORK, tag);
    cr_assert(outputs_match(one, got, 1e-5, 1e-6, why, sizeof why), "%s: %s", strategies[s], why);
    double moved, moved_unfused;
    fmt(rep, sizeof rep, "%s/%s/report.json", WORK, tag);
    cr_assert(bytes_as_predicted(rep, 2, &moved, why, sizeof why), "%s: %s", strategies[s], why);
    fmt(rep, sizeof rep, "%s/%s/report.json", WORK, untag);
    cr_assert(bytes_as_predicted(rep, 2, &moved_unfused, why, sizeof why), "%s: %s",
              strategies[s], why);
    cr_assert_eq(moved, moved_unfused, "%s: fused sends %g bytes, unfused %g", strategies[s],
                 moved, moved_unfused);
    fused_lines(tag, fused, sizeof fused);
    if (strcmp(strategies[s], "dp") == 0)
      cr_assert_str_eq(fused, cases[0].fused, "dp: the fusions in dev0.c");
  }
}
