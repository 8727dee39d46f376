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

/* "test_" + one of these, then the end of the name, '_' or a digit
 * (test_and2d). */
__attribute__((unused)) static bool node_v112_selected(const char *name) {
  static const char *const ops[] = {
      "leakyrelu", "prelu", "elu", "selu", "celu", "hardsigmoid", "hardswish", "softplus",
      "softsign", "thresholdedrelu", "mish", "sin", "cos", "floor", "ceil", "round", "sign",
      "isnan", "isinf", "mod", "greater_equal", "less_equal", "not", "and", "or", "xor",
      "constant_pad", "edge_pad", "reflect_pad", "tile", "depthtospace", "spacetodepth",
      "resize", "upsample", "lstm", "gru", "rnn", "simple_rnn", "if", "loop11",
  };
  if (strncmp(name, "test_", 5) != 0)
    return false;
  const char *rest = name + 5;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    size_t len = strlen(ops[i]);
    if (strncmp(rest, ops[i], len) == 0 &&
        (rest[len] == '\0' || rest[len] == '_' || isdigit((unsigned char)rest[len])))
      return true;
  }
  return false;
}

#endif
