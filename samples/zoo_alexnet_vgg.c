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
