"""Models for the fusion of inference programs (codegen/fuse.c,
tests/test_fusion.c): convolutions followed by BatchNormalization, a
residual Add and activations, in the shapes fusion takes and in the ones it
must leave alone. Weights are initializers unless said otherwise; the input
is a seeded random tensor.

Usage: fusion_models.py OUTDIR   (writes OUTDIR/NAME.onnx, OUTDIR/NAME_data/input_N.pb)
Run with /usr/bin/python3 (Debian's onnx).
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from model_files import write_whole

F = TensorProto.FLOAT
rng = np.random.default_rng(29)


def arr(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def conv_w(name, m, c, k=3):
    return arr(name, rng.standard_normal((m, c, k, k)) * (1.0 / np.sqrt(c * k * k)))


def bn(prefix, c, x, y, eps=1e-5):
    inits = [arr(f"{prefix}.g", rng.uniform(0.5, 1.5, c)), arr(f"{prefix}.b", rng.standard_normal(c) * 0.2),
             arr(f"{prefix}.m", rng.standard_normal(c) * 0.1), arr(f"{prefix}.v", rng.uniform(0.5, 2.0, c))]
    node = helper.make_node("BatchNormalization", [x] + [i.name for i in inits], [y], name=prefix,
                            epsilon=eps)
    return node, inits


def save(outdir, name, nodes, inputs, y_shape, inits, opset=13):
    """inputs: (name, shape) of the run-time inputs, fed seeded values."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info("y", F, y_shape)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    write_whole(f"{outdir}/{name}.onnx", m.SerializeToString())
    os.makedirs(f"{outdir}/{name}_data", exist_ok=True)
    for i, (n, s) in enumerate(inputs):
        write_whole(f"{outdir}/{name}_data/input_{i}.pb",
                    arr(n, rng.standard_normal(s)).SerializeToString())


def residual_block(outdir):
    """Conv+BN+Relu, Conv+BN+Add(shortcut)+Relu, a projection shortcut
    Conv+BN, then Conv with bias + BN + Clip (Relu6) and a Conv + Sigmoid:
    every epilogue operation, the weights folded."""
    n, c, h = 2, 8, 12
    nodes, inits = [], []
    inits += [conv_w("w1", 16, c), conv_w("w2", 16, 16), conv_w("wp", 16, c, 1), conv_w("w3", 16, 16),
              arr("b3", rng.standard_normal(16) * 0.1), conv_w("w4", 8, 16, 1),
              arr("lo", 0.0), arr("hi", 6.0)]
    nodes.append(helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]))
    nd, ii = bn("bn1", 16, "c1", "n1"); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("Relu", ["n1"], ["r1"], name="relu1"))
    nodes.append(helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]))
    nd, ii = bn("bn2", 16, "c2", "n2"); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("Conv", ["x", "wp"], ["cp"], name="proj"))
    nd, ii = bn("bnp", 16, "cp", "np"); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("Add", ["np", "n2"], ["s"], name="add"))
    nodes.append(helper.make_node("Relu", ["s"], ["r2"], name="relu2"))
    nodes.append(helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]))
    nd, ii = bn("bn3", 16, "c3", "n3"); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("Clip", ["n3", "lo", "hi"], ["r3"], name="relu6"))
    nodes.append(helper.make_node("Conv", ["r3", "w4"], ["c4"], name="conv4"))
    nodes.append(helper.make_node("Sigmoid", ["c4"], ["y"], name="sigmoid"))
    save(outdir, "fuse_block", nodes, [("x", [n, c, h, h])], [n, 8, h, h], inits)


