/* Transformers as torch.onnx.export writes HuggingFace's GPT-2 and BERT and
 * torchvision's ViT: the constructs real exported graphs carry, so that
 * the planner, the distribution of boxes and the kernels meet them here
 * first.
 *
 * - gpt2, gpt2_tiny (GPT2LMHeadModel, opset 13): token ids -> Gather(wte);
 *   position ids from Shape/Gather/Range/Unsqueeze -> Gather(wpe);
 *   LayerNorm decomposed (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/
 *   Add); fused QKV MatMul+Add then Split; heads through Shape/Gather/
 *   Unsqueeze/Concat -> Reshape, Transpose (K to [N,H,hd,S]); scores Div
 *   by sqrt(head size); the causal mask a Slice of a constant bool buffer
 *   [1,1,P,P] and Where with the float minimum; Softmax over the last axis;
 *   GELU in its tanh form as exported (Pow/Mul/Add/Mul/Tanh/Add/Mul); the LM
 *   head tied to the token table through Transpose(wte) -> MatMul;
 *   logits [N, S, vocab].
 * - bert, bert_tiny (BertForSequenceClassification, opset 17): word,
 *   position (a constant position_ids buffer Slice'd to S) and token-type
 *   embeddings by Gather; fused LayerNormalization; separate Q, K, V;
 *   the additive attention mask from the int64 mask by Unsqueeze/Unsqueeze/
 *   Cast/Sub(1 - m)/Mul(float min) as [N,1,1,S]; GELU in its erf form as
 *   exported (Div by sqrt 2, Erf, Add 1, Mul, Mul 0.5); the CLS token by
 *   Gather(axis=1, index 0) into the pooler (Gemm, Tanh) and classifier.
 * - vit, vit_tiny (torchvision vit_b_16, opset 17): Conv patch embedding,
 *   Reshape/Transpose to tokens, a class token Expand'ed to the batch and
 *   Concat'ed in front, the position embedding added ([1, T, D] broadcast),
 *   fused QKV projection (nn.MultiheadAttention's in_proj) split in three,
 *   fused LayerNormalization, erf GELU, the CLS token by Slice + Squeeze,
 *   the head a Gemm.
 *
 * Weights as the libraries initialise them: N(0, 0.02) for projections and
 * embeddings, LayerNorm scales in [0.9, 1.1) and shifts in [-0.05, 0.05)
 * (not exactly 1 and 0, so a kernel that ignores them differs), biases in
 * [-0.02, 0.02). Value names follow the libraries' state_dict keys. */
#include <math.h>
#include <string.h>

#include "samples/zoo.h"

typedef struct tf_cfg {
  int64_t vocab, positions, hidden, layers, heads, ffn, seq;
  int64_t types, labels;          /* BERT: token types, classifier labels */
  int64_t image, patch, classes;  /* ViT */
} tf_cfg;

static const float W_STD = 0.02f;

/* Opset 17 (LayerNormalization) comes with IR version 8. */
static void use_opset(zoo *z, int64_t opset) {
  z->g->opset = opset;
  z->g->opsets[0].version = opset;
  z->g->ir_version = opset >= 17 ? 8 : 7;
}

/* ---- small builders ---- */

/* A node whose output has shape (rank, d). */
static zt node(zoo *z, const char *name, const char *op, int n_in, const int *in, int rank,
               const int64_t *d, int n_attr, int *id) {
  zt y = {.rank = rank};
  for (int i = 0; i < rank; i++)
    y.d[i] = d[i];
  int n = zoo_node(z, name, op, n_in, in, n_attr, &y);
  if (id)
    *id = n;
  return n < 0 ? zoo_failed : y;
}

static zt like(zoo *z, const char *name, const char *op, int n_in, const int *in, zt shape) {
  return node(z, name, op, n_in, in, shape.rank, shape.d, 0, NULL);
}

static int i64s(zoo *z, const char *name, int n, const int64_t *v) {
  return zoo_const(z, name, AP_DT_INT64, 1, (const int64_t[]){n}, v);
}

static int i64_scalar(zoo *z, const char *name, int64_t v) {
  return zoo_const(z, name, AP_DT_INT64, 0, NULL, &v);
}

static int f32_scalar(zoo *z, const char *name, float v) {
  return zoo_const(z, name, AP_DT_FLOAT, 0, NULL, &v);
}

static int vec(zoo *z, const char *name, int64_t n, float lo, float hi) {
  return zoo_param(z, name, 1, &n, 0, lo, hi);
}

