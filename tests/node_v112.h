/* The node tests of operators whose tests the shared node-v1.22 folder does
 * not carry (it holds those of the original operators only): they come from
 * Debian's ONNX v1.12 data (libonnx-testdata), for the generated programs
 * (test_codegen_node) and the differential sweep (test_differential).
 * test_node_tests reads every supported operator's tests of both versions
 * itself. A static function in a header: each suite is one translation
 * unit. */
#ifndef ACCPAR_TESTS_NODE_V112_H
#define ACCPAR_TESTS_NODE_V112_H

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#define NODE_V112_DIR "/usr/share/libonnx-testdata/data/node"

/* "test_" + one of ops[n], then the end of the name, '_' or a digit
 * (test_and2d). */
__attribute__((unused)) static bool node_v112_prefixed(const char *name, const char *const *ops,
                                                       size_t n) {
  if (strncmp(name, "test_", 5) != 0)
    return false;
  const char *rest = name + 5;
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(ops[i]);
    if (strncmp(rest, ops[i], len) == 0 &&
        (rest[len] == '\0' || rest[len] == '_' || isdigit((unsigned char)rest[len])))
      return true;
  }
  return false;
}

/* The activations, math, comparisons and logic, Pad, Tile, DepthToSpace,
 * SpaceToDepth, Resize, Upsample, GatherElements, GatherND, ScatterElements,
 * ScatterND, InstanceNormalization, MeanVarianceNormalization, Einsum, LSTM,
 * GRU, RNN, If, Loop. */
__attribute__((unused)) static bool node_v112_first(const char *name) {
  static const char *const ops[] = {
      "leakyrelu", "prelu", "elu", "selu", "celu", "hardsigmoid", "hardswish", "softplus",
      "softsign", "thresholdedrelu", "mish", "sin", "cos", "floor", "ceil", "round", "sign",
      "isnan", "isinf", "mod", "greater_equal", "less_equal", "not", "and", "or", "xor",
      "constant_pad", "edge_pad", "reflect_pad", "tile", "depthtospace", "spacetodepth",
      "resize", "upsample", "gather_elements", "gathernd", "scatter_elements", "scatternd",
      "instancenorm", "mvn", "einsum", "lstm", "gru", "rnn", "simple_rnn", "if", "loop11",
  };
  return node_v112_prefixed(name, ops, sizeof ops / sizeof *ops);
}

/* The reductions and selections: ReduceMin, ReduceProd, ReduceL1, ReduceL2,
 * ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin, CumSum, Trilu, OneHot,
 * TopK. */
__attribute__((unused)) static bool node_v112_reductions(const char *name) {
  static const char *const ops[] = {
      "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2", "reduce_log_sum_exp",
      "reduce_sum_square", "argmax", "argmin", "cumsum", "tril", "triu", "onehot", "top_k",
  };
  return node_v112_prefixed(name, ops, sizeof ops / sizeof *ops);
}

/* The original operators the node-v1.22 folder has no test of. */
__attribute__((unused)) static bool node_v112_originals(const char *name) {
  static const char *const ops[] = {
      "exp", "log", "sqrt", "neg", "abs", "reciprocal", "erf", "castlike", "pow", "max",
      "min", "where", "less", "greater", "equal", "globalmaxpool", "expand", "size", "range",
  };
  return node_v112_prefixed(name, ops, sizeof ops / sizeof *ops);
}

__attribute__((unused)) static bool node_v112_selected(const char *name) {
  return node_v112_first(name) || node_v112_reductions(name) || node_v112_originals(name);
}

/* The differential sweep's share of the reductions' tests: their _example
 * variants have the _random ones' shapes and attributes (only the data
 * differs, which the one-device suites check), so they are left out. */
__attribute__((unused)) static bool node_v112_reductions_swept(const char *name) {
  return node_v112_reductions(name) && !strstr(name, "_example");
}

#endif
