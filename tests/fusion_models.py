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
    with open(f"{outdir}/{name}.onnx", "wb") as f:
        f.write(m.SerializeToString())
    os.makedirs(f"{outdir}/{name}_data", exist_ok=True)
    for i, (n, s) in enumerate(inputs):
        with open(f"{outdir}/{name}_data/input_{i}.pb", "wb") as f:
            f.write(arr(n, rng.standard_normal(s)).SerializeToString())


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
    """What fusion must leave alone: a convolution output read twice, and a
    BatchNormalization whose statistics another node reads too."""
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


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    residual_block(out)
    fed_weights(out)
    not_fused(out)
    bn_only(out)