def fed_weights(outdir):
    """A weight fed at run time: BatchNormalization cannot be folded, the
    epilogue scales and shifts; then LeakyRelu."""
    n, c, h = 1, 4, 10
    inits = [arr("b1", rng.standard_normal(8) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w", "b1"], ["c1"], name="conv", pads=[1, 1, 1, 1])]
    nd, ii = bn("bn", 8, "c1", "n1", eps=1e-3); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("LeakyRelu", ["n1"], ["y"], name="leaky", alpha=0.2))
    save(outdir, "fuse_fed_weight", nodes, [("x", [n, c, h, h]), ("w", [8, c, 3, 3])], [n, 8, h, h], inits)


def not_fused(outdir):
    """What convolution fusion must leave alone: a convolution output read
    twice, and a BatchNormalization whose statistics another node reads too
    (the Relu and the Add reading c1 twice still become one element-wise
    loop)."""
    n, c, h = 1, 4, 4
    inits = [conv_w("w1", 4, c), conv_w("w2", 4, 4)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Add", ["c1", "r1"], ["s1"], name="twice"),
             helper.make_node("Conv", ["s1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1])]
    nd, ii = bn("bn", 4, "c2", "n2"); nodes.append(nd); inits += ii
    nodes.append(helper.make_node("Add", ["n2", "bn.g"], ["y"], name="reads_gamma"))
    save(outdir, "fuse_none", nodes, [("x", [n, c, h, h])], [n, 4, h, h], inits)


def bn_only(outdir):
    """Conv with a bias, then BatchNormalization: folded whole, the kernel
    is the convolution alone."""
    n, c, h = 1, 3, 6
    inits = [conv_w("w", 5, c), arr("b", rng.standard_normal(5) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], name="conv", pads=[1, 1, 1, 1])]
    nd, ii = bn("bn", 5, "c1", "y"); nodes.append(nd); inits += ii
    save(outdir, "fuse_bn_only", nodes, [("x", [n, c, h, h])], [n, 5, h, h], inits)


def gelu_tanh(nodes, inits, p, x, y):
    """GPT-2's GELU as its exporter writes it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inits += [arr(f"{p}.three", 3.0), arr(f"{p}.c1", 0.044715), arr(f"{p}.c2", 0.7978845608),
              arr(f"{p}.one", 1.0), arr(f"{p}.half", 0.5)]
    nodes += [helper.make_node("Pow", [x, f"{p}.three"], [f"{p}.p"], name=f"{p}/Pow"),
              helper.make_node("Mul", [f"{p}.c1", f"{p}.p"], [f"{p}.a"], name=f"{p}/Mul"),
              helper.make_node("Add", [x, f"{p}.a"], [f"{p}.b"], name=f"{p}/Add"),
              helper.make_node("Mul", [f"{p}.c2", f"{p}.b"], [f"{p}.c"], name=f"{p}/Mul_1"),
              helper.make_node("Tanh", [f"{p}.c"], [f"{p}.t"], name=f"{p}/Tanh"),
              helper.make_node("Add", [f"{p}.one", f"{p}.t"], [f"{p}.u"], name=f"{p}/Add_1"),
              helper.make_node("Mul", [f"{p}.half", x], [f"{p}.h"], name=f"{p}/Mul_2"),
              helper.make_node("Mul", [f"{p}.h", f"{p}.u"], [y], name=f"{p}/Mul_3")]


def mlp_gelu(outdir):
    """A transformer MLP as GPT-2's exporter writes it: MatMul + Add(bias)
    + GELU (tanh form, Pow/Mul/Add/Mul/Tanh/Add/Mul/Mul), then MatMul +
    Add(bias first) + the residual Add: two MatMul epilogues."""
    n, s, d, h = 2, 6, 16, 32
    inits = [arr("w1", rng.standard_normal((d, h)) / np.sqrt(d)), arr("b1", rng.standard_normal(h) * 0.1),
             arr("w2", rng.standard_normal((h, d)) / np.sqrt(h)), arr("b2", rng.standard_normal(d) * 0.1)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc/MatMul"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc/Add")]
    gelu_tanh(nodes, inits, "act", "a1", "g")
    nodes += [helper.make_node("MatMul", ["g", "w2"], ["m2"], name="proj/MatMul"),
              helper.make_node("Add", ["b2", "m2"], ["a2"], name="proj/Add"),
              helper.make_node("Add", ["a2", "x"], ["y"], name="residual")]
    save(outdir, "fuse_mlp", nodes, [("x", [n, s, d])], [n, s, d], inits)


def gemm_act(outdir):
    """Gemm (bias C, transB) + Relu, then Gemm without C, its B a
    Transpose of a constant (read in place: transB), + Sigmoid."""
    n, d, h = 4, 12, 20
    inits = [arr("w1", rng.standard_normal((h, d)) / np.sqrt(d)), arr("c1", rng.standard_normal(h) * 0.1),
             arr("w2t", rng.standard_normal((6, h)) / np.sqrt(h))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "c1"], ["z1"], name="gemm1", transB=1),
             helper.make_node("Relu", ["z1"], ["r1"], name="relu"),
             helper.make_node("Transpose", ["w2t"], ["w2"], name="w2/Transpose", perm=[1, 0]),
             helper.make_node("Gemm", ["r1", "w2"], ["z2"], name="gemm2", alpha=0.5),
             helper.make_node("Sigmoid", ["z2"], ["y"], name="sigmoid")]
    save(outdir, "fuse_gemm", nodes, [("x", [n, d])], [n, 6], inits)


def ewise_chain(outdir):
    """LayerNormalization written out (opset < 17 exporters), then BERT's
    GELU in its erf form and a Sub of a same-shape input: the chains
    Add(eps)+Sqrt on the row statistics, and Div(x - mean, sd) + Mul(gamma)
    + Add(beta) + Div/Erf/Add/Mul/Mul + Sub(c) as one loop each; x - mean,
    read by Pow and Div, stays a value of its own."""
    n, s, d = 3, 4, 10
    inits = [arr("two", 2.0), arr("eps", 1e-5), arr("gamma", rng.uniform(0.5, 1.5, d)),
             arr("beta", rng.standard_normal(d) * 0.1), arr("sqrt2", 1.4142135), arr("one", 1.0),
             arr("half", 0.5)]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["dev"], name="sub"),
             helper.make_node("Pow", ["dev", "two"], ["sq"], name="pow"),
             helper.make_node("ReduceMean", ["sq"], ["var"], name="mean2", axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["dev", "sd"], ["nrm"], name="div"),
             helper.make_node("Mul", ["nrm", "gamma"], ["sc"], name="scale"),
             helper.make_node("Add", ["sc", "beta"], ["ln"], name="shift"),
             helper.make_node("Div", ["ln", "sqrt2"], ["gd"], name="gelu/Div"),
             helper.make_node("Erf", ["gd"], ["ge"], name="gelu/Erf"),
             helper.make_node("Add", ["ge", "one"], ["ga"], name="gelu/Add"),
             helper.make_node("Mul", ["ln", "ga"], ["gm"], name="gelu/Mul"),
             helper.make_node("Mul", ["gm", "half"], ["g"], name="gelu/Mul_1"),
             helper.make_node("Sub", ["g", "c"], ["y"], name="sub_c")]
    save(outdir, "fuse_ewise", nodes, [("x", [n, s, d]), ("c", [n, s, d])], [n, s, d], inits)


def views(outdir):
    """Operands that are views, as GPT-2's exporter writes attention: a
    fused Q/K/V projection (MatMul, Add bias, Split), which ir/unfuse.c
    turns into MatMuls on column Slices of the weight and bias; the heads
    split by Reshape and Transpose ([0, 2, 1, 3] for Q and V, [0, 2, 3, 1]
    for K, read in place by the MatMuls through strides) and merged again;
    a tied LM head reading the transpose of the table the first MatMul
    reads."""
    n, s, d, heads, vocab = 2, 6, 16, 2, 20
    hd = d // heads
    # Small values: the partitioned programs sum the contraction in another
    # order, and the rounding must stay within the tests' absolute tolerance.
    inits = [arr("wte", rng.standard_normal((vocab, d)) * 0.1),
             arr("w_qkv", rng.standard_normal((d, 3 * d)) / np.sqrt(d)),
             arr("b_qkv", rng.standard_normal(3 * d) * 0.1), arr("scale", np.sqrt(hd)),
             numpy_helper.from_array(np.array([d, d, d], dtype=np.int64), "split"),
             numpy_helper.from_array(np.array([n, s, heads, hd], dtype=np.int64), "heads"),
             numpy_helper.from_array(np.array([n, s, d], dtype=np.int64), "merged")]
    nodes = [helper.make_node("MatMul", ["x", "wte"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "w_qkv"], ["qkv0"], name="attn/c_attn/MatMul"),
             helper.make_node("Add", ["qkv0", "b_qkv"], ["qkv"], name="attn/c_attn/Add"),
             helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], name="attn/c_attn/Split",
                              axis=2)]
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [p, "heads"], [f"{p}4"], name=f"attn/{p}/Reshape"),
                  helper.make_node("Transpose", [f"{p}4"], [f"{p}h"], name=f"attn/{p}/Transpose",
                                   perm=perm)]
    nodes += [helper.make_node("MatMul", ["qh", "kh"], ["sc"], name="attn/MatMul"),
              helper.make_node("Div", ["sc", "scale"], ["sd"], name="attn/Div"),
              helper.make_node("MatMul", ["sd", "vh"], ["a4"], name="attn/MatMul_1"),
              helper.make_node("Transpose", ["a4"], ["am"], name="attn/merge/Transpose",
                               perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["am", "merged"], ["a"], name="attn/merge/Reshape"),
              helper.make_node("Add", ["a", "h"], ["r"], name="residual"),
              helper.make_node("Transpose", ["wte"], ["wte_t"], name="lm_head/Transpose", perm=[1, 0]),
              helper.make_node("MatMul", ["r", "wte_t"], ["y"], name="lm_head/MatMul")]
    save(outdir, "fuse_views", nodes, [("x", [n, s, vocab])], [n, s, vocab], inits)

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    residual_block(out)
    fed_weights(out)
    not_fused(out)
    bn_only(out)
    mlp_gelu(out)
    gemm_act(out)
    ewise_chain(out)
    views(out)