/* x [.., K] . W [K, N] + b: a PyTorch Linear as exported (MatMul, Add). */
static zt linear(zoo *z, const char *name, zt x, int64_t n) {
  int64_t k = x.d[x.rank - 1];
  int w = zoo_param(z, zoo_name(z, "%s.weight", name), 2, (const int64_t[]){k, n}, W_STD, 0, 0);
  int b = vec(z, zoo_name(z, "%s.bias", name), n, -0.02f, 0.02f);
  zt y = x;
  y.d[x.rank - 1] = n;
  zt m = like(z, zoo_name(z, "%s/MatMul", name), "MatMul", 2, (int[]){x.v, w}, y);
  return like(z, zoo_name(z, "%s/Add", name), "Add", 2, (int[]){m.v, b}, y);
}

/* LayerNorm over the last axis, decomposed as opset < 17 exporters write it. */
static zt layer_norm_decomposed(zoo *z, const char *name, zt x, float eps) {
  int64_t d = x.d[x.rank - 1];
  int g = vec(z, zoo_name(z, "%s.weight", name), d, 0.9f, 1.1f);
  int b = vec(z, zoo_name(z, "%s.bias", name), d, -0.05f, 0.05f);
  zt red = x;
  red.d[x.rank - 1] = 1;
  int n;
  zt mean = node(z, zoo_name(z, "%s/ReduceMean", name), "ReduceMean", 1, &x.v, red.rank, red.d,
                 1, &n);
  zoo_attr_ints(z, n, 0, "axes", 1, (const int64_t[]){-1});
  zt dev = like(z, zoo_name(z, "%s/Sub", name), "Sub", 2, (int[]){x.v, mean.v}, x);
  zt sq = like(z, zoo_name(z, "%s/Pow", name), "Pow", 2,
               (int[]){dev.v, f32_scalar(z, zoo_name(z, "%s.two", name), 2.0f)}, x);
  zt var = node(z, zoo_name(z, "%s/ReduceMean_1", name), "ReduceMean", 1, &sq.v, red.rank,
                red.d, 1, &n);
  zoo_attr_ints(z, n, 0, "axes", 1, (const int64_t[]){-1});
  zt ve = like(z, zoo_name(z, "%s/Add", name), "Add", 2,
               (int[]){var.v, f32_scalar(z, zoo_name(z, "%s.eps", name), eps)}, red);
  zt sd = like(z, zoo_name(z, "%s/Sqrt", name), "Sqrt", 1, &ve.v, red);
  zt nrm = like(z, zoo_name(z, "%s/Div", name), "Div", 2, (int[]){dev.v, sd.v}, x);
  zt sc = like(z, zoo_name(z, "%s/Mul", name), "Mul", 2, (int[]){nrm.v, g}, x);
  return like(z, zoo_name(z, "%s/Add_1", name), "Add", 2, (int[]){sc.v, b}, x);
}

