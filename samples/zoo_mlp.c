/* mlp: a three-layer perceptron on flattened 28x28 images (784-256-128-10),
 * the smallest model of the zoo and the quick start's demo input. */
#include "samples/zoo.h"

void zoo_mlp(zoo *z) {
  /* [N, 784] rather than [N, 1, 28, 28]: the demo exercises Gemm alone,
   * with no Flatten in front of the first layer. */
  zt x = zoo_input(z, 1, (const int64_t[]){784});
  x = zoo_relu(z, "relu1", zoo_gemm(z, "fc1", x, 256, ZOO_RELU_GAIN));
  x = zoo_relu(z, "relu2", zoo_gemm(z, "fc2", x, 128, ZOO_RELU_GAIN));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "fc3", x, 10, ZOO_LINEAR_GAIN));
}
