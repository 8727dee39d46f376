/* lenet5: LeCun, Bottou, Bengio, Haffner, "Gradient-based learning applied
 * to document recognition", Proc. IEEE 1998, on its 1x32x32 input.
 *
 * C1 conv 5x5x6, S2 2x2 subsampling, C3 conv 5x5x16, S4 2x2 subsampling,
 * C5 120 units over the 5x5x16 map, F6 84 units, 10 outputs. Departures from
 * the paper, as in every modern rendition: ReLU instead of the scaled tanh,
 * AveragePool for the trainable subsampling, C3 connected to all six S2
 * maps (the paper's sparse table gives 1,516 weights, this 2,416), C5 as a
 * Gemm on the flattened map (the same function as a 5x5 conv on a 5x5
 * input) and a linear output layer instead of Euclidean RBF units. */
#include "samples/zoo.h"

void zoo_lenet5(zoo *z) {
  zt x = zoo_input(z, 3, (const int64_t[]){1, 32, 32});
  x = zoo_relu(z, "relu1", zoo_conv(z, "conv1", x, 6, 5, 1, 0, true));
  x = zoo_avgpool(z, "pool1", x, 2, 2);
  x = zoo_relu(z, "relu2", zoo_conv(z, "conv2", x, 16, 5, 1, 0, true));
  x = zoo_avgpool(z, "pool2", x, 2, 2);
  x = zoo_flatten(z, "flatten", x);
  x = zoo_relu(z, "relu3", zoo_gemm(z, "fc1", x, 120, ZOO_RELU_GAIN));
  x = zoo_relu(z, "relu4", zoo_gemm(z, "fc2", x, 84, ZOO_RELU_GAIN));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "fc3", x, 10, ZOO_LINEAR_GAIN));
}