/* LayerNormalization (opset 17) over the last axis. */
static zt layer_norm(zoo *z, const char *name, zt x, float eps) {
  int64_t d = x.d[x.rank - 1];
  int in[3] = {x.v, -1, -1};
  in[1] = vec(z, zoo_name(z, "%s.weight", name), d, 0.9f, 1.1f);
  in[2] = vec(z, zoo_name(z, "%s.bias", name), d, -0.05f, 0.05f);
  int n;
  zt y = node(z, zoo_name(z, "%s/LayerNormalization", name), "LayerNormalization", 3, in,
              x.rank, x.d, 2, &n);
  zoo_attr_int(z, n, 0, "axis", -1);
  zoo_attr_float(z, n, 1, "epsilon", eps);
  return y;
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's NewGELU. */
static zt gelu_tanh(zoo *z, const char *name, zt x) {
  zt p = like(z, zoo_name(z, "%s/Pow", name), "Pow", 2,
              (int[]){x.v, f32_scalar(z, zoo_name(z, "%s.three", name), 3.0f)}, x);
  zt a = like(z, zoo_name(z, "%s/Mul", name), "Mul", 2,
              (int[]){f32_scalar(z, zoo_name(z, "%s.c1", name), 0.044715f), p.v}, x);
  zt b = like(z, zoo_name(z, "%s/Add", name), "Add", 2, (int[]){x.v, a.v}, x);
  zt c = like(z, zoo_name(z, "%s/Mul_1", name), "Mul", 2,
              (int[]){f32_scalar(z, zoo_name(z, "%s.c2", name), 0.7978845608f), b.v}, x);
  zt t = like(z, zoo_name(z, "%s/Tanh", name), "Tanh", 1, &c.v, x);
  zt u = like(z, zoo_name(z, "%s/Add_1", name), "Add", 2,
              (int[]){f32_scalar(z, zoo_name(z, "%s.one", name), 1.0f), t.v}, x);
  zt h = like(z, zoo_name(z, "%s/Mul_2", name), "Mul", 2,
              (int[]){f32_scalar(z, zoo_name(z, "%s.half", name), 0.5f), x.v}, x);
  return like(z, zoo_name(z, "%s/Mul_3", name), "Mul", 2, (int[]){h.v, u.v}, x);
}

/* x * 0.5 (1 + erf(x / sqrt 2)), BERT's and ViT's GELU as exported. */
static zt gelu_erf(zoo *z, const char *name, zt x) {
  zt d = like(z, zoo_name(z, "%s/Div", name), "Div", 2,
              (int[]){x.v, f32_scalar(z, zoo_name(z, "%s.sqrt2", name), 1.4142135f)}, x);
  zt e = like(z, zoo_name(z, "%s/Erf", name), "Erf", 1, &d.v, x);
  zt a = like(z, zoo_name(z, "%s/Add", name), "Add", 2,
              (int[]){e.v, f32_scalar(z, zoo_name(z, "%s.one", name), 1.0f)}, x);
  zt m = like(z, zoo_name(z, "%s/Mul", name), "Mul", 2, (int[]){x.v, a.v}, x);
  return like(z, zoo_name(z, "%s/Mul_1", name), "Mul", 2,
              (int[]){m.v, f32_scalar(z, zoo_name(z, "%s.half", name), 0.5f)}, x);
}

/* Dim i of x as a [1] tensor: Shape, Gather(index), Unsqueeze. */
static int dim_of(zoo *z, const char *name, zt x, int64_t i) {
  int n;
  zt shape = node(z, zoo_name(z, "%s/Shape", name), "Shape", 1, &x.v, 1,
                  (const int64_t[]){x.rank}, 0, NULL);
  zt s = node(z, zoo_name(z, "%s/Gather", name), "Gather", 2,
              (int[]){shape.v, i64_scalar(z, zoo_name(z, "%s.index", name), i)}, 0, NULL, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  zt u = node(z, zoo_name(z, "%s/Unsqueeze", name), "Unsqueeze", 2,
              (int[]){s.v, i64s(z, zoo_name(z, "%s.axes", name), 1, (const int64_t[]){0})}, 1,
              (const int64_t[]){1}, 0, NULL);
  return u.v;
}

static zt transpose(zoo *z, const char *name, zt x, const int64_t *perm) {
  zt y = x;
  for (int i = 0; i < x.rank; i++)
    y.d[i] = x.d[perm[i]];
  int n;
  y = node(z, name, "Transpose", 1, &x.v, y.rank, y.d, 1, &n);
  zoo_attr_ints(z, n, 0, "perm", x.rank, perm);
  return y;
}

/* [N, S, D] -> [N, H, S, hd]: Reshape to [N, S, H, hd] with a target built
 * from the input's own shape (Shape/Gather/Unsqueeze/Concat), Transpose. */
static zt split_heads(zoo *z, const char *name, zt x, int64_t heads, bool key) {
  int64_t hd = x.d[2] / heads;
  int parts[4] = {dim_of(z, zoo_name(z, "%s/n", name), x, 0),
                  dim_of(z, zoo_name(z, "%s/s", name), x, 1),
                  i64s(z, zoo_name(z, "%s.heads", name), 1, &heads),
                  i64s(z, zoo_name(z, "%s.head_size", name), 1, &hd)};
  int n;
  zt target = node(z, zoo_name(z, "%s/Concat", name), "Concat", 4, parts, 1,
                   (const int64_t[]){4}, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  zt r = node(z, zoo_name(z, "%s/Reshape", name), "Reshape", 2, (int[]){x.v, target.v}, 4,
              (const int64_t[]){x.d[0], x.d[1], heads, hd}, 0, NULL);
  /* K goes straight to [N, H, hd, S] for Q.K^T. */
  return transpose(z, zoo_name(z, "%s/Transpose", name), r,
                   key ? (const int64_t[]){0, 2, 3, 1} : (const int64_t[]){0, 2, 1, 3});
}

/* [N, H, S, hd] -> [N, S, D]. */
static zt merge_heads(zoo *z, const char *name, zt x) {
  zt t = transpose(z, zoo_name(z, "%s/Transpose", name), x, (const int64_t[]){0, 2, 1, 3});
  int64_t d = x.d[1] * x.d[3];
  int parts[3] = {dim_of(z, zoo_name(z, "%s/n", name), t, 0),
                  dim_of(z, zoo_name(z, "%s/s", name), t, 1),
                  i64s(z, zoo_name(z, "%s.hidden", name), 1, &d)};
  int n;
  zt target = node(z, zoo_name(z, "%s/Concat", name), "Concat", 3, parts, 1,
                   (const int64_t[]){3}, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  return node(z, zoo_name(z, "%s/Reshape", name), "Reshape", 2, (int[]){t.v, target.v}, 3,
              (const int64_t[]){x.d[0], x.d[2], d}, 0, NULL);
}

/* softmax(Q.K^T / sqrt(hd) [masked]) . V over heads; Q, K, V [N, S, D]. The
 * mask is a bool [1,1,S,S] (keep where true) or an additive [N,1,1,S]. */
static zt attention(zoo *z, const char *name, zt q, zt k, zt v, int64_t heads, int causal,
                    int additive) {
  zt qh = split_heads(z, zoo_name(z, "%s/q", name), q, heads, false);
  zt kh = split_heads(z, zoo_name(z, "%s/k", name), k, heads, true);
  zt vh = split_heads(z, zoo_name(z, "%s/v", name), v, heads, false);
  int64_t hd = q.d[2] / heads, S = q.d[1];
  zt scores = node(z, zoo_name(z, "%s/MatMul", name), "MatMul", 2, (int[]){qh.v, kh.v}, 4,
                   (const int64_t[]){q.d[0], heads, S, S}, 0, NULL);
  scores = like(z, zoo_name(z, "%s/Div", name), "Div", 2,
                (int[]){scores.v, f32_scalar(z, zoo_name(z, "%s.scale", name),
                                              sqrtf((float)hd))},
                scores);
  if (causal >= 0)
    scores = like(z, zoo_name(z, "%s/Where", name), "Where", 3,
                  (int[]){causal, scores.v,
                          f32_scalar(z, zoo_name(z, "%s.masked", name), -3.4028234663852886e38f)},
                  scores);
  if (additive >= 0)
    scores = like(z, zoo_name(z, "%s/Add", name), "Add", 2, (int[]){scores.v, additive}, scores);
  int n;
  zt p = node(z, zoo_name(z, "%s/Softmax", name), "Softmax", 1, &scores.v, 4, scores.d, 1, &n);
  zoo_attr_int(z, n, 0, "axis", -1);
  zt ctx = node(z, zoo_name(z, "%s/MatMul_1", name), "MatMul", 2, (int[]){p.v, vh.v}, 4,
                (const int64_t[]){q.d[0], heads, S, hd}, 0, NULL);
  return merge_heads(z, zoo_name(z, "%s/merge", name), ctx);
}

/* A fused projection [.., D] -> [.., 3D] split in three along the last axis. */
static void fused_qkv(zoo *z, const char *name, const char *wname, zt x, zt *q, zt *k, zt *v) {
  int64_t d = x.d[x.rank - 1], d3 = 3 * d;
  int w = zoo_param(z, zoo_name(z, "%s.weight", wname), 2, (const int64_t[]){d, d3}, W_STD, 0, 0);
  int b = vec(z, zoo_name(z, "%s.bias", wname), d3, -0.02f, 0.02f);
  zt y = x;
  y.d[x.rank - 1] = d3;
  zt m = like(z, zoo_name(z, "%s/MatMul", name), "MatMul", 2, (int[]){x.v, w}, y);
  zt a = like(z, zoo_name(z, "%s/Add", name), "Add", 2, (int[]){m.v, b}, y);
  zt outs[3];
  const char *names[3] = {"q", "k", "v"};
  int sp = i64s(z, zoo_name(z, "%s.split", name), 3, (const int64_t[]){d, d, d});
  if (z->failed || a.v < 0) {
    *q = *k = *v = zoo_failed;
    return;
  }
  int ni = ap_graph_add_node(z->g, zoo_name(z, "%s/Split", name), "", "Split", 2, 3, 1);
  if (ni < 0) {
    z->failed = true;
    *q = *k = *v = zoo_failed;
    return;
  }
  ap_node *n = &z->g->nodes[ni];
  n->in[0] = a.v;
  n->in[1] = sp;
  for (int i = 0; i < 3; i++) {
    int ov = ap_graph_add_value(z->g, zoo_name(z, "%s/%s", name, names[i]), AP_VAL_NODE);
    if (ov < 0) {
      z->failed = true;
      *q = *k = *v = zoo_failed;
      return;
    }
    z->g->nodes[ni].out[i] = ov;
    z->g->values[ov].producer = ni;
    outs[i] = x;
    outs[i].v = ov;
  }
  zoo_attr_int(z, ni, 0, "axis", x.rank - 1);
  *q = outs[0], *k = outs[1], *v = outs[2];
}

static zt add(zoo *z, const char *name, zt a, zt b) {
  zt y = a.rank >= b.rank ? a : b;
  return like(z, name, "Add", 2, (int[]){a.v, b.v}, y);
}

/* The sequence length, or 0 (and the model failed) when it is longer than
 * the model's positions. */
static int64_t seq_of(zoo *z, int64_t dflt, int64_t max) {
  int64_t s = z->opts.seq > 0 ? z->opts.seq : dflt;
  if (s > max) {
    z->failed = true;
    z->error = zoo_name(z, "--seq %lld is longer than the model's %lld positions", (long long)s,
                        (long long)max);
    return 0;
  }
  return s;
}

/* ---- GPT-2 ---- */

static void gpt2(zoo *z, const tf_cfg *c) {
  int64_t S = seq_of(z, c->seq, c->positions), D = c->hidden, P = c->positions;
  if (!S)
    return;
  zt ids = zoo_input_named(z, "input_ids", AP_DT_INT64, 1, &S);
  int wte = zoo_param(z, "transformer.wte.weight", 2, (const int64_t[]){c->vocab, D}, W_STD, 0,
                      0);
  int wpe = zoo_param(z, "transformer.wpe.weight", 2, (const int64_t[]){P, D}, 0.01f, 0, 0);
  zt h = node(z, "transformer/wte/Gather", "Gather", 2, (int[]){wte, ids.v}, 3,
              (const int64_t[]){ids.d[0], S, D}, 0, NULL);
  /* position_ids = arange(S).unsqueeze(0), S from the ids' shape. */
  int n;
  zt shape = node(z, "transformer/Shape", "Shape", 1, &ids.v, 1, (const int64_t[]){2}, 0, NULL);
  zt len = node(z, "transformer/Gather", "Gather", 2,
                (int[]){shape.v, i64_scalar(z, "transformer.seq_axis", 1)}, 0, NULL, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  zt pos = node(z, "transformer/Range", "Range", 3,
                (int[]){i64_scalar(z, "transformer.range_start", 0), len.v,
                        i64_scalar(z, "transformer.range_delta", 1)},
                1, &S, 0, NULL);
  pos = node(z, "transformer/Unsqueeze", "Unsqueeze", 2,
             (int[]){pos.v, i64s(z, "transformer.unsqueeze_axes", 1, (const int64_t[]){0})}, 2,
             (const int64_t[]){1, S}, 0, NULL);
  zt pe = node(z, "transformer/wpe/Gather", "Gather", 2, (int[]){wpe, pos.v}, 3,
               (const int64_t[]){1, S, D}, 0, NULL);
  h = add(z, "transformer/Add", h, pe);
  /* The causal mask: the registered bool buffer [1,1,P,P], sliced to S. */
  bool *tri = ap_arena_array(z->g->arena, (size_t)(P * P) + 1, sizeof *tri);
  if (!tri) {
    z->failed = true;
    return;
  }
  for (int64_t i = 0; i < P; i++)
    for (int64_t j = 0; j < P; j++)
      tri[i * P + j] = j <= i;
  int buf = zoo_const(z, "transformer.h.attn.bias", AP_DT_BOOL, 4,
                      (const int64_t[]){1, 1, P, P}, tri);
  int ends = node(z, "transformer/mask/Unsqueeze", "Unsqueeze", 2,
                  (int[]){len.v, i64s(z, "transformer.mask.axes0", 1, (const int64_t[]){0})}, 1,
                  (const int64_t[]){1}, 0, NULL).v;
  zt rows = node(z, "transformer/mask/Slice", "Slice", 4,
                 (int[]){buf, i64s(z, "transformer.mask.start", 1, (const int64_t[]){0}), ends,
                         i64s(z, "transformer.mask.axis2", 1, (const int64_t[]){2})},
                 4, (const int64_t[]){1, 1, S, P}, 0, NULL);
  zt mask = node(z, "transformer/mask/Slice_1", "Slice", 4,
                 (int[]){rows.v, i64s(z, "transformer.mask.start_1", 1, (const int64_t[]){0}),
                         ends, i64s(z, "transformer.mask.axis3", 1, (const int64_t[]){3})},
                 4, (const int64_t[]){1, 1, S, S}, 0, NULL);
  for (int64_t l = 0; l < c->layers; l++) {
    const char *blk = zoo_name(z, "transformer.h.%lld", (long long)l);
    zt a = layer_norm_decomposed(z, zoo_name(z, "%s.ln_1", blk), h, 1e-5f);
    zt q, k, v;
    fused_qkv(z, zoo_name(z, "%s/attn/c_attn", blk), zoo_name(z, "%s.attn.c_attn", blk), a, &q,
              &k, &v);
    zt att = attention(z, zoo_name(z, "%s/attn", blk), q, k, v, c->heads, mask.v, -1);
    att = linear(z, zoo_name(z, "%s.attn.c_proj", blk), att, D);
    h = add(z, zoo_name(z, "%s/Add", blk), att, h);
    zt m = layer_norm_decomposed(z, zoo_name(z, "%s.ln_2", blk), h, 1e-5f);
    m = linear(z, zoo_name(z, "%s.mlp.c_fc", blk), m, 4 * D);
    m = gelu_tanh(z, zoo_name(z, "%s/mlp/act", blk), m);
    m = linear(z, zoo_name(z, "%s.mlp.c_proj", blk), m, D);
    h = add(z, zoo_name(z, "%s/Add_1", blk), m, h);
  }
  h = layer_norm_decomposed(z, "transformer.ln_f", h, 1e-5f);
  /* The LM head is the token table, tied: logits = h . wte^T. */
  zt wt = node(z, "lm_head/Transpose", "Transpose", 1, &wte, 2, (const int64_t[]){D, c->vocab}, 1,
               &n);
  zoo_attr_ints(z, n, 0, "perm", 2, (const int64_t[]){1, 0});
  z->out_name = "logits";
  zt logits = node(z, "lm_head/MatMul", "MatMul", 2, (int[]){h.v, wt.v}, 3,
                   (const int64_t[]){ids.d[0], S, c->vocab}, 0, NULL);
  zoo_output_named(z, logits, AP_DT_FLOAT);
}

void zoo_gpt2_tiny(zoo *z) {
  gpt2(z, &(tf_cfg){.vocab = 256, .positions = 32, .hidden = 64, .layers = 2, .heads = 4,
                    .seq = 16});
}

void zoo_gpt2(zoo *z) {
  gpt2(z, &(tf_cfg){.vocab = 50257, .positions = 1024, .hidden = 768, .layers = 12,
                    .heads = 12, .seq = 1024});
}

/* ---- BERT ---- */

static void bert(zoo *z, const tf_cfg *c) {
  use_opset(z, 17);
  int64_t S = seq_of(z, c->seq, c->positions), D = c->hidden, P = c->positions;
  if (!S)
    return;
  zt ids = zoo_input_named(z, "input_ids", AP_DT_INT64, 1, &S);
  zt am = zoo_input_named(z, "attention_mask", AP_DT_INT64, 1, &S);
  zt tt = zoo_input_named(z, "token_type_ids", AP_DT_INT64, 1, &S);
  int64_t N = ids.d[0];
  int we = zoo_param(z, "bert.embeddings.word_embeddings.weight", 2,
                     (const int64_t[]){c->vocab, D}, W_STD, 0, 0);
  int pe = zoo_param(z, "bert.embeddings.position_embeddings.weight", 2,
                     (const int64_t[]){P, D}, W_STD, 0, 0);
  int te = zoo_param(z, "bert.embeddings.token_type_embeddings.weight", 2,
                     (const int64_t[]){c->types, D}, W_STD, 0, 0);
  zt e = node(z, "bert/embeddings/word/Gather", "Gather", 2, (int[]){we, ids.v}, 3,
              (const int64_t[]){N, S, D}, 0, NULL);
  zt t = node(z, "bert/embeddings/type/Gather", "Gather", 2, (int[]){te, tt.v}, 3,
              (const int64_t[]){N, S, D}, 0, NULL);
  e = add(z, "bert/embeddings/Add", e, t);
  /* position_ids: the registered buffer arange(P)[None], sliced to S. */
  int64_t *ar = ap_arena_array(z->g->arena, (size_t)P + 1, sizeof *ar);
  if (!ar) {
    z->failed = true;
    return;
  }
  for (int64_t i = 0; i < P; i++)
    ar[i] = i;
  int posbuf = zoo_const(z, "bert.embeddings.position_ids", AP_DT_INT64, 2,
                         (const int64_t[]){1, P}, ar);
  zt pos = node(z, "bert/embeddings/Slice", "Slice", 4,
                (int[]){posbuf, i64s(z, "bert.embeddings.pos_start", 1, (const int64_t[]){0}),
                        dim_of(z, "bert/embeddings/seq", ids, 1),
                        i64s(z, "bert.embeddings.pos_axis", 1, (const int64_t[]){1})},
                2, (const int64_t[]){1, S}, 0, NULL);
  zt p = node(z, "bert/embeddings/position/Gather", "Gather", 2, (int[]){pe, pos.v}, 3,
              (const int64_t[]){1, S, D}, 0, NULL);
  e = add(z, "bert/embeddings/Add_1", e, p);
  zt h = layer_norm(z, "bert.embeddings.LayerNorm", e, 1e-12f);
  /* The extended attention mask: (1 - mask[:, None, None, :]) * min. */
  zt m = node(z, "bert/mask/Unsqueeze", "Unsqueeze", 2,
              (int[]){am.v, i64s(z, "bert.mask.axes1", 1, (const int64_t[]){1})}, 3,
              (const int64_t[]){N, 1, S}, 0, NULL);
  m = node(z, "bert/mask/Unsqueeze_1", "Unsqueeze", 2,
           (int[]){m.v, i64s(z, "bert.mask.axes2", 1, (const int64_t[]){2})}, 4,
           (const int64_t[]){N, 1, 1, S}, 0, NULL);
  int n;
  m = node(z, "bert/mask/Cast", "Cast", 1, &m.v, 4, m.d, 1, &n);
  zoo_attr_int(z, n, 0, "to", AP_DT_FLOAT);
  m = like(z, "bert/mask/Sub", "Sub", 2, (int[]){f32_scalar(z, "bert.mask.one", 1.0f), m.v}, m);
  m = like(z, "bert/mask/Mul", "Mul", 2,
           (int[]){m.v, f32_scalar(z, "bert.mask.min", -3.4028234663852886e38f)}, m);
  for (int64_t l = 0; l < c->layers; l++) {
    const char *blk = zoo_name(z, "bert.encoder.layer.%lld", (long long)l);
    zt q = linear(z, zoo_name(z, "%s.attention.self.query", blk), h, D);
    zt k = linear(z, zoo_name(z, "%s.attention.self.key", blk), h, D);
    zt v = linear(z, zoo_name(z, "%s.attention.self.value", blk), h, D);
    zt a = attention(z, zoo_name(z, "%s/attention", blk), q, k, v, c->heads, -1, m.v);
    a = linear(z, zoo_name(z, "%s.attention.output.dense", blk), a, D);
    h = layer_norm(z, zoo_name(z, "%s.attention.output.LayerNorm", blk),
                   add(z, zoo_name(z, "%s/attention/residual", blk), a, h), 1e-12f);
    zt f = linear(z, zoo_name(z, "%s.intermediate.dense", blk), h, c->ffn);
    f = gelu_erf(z, zoo_name(z, "%s/intermediate/act", blk), f);
    f = linear(z, zoo_name(z, "%s.output.dense", blk), f, D);
    h = layer_norm(z, zoo_name(z, "%s.output.LayerNorm", blk),
                   add(z, zoo_name(z, "%s/output/residual", blk), f, h), 1e-12f);
  }
  /* The pooler reads the first token: hidden[:, 0]. */
  zt cls = node(z, "bert/pooler/Gather", "Gather", 2,
                (int[]){h.v, i64_scalar(z, "bert.pooler.first", 0)}, 2, (const int64_t[]){N, D},
                1, &n);
  zoo_attr_int(z, n, 0, "axis", 1);
  int in[3] = {cls.v, -1, -1};
  in[1] = zoo_param(z, "bert.pooler.dense.weight", 2, (const int64_t[]){D, D}, W_STD, 0, 0);
  in[2] = vec(z, "bert.pooler.dense.bias", D, -0.02f, 0.02f);
  zt pooled = node(z, "bert/pooler/Gemm", "Gemm", 3, in, 2, cls.d, 1, &n);
  zoo_attr_int(z, n, 0, "transB", 1);
  pooled = like(z, "bert/pooler/Tanh", "Tanh", 1, &pooled.v, pooled);
  in[0] = pooled.v;
  in[1] = zoo_param(z, "classifier.weight", 2, (const int64_t[]){c->labels, D}, W_STD, 0, 0);
  in[2] = vec(z, "classifier.bias", c->labels, -0.02f, 0.02f);
  z->out_name = "logits";
  zt logits = node(z, "classifier/Gemm", "Gemm", 3, in, 2, (const int64_t[]){N, c->labels}, 1,
                   &n);
  zoo_attr_int(z, n, 0, "transB", 1);
  zoo_output_named(z, logits, AP_DT_FLOAT);
}

void zoo_bert_tiny(zoo *z) {
  bert(z, &(tf_cfg){.vocab = 256, .positions = 32, .hidden = 64, .layers = 2, .heads = 4,
                    .ffn = 256, .seq = 16, .types = 2, .labels = 2});
}

void zoo_bert(zoo *z) {
  bert(z, &(tf_cfg){.vocab = 30522, .positions = 512, .hidden = 768, .layers = 12, .heads = 12,
                    .ffn = 3072, .seq = 128, .types = 2, .labels = 2});
}

/* ---- ViT ---- */

static void vit(zoo *z, const tf_cfg *c) {
  use_opset(z, 17);
  int64_t D = c->hidden, g = c->image / c->patch, T = g * g + 1;
  zt x = zoo_input_named(z, "pixel_values", AP_DT_FLOAT, 3,
                         (const int64_t[]){3, c->image, c->image});
  int64_t N = x.d[0];
  int in[3] = {x.v, -1, -1};
  in[1] = zoo_param(z, "conv_proj.weight", 4, (const int64_t[]){D, 3, c->patch, c->patch},
                    W_STD, 0, 0);
  in[2] = vec(z, "conv_proj.bias", D, -0.02f, 0.02f);
  int n;
  zt p = node(z, "conv_proj/Conv", "Conv", 3, in, 4, (const int64_t[]){N, D, g, g}, 2, &n);
  zoo_attr_ints(z, n, 0, "kernel_shape", 2, (const int64_t[]){c->patch, c->patch});
  zoo_attr_ints(z, n, 1, "strides", 2, (const int64_t[]){c->patch, c->patch});
  /* x.reshape(n, D, g*g).permute(0, 2, 1) */
  int parts[3] = {dim_of(z, "encoder/n", x, 0), i64s(z, "encoder.hidden", 1, &D),
                  i64s(z, "encoder.minus_one", 1, (const int64_t[]){-1})};
  zt target = node(z, "encoder/Concat", "Concat", 3, parts, 1, (const int64_t[]){3}, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  zt tok = node(z, "encoder/Reshape", "Reshape", 2, (int[]){p.v, target.v}, 3,
                (const int64_t[]){N, D, g * g}, 0, NULL);
  tok = transpose(z, "encoder/Transpose", tok, (const int64_t[]){0, 2, 1});
  /* The class token, expanded to the batch and put in front. */
  int ct = zoo_param(z, "class_token", 3, (const int64_t[]){1, 1, D}, W_STD, 0, 0);
  int eparts[2] = {dim_of(z, "encoder/cls_n", x, 0),
                   i64s(z, "encoder.cls_rest", 2, (const int64_t[]){1, D})};
  zt eshape = node(z, "encoder/Concat_1", "Concat", 2, eparts, 1, (const int64_t[]){3}, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 0);
  zt cls = node(z, "encoder/Expand", "Expand", 2, (int[]){ct, eshape.v}, 3,
                (const int64_t[]){N, 1, D}, 0, NULL);
  zt h = node(z, "encoder/Concat_2", "Concat", 2, (int[]){cls.v, tok.v}, 3,
              (const int64_t[]){N, T, D}, 1, &n);
  zoo_attr_int(z, n, 0, "axis", 1);
  int pos = zoo_param(z, "encoder.pos_embedding", 3, (const int64_t[]){1, T, D}, W_STD, 0, 0);
  h = like(z, "encoder/Add", "Add", 2, (int[]){h.v, pos}, h);
  for (int64_t l = 0; l < c->layers; l++) {
    const char *blk = zoo_name(z, "encoder.layers.encoder_layer_%lld", (long long)l);
    zt a = layer_norm(z, zoo_name(z, "%s.ln_1", blk), h, 1e-6f);
    zt q, k, v;
    fused_qkv(z, zoo_name(z, "%s/self_attention/in_proj", blk),
              zoo_name(z, "%s.self_attention.in_proj", blk), a, &q, &k, &v);
    a = attention(z, zoo_name(z, "%s/self_attention", blk), q, k, v, c->heads, -1, -1);
    a = linear(z, zoo_name(z, "%s.self_attention.out_proj", blk), a, D);
    h = add(z, zoo_name(z, "%s/Add", blk), a, h);
    zt m = layer_norm(z, zoo_name(z, "%s.ln_2", blk), h, 1e-6f);
    m = linear(z, zoo_name(z, "%s.mlp.0", blk), m, c->ffn);
    m = gelu_erf(z, zoo_name(z, "%s/mlp/act", blk), m);
    m = linear(z, zoo_name(z, "%s.mlp.3", blk), m, D);
    h = add(z, zoo_name(z, "%s/Add_1", blk), m, h);
  }
  h = layer_norm(z, "encoder.ln", h, 1e-6f);
  /* x[:, 0]: Slice of the first token, Squeeze of its axis. */
  zt first = node(z, "heads/Slice", "Slice", 4,
                  (int[]){h.v, i64s(z, "heads.start", 1, (const int64_t[]){0}),
                          i64s(z, "heads.end", 1, (const int64_t[]){1}),
                          i64s(z, "heads.axis", 1, (const int64_t[]){1})},
                  3, (const int64_t[]){N, 1, D}, 0, NULL);
  first = node(z, "heads/Squeeze", "Squeeze", 2,
               (int[]){first.v, i64s(z, "heads.squeeze_axes", 1, (const int64_t[]){1})}, 2,
               (const int64_t[]){N, D}, 0, NULL);
  in[0] = first.v;
  in[1] = zoo_param(z, "heads.head.weight", 2, (const int64_t[]){c->classes, D}, W_STD, 0, 0);
  in[2] = vec(z, "heads.head.bias", c->classes, -0.02f, 0.02f);
  z->out_name = "logits";
  zt logits = node(z, "heads/Gemm", "Gemm", 3, in, 2, (const int64_t[]){N, c->classes}, 1, &n);
  zoo_attr_int(z, n, 0, "transB", 1);
  zoo_output_named(z, logits, AP_DT_FLOAT);
}

void zoo_vit_tiny(zoo *z) {
  vit(z, &(tf_cfg){.hidden = 64, .layers = 2, .heads = 4, .ffn = 128, .image = 32, .patch = 8,
                   .classes = 10});
}

void zoo_vit(zoo *z) {
  vit(z, &(tf_cfg){.hidden = 768, .layers = 12, .heads = 12, .ffn = 3072, .image = 224,
                   .patch = 16, .classes = 1000});
}
