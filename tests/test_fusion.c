/* Fusion in inference programs (codegen/fuse.c) on tests/fusion_models.py's
 * models: the fused program agrees with ONNX Runtime (C and LLVM backends)
 * and with the same program compiled unfused (ACCPAR_NO_FUSION=1); the
 * fusions named in dev0.c's step comments are the expected ones, and none
 * where a value has another reader; partitioned on two devices the fused
 * program gives the one-device outputs and sends exactly the bytes
 * predicted, the same bytes as unfused. Operands that are views (a Slice
 * of a constant, a Transpose of the last two axes) are read in place. */
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
    /* The convolutions stay unfused; Relu and the Add reading c1 twice are one loop. */
    {"fuse_none", "fused relu(s0) add(s1,e1) Relu 'relu1' */\n"},
    {"fuse_bn_only", "fused bn Conv 'conv' */\n"},
    /* MatMul + bias + GPT-2's GELU, then MatMul + bias + residual. */
    {"fuse_mlp", "fused add(e0,v2) pow(e1,3) mul(0.0447149985,e2) add(e1,e3) "
                 "mul(0.797884583,e4) tanh(e5) add(1,e6) mul(0.5,e1) mul(e8,e7) "
                 "MatMul 'fc/MatMul' */\n"
                 "fused add(v2,e0) add(e1,s3) MatMul 'proj/MatMul' */\n"},
    {"fuse_gemm", "fused relu(e0) Gemm 'gemm1' */\n"
                  "fused sigmoid(e0) b(1,0) Gemm 'gemm2' */\n"},
    /* Element-wise chains as one loop; x - mean, read twice, is not. */
    {"fuse_ewise", "fused add(s0,k1) sqrt(e1) Add 'add_eps' */\n"
                   "fused div(s0,w1) mul(e1,v2) add(e2,v3) div(e3,1.41421354) erf(e4) "
                   "add(e5,1) mul(e3,e6) mul(e7,0.5) sub(e8,s4) Div 'div' */\n"},
    /* Views read in place: the Slices of the Q/K/V weight and bias are
     * constant boxes (the bias joins the epilogue); the heads' Transposes
     * are strides of the GEMM call (K's and the tied LM head's its
     * trans_b); the heads' merge is not a MatMul operand and runs. */
    {"fuse_views", "fused add(e0,v2) MatMul 'attn/c_attn/Split/part0/matmul' */\n"
                   "fused add(e0,v2) MatMul 'attn/c_attn/Split/part1/matmul' */\n"
                   "fused div(e0,2.82842708) a(0,2,1,3) b(0,2,3,1) MatMul 'attn/MatMul' */\n"
                   "fused add(e0,v2) MatMul 'attn/c_attn/Split/part2/matmul' */\n"
                   "fused b(0,2,1,3) MatMul 'attn/MatMul_1' */\n"
                   "fused b(1,0) MatMul 'lm_head/MatMul' */\n"},
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
 * program fuses as the one-device program does. Case c of cases[]. */
static void partitioned(int c) {
  static const char *const strategies[] = {"dp", "owt", "hypar", "accpar"};
  const char *model = cases[c].model;
  char one_tag[256];
  fmt(one_tag, sizeof one_tag, "%s.1", model);
  compile_run(model, one_tag, "", "cpu:1", "");
  for (int s = 0; s < 4; s++) {
    char tag[256], untag[256], one[1024], got[1024], rep[1024], why[1024], fused[4096];
    char opt[64];
    fmt(opt, sizeof opt, "--strategy %s ", strategies[s]);
    fmt(tag, sizeof tag, "%s.2.%s", model, strategies[s]);
    fmt(untag, sizeof untag, "%s.2.%s.unfused", model, strategies[s]);
    compile_run(model, tag, "", "cpu:2", opt);
    compile_run(model, untag, "ACCPAR_NO_FUSION=1", "cpu:2", opt);
    fmt(one, sizeof one, "%s/%s/got", WORK, one_tag);
    fmt(got, sizeof got, "%s/%s/got", WORK, tag);
    cr_assert(outputs_match(one, got, 1e-5, 1e-6, why, sizeof why), "%s %s: %s", model,
              strategies[s], why);
    double moved, moved_unfused;
    fmt(rep, sizeof rep, "%s/%s/report.json", WORK, tag);
    cr_assert(bytes_as_predicted(rep, 2, &moved, why, sizeof why), "%s %s: %s", model,
              strategies[s], why);
    fmt(rep, sizeof rep, "%s/%s/report.json", WORK, untag);
    cr_assert(bytes_as_predicted(rep, 2, &moved_unfused, why, sizeof why), "%s %s: %s", model,
              strategies[s], why);
    cr_assert_eq(moved, moved_unfused, "%s %s: fused sends %g bytes, unfused %g", model,
                 strategies[s], moved, moved_unfused);
    fused_lines(tag, fused, sizeof fused);
    if (strcmp(strategies[s], "dp") == 0)
      cr_assert_str_eq(fused, cases[c].fused, "%s dp: the fusions in dev0.c", model);
  }
}

Test(fusion, partitioned, .init = make_models) { partitioned(0); }

/* The MatMul epilogues and the element-wise chains, on every strategy. */
Test(fusion, partitioned_expr, .init = make_models) {
  for (int c = 0; c < N_CASES; c++)
    if (strncmp(cases[c].model, "fuse_mlp", 8) == 0 || strncmp(cases[c].model, "fuse_ewise", 10) == 0 ||
        strncmp(cases[c].model, "fuse_gemm", 9) == 0)
      partitioned(c);
}

/* The views read in place, on every strategy. */
Test(fusion, partitioned_views, .init = make_models) {
  for (int c = 0; c < N_CASES; c++)
    if (strcmp(cases[c].model, "fuse_views") == 0)
      partitioned(c);
}
