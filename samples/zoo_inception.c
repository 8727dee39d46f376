/* inception_block: one Inception-v1 module, inception (3a) of Szegedy et
 * al., "Going deeper with convolutions", CVPR 2015, Table 1, on its own
 * 192x28x28 input: 1x1 (64), 1x1 (96) -> 3x3 (128), 1x1 (16) -> 5x5 (32),
 * 3x3/1 max pool -> 1x1 (32), concatenated on channels (256). Every conv has
 * a bias and a ReLU, as in GoogLeNet. A global average pool and a 10-way
 * Gemm follow so that the output is logits like every other zoo model. */
#include "samples/zoo.h"

static zt conv_relu(zoo *z, const char *name, zt x, int64_t out, int k) {
  x = zoo_conv(z, zoo_name(z, "inception_3a.%s", name), x, out, k, 1, k / 2, true);
  return zoo_relu(z, zoo_name(z, "inception_3a.%s.relu", name), x);
}

void zoo_inception_block(zoo *z) {
  zt x = zoo_input(z, 3, (const int64_t[]){192, 28, 28});
  zt branches[4];
  branches[0] = conv_relu(z, "1x1", x, 64, 1);
  branches[1] = conv_relu(z, "3x3", conv_relu(z, "3x3_reduce", x, 96, 1), 128, 3);
  branches[2] = conv_relu(z, "5x5", conv_relu(z, "5x5_reduce", x, 16, 1), 32, 5);
  branches[3] = conv_relu(z, "pool_proj", zoo_maxpool(z, "inception_3a.pool", x, 3, 1, 1), 32, 1);
  x = zoo_concat_channels(z, "inception_3a.output", branches, 4);
  x = zoo_flatten(z, "flatten", zoo_global_avgpool(z, "avgpool", x));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "fc", x, 10, ZOO_LINEAR_GAIN));
}
