/* The ResNet series: He, Zhang, Ren, Sun, "Deep residual learning for image
 * recognition", CVPR 2016, in torchvision's layout: BatchNormalization after
 * every conv, convs without bias, projection shortcuts (1x1 conv + BN, the
 * paper's option B) wherever a block changes the shape, and in bottlenecks
 * the stride on the 3x3 conv ("ResNet v1.5"; the parameter count is the
 * same as with the stride on the first 1x1).
 *
 * The last BN of each residual branch draws its scale from [0.1, 0.3)
 * instead of around 1: with frozen statistics BN does not renormalise, and
 * a branch at full scale doubles the activations' variance at every block
 * (2^50 through ResNet-152). This is the zero-init-residual idea of Goyal et
 * al. 2017, kept non-zero so that the branches still change the output. */
#include "samples/zoo.h"

enum { STAGES_MAX = 4 };

typedef struct resnet_cfg {
  bool bottleneck;                 /* 1x1-3x3-1x1 blocks with 4x expansion */
  int n_stages;
  int blocks[STAGES_MAX];          /* blocks per stage */
  int64_t planes[STAGES_MAX];      /* width of the 3x3 convs of the stage */
  int strides[STAGES_MAX];         /* stride of the stage's first block */
} resnet_cfg;

static const float branch_scale_lo = 0.1f, branch_scale_hi = 0.3f;

static zt conv_bn(zoo *z, const char *block, int i, zt x, int64_t out, int k, int s, bool last) {
  x = zoo_conv(z, zoo_name(z, "%s.conv%d", block, i), x, out, k, s, k / 2, false);
  return zoo_bn(z, zoo_name(z, "%s.bn%d", block, i), x, last ? branch_scale_lo : 0.8f,
                last ? branch_scale_hi : 1.2f);
}

/* One residual block named block (torchvision's "layerS.B"). */
static zt block(zoo *z, const char *name, zt x, bool bottleneck, int64_t planes, int stride) {
  int64_t out_c = bottleneck ? 4 * planes : planes;
  zt y;
  if (bottleneck) {
    y = zoo_relu(z, zoo_name(z, "%s.relu1", name), conv_bn(z, name, 1, x, planes, 1, 1, false));
    y = zoo_relu(z, zoo_name(z, "%s.relu2", name),
                 conv_bn(z, name, 2, y, planes, 3, stride, false));
    y = conv_bn(z, name, 3, y, out_c, 1, 1, true);
  } else {
    y = zoo_relu(z, zoo_name(z, "%s.relu1", name),
                 conv_bn(z, name, 1, x, planes, 3, stride, false));
    y = conv_bn(z, name, 2, y, planes, 3, 1, true);
  }
  zt shortcut = x;
  if (stride != 1 || x.d[1] != out_c) {
    shortcut = zoo_conv(z, zoo_name(z, "%s.downsample.0", name), x, out_c, 1, stride, 0, false);
    shortcut = zoo_bn(z, zoo_name(z, "%s.downsample.1", name), shortcut, 0.8f, 1.2f);
  }
  y = zoo_add(z, zoo_name(z, "%s.add", name), y, shortcut);
  return zoo_relu(z, zoo_name(z, "%s.relu", name), y);
}

/* The stages of cfg on x, then global average pooling and the classifier. */
static void body_and_head(zoo *z, zt x, const resnet_cfg *cfg, int64_t classes) {
  for (int s = 0; s < cfg->n_stages; s++)
    for (int b = 0; b < cfg->blocks[s]; b++)
      x = block(z, zoo_name(z, "layer%d.%d", s + 1, b), x, cfg->bottleneck, cfg->planes[s],
                b == 0 ? cfg->strides[s] : 1);
  x = zoo_flatten(z, "flatten", zoo_global_avgpool(z, "avgpool", x));
  z->out_name = "output";
  zoo_output(z, zoo_gemm(z, "fc", x, classes, ZOO_LINEAR_GAIN));
}

/* The ImageNet networks of the paper's Table 1: a 7x7/2 stem and a 3x3/2
 * max pool, four stages of 64-128-256-512 planes, 1000 classes. */
static void imagenet_resnet(zoo *z, bool bottleneck, const int blocks[4]) {
  resnet_cfg cfg = {.bottleneck = bottleneck, .n_stages = 4,
                    .planes = {64, 128, 256, 512}, .strides = {1, 2, 2, 2}};
  for (int s = 0; s < 4; s++)
    cfg.blocks[s] = blocks[s];
  zt x = zoo_input(z, 3, (const int64_t[]){3, 224, 224});
  x = zoo_conv(z, "conv1", x, 64, 7, 2, 3, false);
  x = zoo_relu(z, "relu", zoo_bn(z, "bn1", x, 0.8f, 1.2f));
  x = zoo_maxpool(z, "maxpool", x, 3, 2, 1);
  body_and_head(z, x, &cfg, 1000);
}

void zoo_resnet18(zoo *z) { imagenet_resnet(z, false, (const int[]){2, 2, 2, 2}); }
void zoo_resnet34(zoo *z) { imagenet_resnet(z, false, (const int[]){3, 4, 6, 3}); }
void zoo_resnet50(zoo *z) { imagenet_resnet(z, true, (const int[]){3, 4, 6, 3}); }
void zoo_resnet101(zoo *z) { imagenet_resnet(z, true, (const int[]){3, 4, 23, 3}); }
void zoo_resnet152(zoo *z) { imagenet_resnet(z, true, (const int[]){3, 8, 36, 3}); }

/* One basic block whose shortcut is a projection (8x16x16 -> 16x8x8), with
 * the smallest head that ends in logits: 3 convs and a Gemm, few enough
 * layers for an exhaustive search over partition types. */
void zoo_resnet_block(zoo *z) {
  resnet_cfg cfg = {.n_stages = 1, .blocks = {1}, .planes = {16}, .strides = {2}};
  body_and_head(z, zoo_input(z, 3, (const int64_t[]){8, 16, 16}), &cfg, 10);
}

/* A CIFAR-sized network for training tests: a 3x3 stem of 16 channels on
 * 3x32x32, then one basic block per stage at 16, 32 and 64 channels (the
 * last two with projection shortcuts), 10 classes. */
void zoo_resnet_small(zoo *z) {
  resnet_cfg cfg = {.n_stages = 3, .blocks = {1, 1, 1}, .planes = {16, 32, 64},
                    .strides = {1, 2, 2}};
  zt x = zoo_input(z, 3, (const int64_t[]){3, 32, 32});
  x = zoo_conv(z, "conv1", x, 16, 3, 1, 1, false);
  x = zoo_relu(z, "relu", zoo_bn(z, "bn1", x, 0.8f, 1.2f));
  body_and_head(z, x, &cfg, 10);
}
