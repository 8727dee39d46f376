/* accpar-zoo: reference networks built directly in the IR and written with
 * ap_write_onnx. The internal header of samples/, sectioned by source file.
 *
 * A model is built front to back by small builders that add one node (and
 * its weights) each and return the new value with the shape the builder
 * computed. Intermediate values are left without a shape in the IR, so that
 * accpar's own shape inference is what fills them in when the file is read
 * back; only graph inputs, weights and the output carry shapes. */
#ifndef ACCPAR_ZOO_H
#define ACCPAR_ZOO_H

#include "ir/ir.h"

/* ---- zoo_build.c -------------------------------------------------------- */

/* PCG32 (O'Neill 2014, "PCG: A Family of Simple Fast Space-Efficient
 * Statistically Good Algorithms for Random Number Generation"): 64-bit LCG
 * state, XSH-RR output. Small, portable and identical on every platform, so
 * a seed names the same weights everywhere. */
typedef struct zoo_rng {
  uint64_t state; /* LCG state */
  uint64_t inc;   /* stream selector; always odd */
} zoo_rng;

void zoo_rng_seed(zoo_rng *r, uint64_t seed, uint64_t stream);
uint32_t zoo_rng_next(zoo_rng *r);
float zoo_rng_uniform(zoo_rng *r, float lo, float hi); /* in [lo, hi) */
float zoo_rng_normal(zoo_rng *r, float mean, float std); /* Box-Muller */

typedef struct zoo_opts {
  int64_t batch;  /* dim 0 of the input; 0 writes the symbolic size "N" */
  uint64_t seed;  /* PRNG seed of the weights */
  bool weights;   /* false: weights become graph inputs with shapes, no data */
  bool inputs;    /* also write DIR/MODEL_data/input_N.pb, seeded inputs */
  int64_t seq;    /* transformers: tokens per sequence; 0: the model's default */
} zoo_opts;

typedef struct zoo {
  ap_graph *g;
  zoo_opts opts;
  zoo_rng rng;
  bool failed;          /* sticky: an allocation failed, the model is discarded */
  const char *error;    /* with failed: what the user asked that the model cannot do */
  const char *out_name; /* names the next node's output instead of the node's name */
  int64_t params;       /* trainable elements: weights, biases, BN scale and shift */
  int64_t bn_stats;     /* BN running mean and variance elements (not trainable) */
} zoo;

/* A value id and the shape the builder computed for it; d[0] is the batch
 * (-1 when symbolic). */
typedef struct zt {
  int v;        /* value id, -1 after a failure */
  int rank;
  int64_t d[4];
} zt;

/* A failed value: what builders return after a failure. */
extern const zt zoo_failed;

/* Starts an empty model named name (ir_version 7, opset 13). false when out
 * of memory. */
bool zoo_begin(zoo *z, const char *name, const char *path, const zoo_opts *o);
/* The graph input "input": float32 [batch, dims...]. */
zt zoo_input(zoo *z, int rank, const int64_t *dims);
/* Marks x, which must be named "output" (set out_name before its node), as
 * the graph output with its shape. */
void zoo_output(zoo *z, zt x);
/* A name built in the graph's arena; "" (and failed set) when out of memory. */
const char *zoo_name(zoo *z, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Gains of the He/Kaiming-uniform weight scale: ReLU_GAIN for weights whose
 * output goes through a ReLU, LINEAR_GAIN for the logits. */
#define ZOO_RELU_GAIN 1.41421356f
#define ZOO_LINEAR_GAIN 1.0f

/* Conv with square kernel k, stride s, symmetric padding p; a bias when bias. */
zt zoo_conv(zoo *z, const char *name, zt x, int64_t out_c, int k, int s, int p, bool bias);
/* BatchNormalization with scale drawn from [scale_lo, scale_hi). */
zt zoo_bn(zoo *z, const char *name, zt x, float scale_lo, float scale_hi);
zt zoo_relu(zoo *z, const char *name, zt x);
zt zoo_maxpool(zoo *z, const char *name, zt x, int k, int s, int p);
zt zoo_avgpool(zoo *z, const char *name, zt x, int k, int s);
zt zoo_global_avgpool(zoo *z, const char *name, zt x);
zt zoo_flatten(zoo *z, const char *name, zt x);
zt zoo_dropout(zoo *z, const char *name, zt x);
/* Gemm x·Wᵀ + b with W [out, in] (transB=1, PyTorch's Linear layout). */
zt zoo_gemm(zoo *z, const char *name, zt x, int64_t out, float gain);
zt zoo_add(zoo *z, const char *name, zt a, zt b);
zt zoo_concat_channels(zoo *z, const char *name, const zt *xs, int n);

/* ---- zoo_build.c: pieces the transformer builders (zoo_transformer.c) use ---- */

/* A graph input NAME of type dt: [batch, dims...]. */
zt zoo_input_named(zoo *z, const char *name, ap_dtype dt, int rank, const int64_t *dims);
/* Marks x as a graph output with its shape (dt its element type). */
void zoo_output_named(zoo *z, zt x, ap_dtype dt);
/* A node op(in...) with n_attr attribute slots; its output (named by
 * out_name when set, else name) gets the shape the caller gives y. Returns
 * the node id, or -1 after a failure (*y then has v -1). */
int zoo_node(zoo *z, const char *name, const char *op, int n_in, const int *in, int n_attr,
             zt *y);
void zoo_attr_int(zoo *z, int node, int slot, const char *name, int64_t i);
void zoo_attr_float(zoo *z, int node, int slot, const char *name, float f);
void zoo_attr_ints(zoo *z, int node, int slot, const char *name, int count,
                   const int64_t *ints);
/* A trainable parameter NAME drawn from N(0, std) (std > 0) or, with std 0,
 * from U[lo, hi); without weights a graph input of that shape. */
int zoo_param(zoo *z, const char *name, int rank, const int64_t *dims, float std, float lo,
              float hi);
/* A constant NAME (an initializer even without weights: shapes, indices,
 * masks, scalars), its data copied. */
int zoo_const(zoo *z, const char *name, ap_dtype dt, int rank, const int64_t *dims,
              const void *data);

/* ---- zoo_transformer.c: GPT-2, BERT, ViT as torch.onnx.export writes them ---- */

void zoo_gpt2_tiny(zoo *z);
void zoo_gpt2(zoo *z);
void zoo_bert_tiny(zoo *z);
void zoo_bert(zoo *z);
void zoo_vit_tiny(zoo *z);
void zoo_vit(zoo *z);

/* ---- zoo_mlp.c, zoo_lenet.c, zoo_alexnet_vgg.c, zoo_resnet.c,
 *      zoo_inception.c: one builder per model; each sets out_name and calls
 *      zoo_output itself. ------------------------------------------------ */

void zoo_mlp(zoo *z);
void zoo_mlp16k_3(zoo *z);
void zoo_mlp16k_5(zoo *z);
void zoo_lenet5(zoo *z);
void zoo_alexnet(zoo *z);
void zoo_vgg11(zoo *z);
void zoo_vgg13(zoo *z);
void zoo_vgg16(zoo *z);
void zoo_vgg19(zoo *z);
void zoo_alexnet_paper(zoo *z);
void zoo_vgg11_paper(zoo *z);
void zoo_resnet18(zoo *z);
void zoo_resnet34(zoo *z);
void zoo_resnet50(zoo *z);
void zoo_resnet101(zoo *z);
void zoo_resnet152(zoo *z);
void zoo_resnet_block(zoo *z);
void zoo_resnet_small(zoo *z);
void zoo_inception_block(zoo *z);

#endif
