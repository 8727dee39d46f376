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

/* The MLPs of Altsplit (Zhuang, github.com/zhuangsc/altsplit, KANN's mlp
 * example on MNIST): 784 inputs, n hidden layers of 16384 ReLU neurons, 10
 * outputs. Altsplit splits consecutive layers alternately by output and by
 * input features (types III and II) over all processes; docs/partition.md
 * compares accpar's plans with it. */
static void altsplit_mlp(zoo *z, int hidden) {
  zt x = zoo_input(z, 1, (const int64_t[]){784});
  for (int i = 0; i < hidden; i++)
    x = zoo_relu(z, zoo_name(z, "relu%d", i + 1),
                 zoo_gemm(z, zoo_name(z, "fc%d", i + 1), x, 16384, ZOO_RELU_GAIN));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, zoo_name(z, "fc%d", hidden + 1), x, 10, ZOO_LINEAR_GAIN));
}

void zoo_mlp16k_3(zoo *z) { altsplit_mlp(z, 3); }
void zoo_mlp16k_5(zoo *z) { altsplit_mlp(z, 5); }
