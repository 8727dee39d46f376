/* alexnet and the VGG series, in torchvision's layout (the one PyTorch's
 * ONNX export and the published parameter counts refer to).
 *
 * torchvision's AdaptiveAvgPool2d in front of the classifier is left out:
 * on a 224x224 input it receives 6x6 (AlexNet) and 7x7 (VGG) maps already,
 * so it is the identity. Dropout nodes stay, as in a training graph; opset
 * 13 defines them as the identity unless training_mode is given. */
#include "samples/zoo.h"

static zt imagenet_input(zoo *z) { return zoo_input(z, 3, (const int64_t[]){3, 224, 224}); }

/* The classifier shared by torchvision's AlexNet (dropout first) and VGG
 * (dropout after each hidden ReLU). */
static void classifier(zoo *z, zt x, bool dropout_first) {
  x = zoo_flatten(z, "flatten", x);
  for (int i = 0; i < 2; i++) {
    if (dropout_first)
      x = zoo_dropout(z, zoo_name(z, "classifier.drop%d", i + 1), x);
    x = zoo_gemm(z, zoo_name(z, "classifier.fc%d", i + 1), x, 4096, ZOO_RELU_GAIN);
    x = zoo_relu(z, zoo_name(z, "classifier.relu%d", i + 1), x);
    if (!dropout_first)
      x = zoo_dropout(z, zoo_name(z, "classifier.drop%d", i + 1), x);
  }
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "classifier.fc3", x, 1000, ZOO_LINEAR_GAIN));
}

/* Krizhevsky, Sutskever, Hinton, "ImageNet classification with deep
 * convolutional neural networks", NIPS 2012, as the single-tower network of
 * torchvision (64-192-384-256-256 channels, no LRN; the paper's two towers
 * have 96-256-384-384-256 and LRN). */
void zoo_alexnet(zoo *z) {
  static const struct {
    int out, k, s, p;
    bool pool; /* a 3x3 stride-2 max pool follows the ReLU */
  } convs[] = {
      {64, 11, 4, 2, true}, {192, 5, 1, 2, true}, {384, 3, 1, 1, false},
      {256, 3, 1, 1, false}, {256, 3, 1, 1, true},
  };
  zt x = imagenet_input(z);
  int pools = 0;
  for (int i = 0; i < 5; i++) {
    x = zoo_conv(z, zoo_name(z, "features.conv%d", i + 1), x, convs[i].out, convs[i].k,
                 convs[i].s, convs[i].p, true);
    x = zoo_relu(z, zoo_name(z, "features.relu%d", i + 1), x);
    if (convs[i].pool)
      x = zoo_maxpool(z, zoo_name(z, "features.pool%d", ++pools), x, 3, 2, 0);
  }
  classifier(z, x, true);
}

/* Simonyan and Zisserman, "Very deep convolutional networks for large-scale
 * image recognition", ICLR 2015, Table 1: the number of 3x3 convs in each
 * of the five stages, each stage ending in a 2x2 stride-2 max pool. */
static void vgg(zoo *z, const int convs_per_stage[5]) {
  static const int64_t widths[5] = {64, 128, 256, 512, 512};
  zt x = imagenet_input(z);
  for (int stage = 0; stage < 5; stage++) {
    for (int i = 0; i < convs_per_stage[stage]; i++) {
      x = zoo_conv(z, zoo_name(z, "features.conv%d_%d", stage + 1, i + 1), x, widths[stage], 3,
                   1, 1, true);
      x = zoo_relu(z, zoo_name(z, "features.relu%d_%d", stage + 1, i + 1), x);
    }
    x = zoo_maxpool(z, zoo_name(z, "features.pool%d", stage + 1), x, 2, 2, 0);
  }
  classifier(z, x, false);
}

void zoo_vgg11(zoo *z) { vgg(z, (const int[]){1, 1, 2, 2, 2}); } /* configuration A */
void zoo_vgg13(zoo *z) { vgg(z, (const int[]){2, 2, 2, 2, 2}); } /* configuration B */
void zoo_vgg16(zoo *z) { vgg(z, (const int[]){2, 2, 3, 3, 3}); } /* configuration D */
void zoo_vgg19(zoo *z) { vgg(z, (const int[]){2, 2, 4, 4, 4}); } /* configuration E */

/* AlexNet and VGG-11 as the published AccPar program declares them
 * (github.com/linghaosong/AccPar, networks/Alexnet.txt and Vgg11.txt): a
 * convolution's output is measured after its pooling, so the pooling folds
 * into the convolution's stride and no pooling node is left; AlexNet has
 * Krizhevsky's 96-256-384-384-256 channels and no pooling after conv1.
 * These are models of the planner's input, not of the trained networks:
 * `accparc plan --cost paper` on them gives the published program's tables
 * (tests/golden/plan_*_paper_*, docs/partition.md). */
typedef struct paper_conv {
  const char *name;
  int out, k, s, p; /* stride and padding give the declared output map */
} paper_conv;

static void paper_net(zoo *z, const paper_conv *convs, int n) {
  zt x = imagenet_input(z);
  for (int i = 0; i < n; i++) {
    x = zoo_conv(z, convs[i].name, x, convs[i].out, convs[i].k, convs[i].s, convs[i].p, true);
    x = zoo_relu(z, zoo_name(z, "%s.relu", convs[i].name), x);
  }
  x = zoo_flatten(z, "flatten", x);
  x = zoo_relu(z, "fc1.relu", zoo_gemm(z, "fc1", x, 4096, ZOO_RELU_GAIN));
  x = zoo_relu(z, "fc2.relu", zoo_gemm(z, "fc2", x, 4096, ZOO_RELU_GAIN));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "fc3", x, 1000, ZOO_LINEAR_GAIN));
}

/* 224 -> 55 -> 27 -> 13 -> 13 -> 6, as declared; 256x6x6 = 9216 into fc1. */
void zoo_alexnet_paper(zoo *z) {
  static const paper_conv convs[] = {
      {"conv1", 96, 11, 4, 2}, {"conv2", 256, 5, 2, 1}, {"conv3", 384, 3, 2, 0},
      {"conv4", 384, 3, 1, 1}, {"conv5", 256, 3, 2, 0},
  };
  paper_net(z, convs, 5);
}

/* Configuration A: 224 -> 112 -> 56 -> 56 -> 28 -> 28 -> 14 -> 14 -> 7, as
 * declared; 512x7x7 = 25088 into fc1. */
void zoo_vgg11_paper(zoo *z) {
  static const paper_conv convs[] = {
      {"conv1", 64, 3, 2, 1},   {"conv2", 128, 3, 2, 1},  {"conv31", 256, 3, 1, 1},
      {"conv32", 256, 3, 2, 1}, {"conv41", 512, 3, 1, 1}, {"conv42", 512, 3, 2, 1},
      {"conv51", 512, 3, 1, 1}, {"conv52", 512, 3, 2, 1},
  };
  paper_net(z, convs, 8);
}
