"""Models that put the activation, math and logic operators between layers,
for the differential sweep (tests/test_differential.c): the one-device
program is checked against ONNX Runtime, then every strategy on every
array against it. Weights are initializers (so layers are planned and
partitioned), the input a seeded random tensor.

Usage: op_models.py OUTDIR   (writes OUTDIR/NAME.onnx and OUTDIR/NAME_data/input_0.pb)
Run with /usr/bin/python3 (Debian's onnx).
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
rng = np.random.default_rng(13)


def init(name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def scalar(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.float32), name)


def save(outdir, name, nodes, x_shape, y_shape, inits, opset=18):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info("y", F, y_shape)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    with open(f"{outdir}/{name}.onnx", "wb") as f:
        f.write(m.SerializeToString())
    os.makedirs(f"{outdir}/{name}_data", exist_ok=True)
    x = rng.standard_normal(x_shape).astype(np.float32)
    with open(f"{outdir}/{name}_data/input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())


def cnn(outdir):
    """Convolutions with every float activation between them, then the
    math functions, comparisons and logic on the feature map, and a Gemm."""
    n = helper.make_node
    inits = [init("w1", [8, 3, 3, 3]), init("b1", [8], 0.1), init("w2", [8, 8, 3, 3]),
             init("w3", [8, 8, 3, 3]), init("w4", [8, 8, 3, 3]), init("w5", [8, 8, 3, 3]),
             init("slope", [8, 1, 1]), init("wf", [512, 10], 0.05),
             scalar("four", 4.0), scalar("three", 3.0), scalar("half", 0.5),
             scalar("lo", 0.3), scalar("hi", 0.7), scalar("tenth", 0.1)]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], **conv),
        n("LeakyRelu", ["c1"], ["a1"], alpha=0.1),
        n("Conv", ["a1", "w2"], ["c2"], **conv),
        n("PRelu", ["c2", "slope"], ["a2"]),
        n("Conv", ["a2", "w3"], ["c3"], **conv),
        n("Elu", ["c3"], ["e1"], alpha=0.5),
        n("Selu", ["e1"], ["e2"]),
        n("Celu", ["e2"], ["a3"], alpha=2.0),
        n("Conv", ["a3", "w4"], ["c4"], **conv),
        n("HardSwish", ["c4"], ["h1"]),
        n("HardSigmoid", ["h1"], ["a4"], alpha=0.3, beta=0.4),
        n("Conv", ["a4", "w5"], ["c5"], **conv),
        n("Softplus", ["c5"], ["s1"]),
        n("Softsign", ["s1"], ["s2"]),
        n("Mish", ["c5"], ["s3"]),
        n("ThresholdedRelu", ["s3"], ["s4"], alpha=0.05),
        n("Add", ["s2", "s4"], ["h"]),
        # math functions of t = 4 h
        n("Sin", ["h"], ["sin"]),
        n("Cos", ["h"], ["cos"]),
        n("Mul", ["h", "four"], ["t"]),
        n("Floor", ["t"], ["fl"]),
        n("Ceil", ["t"], ["ce"]),
        n("Round", ["t"], ["ro"]),
        n("Sub", ["h", "half"], ["hc"]),
        n("Sign", ["hc"], ["sg"]),
        n("Mod", ["t", "three"], ["md"], fmod=1),
        n("Sum", ["fl", "ce", "ro", "sg", "md"], ["ints"]),
        n("Mul", ["ints", "tenth"], ["ints_s"]),
        n("Sum", ["sin", "cos", "ints_s"], ["u"]),
        # comparisons and logic choose between u and -u
        n("GreaterOrEqual", ["h", "lo"], ["ge"]),
        n("LessOrEqual", ["h", "hi"], ["le"]),
        n("And", ["ge", "le"], ["in"]),
        n("Or", ["ge", "le"], ["any"]),
        n("Xor", ["in", "any"], ["x1"]),
        n("IsNaN", ["u"], ["nan"]),
        n("IsInf", ["u"], ["inf"]),
        n("Or", ["nan", "inf"], ["bad"]),
        n("Not", ["bad"], ["good"]),
        n("And", ["good", "x1"], ["flip"]),
        n("Neg", ["u"], ["nu"]),
        n("Where", ["flip", "nu", "u"], ["v"]),
        n("Flatten", ["v"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    save(outdir, "ops_cnn", nodes, [4, 3, 8, 8], [4, 10], inits)


def mlp(outdir):
    """Fully connected layers (split any way by the strategies) with the
    activations between them: a type-II layer's partial sums must be
    resolved before a non-linear operator."""
    n = helper.make_node
    inits = [init("w1", [16, 32]), init("b1", [32], 0.1), init("slope", [32]),
             init("w2", [32, 32]), init("w3", [32, 32]), init("w4", [32, 32]),
             init("w5", [32, 10])]
    nodes = [
        n("Gemm", ["x", "w1", "b1"], ["g1"]),
        n("PRelu", ["g1", "slope"], ["a1"]),
        n("Gemm", ["a1", "w2"], ["g2"]),
        n("HardSigmoid", ["g2"], ["a2"]),
        n("Gemm", ["a2", "w3"], ["g3"]),
        n("Mish", ["g3"], ["a3"]),
        n("Gemm", ["a3", "w4"], ["g4"]),
        n("Softplus", ["g4"], ["a4"]),
        n("Gemm", ["a4", "w5"], ["y"]),
    ]
    save(outdir, "ops_mlp", nodes, [8, 16], [8, 10], inits)


def ints(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def pad(outdir):
    """Pad in every mode between convolutions: reflect on the spatial axes
    given by 'axes' (opset 18), edge with a pad of the channels, constant
    with a value and a negative (cropping) pad, wrap (opset 19)."""
    n = helper.make_node
    inits = [init("w1", [6, 3, 3, 3]), init("w2", [6, 6, 3, 3]), init("w3", [6, 8, 3, 3]),
             init("wf", [6 * 8 * 7, 10], 0.05),
             ints("p_reflect", [2, 1, 1, 2]), ints("hw", [2, 3]),
             ints("p_edge", [0, 1, 1, 0, 0, 1, 0, 0]),
             ints("p_const", [0, 0, -1, 1, 0, 0, 2, -2]), scalar("value", 0.5),
             ints("p_wrap", [0, 0, 1, 2, 0, 0, 2, 1])]
    nodes = [
        n("Conv", ["x", "w1"], ["c1"]),                          # [2, 6, 8, 8]
        n("Pad", ["c1", "p_reflect", "", "hw"], ["r"], mode="reflect"),  # [2, 6, 11, 11]
        n("Conv", ["r", "w2"], ["c2"]),                          # [2, 6, 9, 9]
        n("Pad", ["c2", "p_edge"], ["e"], mode="edge"),          # [2, 8, 10, 9]
        n("Conv", ["e", "w3"], ["c3"]),                          # [2, 6, 8, 7]
        n("Pad", ["c3", "p_const", "value"], ["k"]),             # [2, 6, 9, 6]
        n("Pad", ["k", "p_wrap"], ["w"], mode="wrap"),           # [2, 6, 12, 9]
        n("Slice", ["w", "s0", "s1", "s2"], ["ws"]),             # [2, 6, 8, 7]
        n("Flatten", ["ws"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    inits += [ints("s0", [1, 1]), ints("s1", [9, 8]), ints("s2", [2, 3])]
    g = helper.make_graph(nodes, "ops_pad", [helper.make_tensor_value_info("x", F, [2, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", F, [2, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    with open(f"{outdir}/ops_pad.onnx", "wb") as f:
        f.write(m.SerializeToString())
    os.makedirs(f"{outdir}/ops_pad_data", exist_ok=True)
    x = rng.standard_normal([2, 3, 10, 10]).astype(np.float32)
    with open(f"{outdir}/ops_pad_data/input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())


def depth_space(outdir):
    """SpaceToDepth, DepthToSpace (both modes) and Tile between
    convolutions: the batch axis stays split, Tile's unrepeated axes too."""
    n = helper.make_node
    inits = [init("w1", [4, 3, 3, 3]), init("w2", [8, 16, 1, 1]), init("w3", [6, 2, 3, 3]),
             init("w4", [6, 6, 1, 1]), init("wf", [6 * 10 * 5, 10], 0.05),
             ints("reps", [1, 2, 1, 1]), ints("reps2", [1, 1, 2, 1])]
    nodes = [
        n("Conv", ["x", "w1"], ["c1"]),                                  # [4, 4, 6, 6]
        n("SpaceToDepth", ["c1"], ["s"], blocksize=2),                   # [4, 16, 3, 3]
        n("Conv", ["s", "w2"], ["c2"]),                                  # [4, 8, 3, 3]
        n("DepthToSpace", ["c2"], ["d1"], blocksize=2, mode="DCR"),      # [4, 2, 6, 6]
        n("Tile", ["d1", "reps"], ["t1"]),                               # [4, 4, 6, 6]
        n("DepthToSpace", ["t1"], ["d2"], blocksize=2, mode="CRD"),      # [4, 1, 12, 12]
        n("Tile", ["d2", "reps"], ["t2"]),                               # [4, 2, 12, 12]
        n("Conv", ["t2", "w3"], ["c3"]),                                 # [4, 6, 10, 10]
        n("Conv", ["c3", "w4"], ["c4"], strides=[2, 2]),                 # [4, 6, 5, 5]
        n("Tile", ["c4", "reps2"], ["t3"]),                              # [4, 6, 10, 5]
        n("Flatten", ["t3"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    save(outdir, "ops_depth_space", nodes, [4, 3, 8, 8], [4, 10], inits)


def resize(outdir):
    """Resize between convolutions as exporters write it: nearest upsampling
    (asymmetric, floor: paddle2onnx and TensorFlow), linear by sizes
    (half_pixel), linear on one axis (align_corners, at an integral resized
    length: for 5 x 1.5 ONNX's reference, which the node tests follow, maps
    through 7.5 and ONNX Runtime through 7), cubic (pytorch_half_pixel, as
    torch.onnx.export writes a bicubic interpolate), linear tf_crop_and_resize
    (a region reaching outside the map: extrapolated)."""
    n = helper.make_node
    inits = [init("w1", [4, 3, 3, 3]), init("w2", [4, 4, 3, 3]), init("w3", [4, 4, 3, 3]),
             init("wf", [4 * 12 * 8, 10], 0.05),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s1"),
             ints("z2", [4, 4, 9, 7]),
             numpy_helper.from_array(np.array([1, 1, 2, 1], np.float32), "s3"),
             numpy_helper.from_array(np.array([1, 1, 1, 1.5], np.float32), "s4"),
             numpy_helper.from_array(np.array([0, 0, 0.1, -0.2, 1, 1, 0.9, 1.1], np.float32),
                                     "roi"),
             ints("z5", [4, 4, 12, 8])]
    nodes = [
        n("Conv", ["x", "w1"], ["c1"]),                                   # [4, 4, 6, 6]
        n("Resize", ["c1", "", "s1"], ["r1"], mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),  # [4, 4, 12, 12]
        n("Conv", ["r1", "w2"], ["c2"]),                                  # [4, 4, 10, 10]
        n("Resize", ["c2", "", "", "z2"], ["r2"], mode="linear"),         # [4, 4, 9, 7]
        n("Conv", ["r2", "w3"], ["c3"]),                                  # [4, 4, 7, 5]
        n("Resize", ["c3", "", "s3"], ["r3"], mode="linear",
          coordinate_transformation_mode="align_corners"),                # [4, 4, 14, 5]
        n("Resize", ["r3", "", "s4"], ["r4"], mode="cubic",
          coordinate_transformation_mode="pytorch_half_pixel"),           # [4, 4, 14, 7]
        n("Resize", ["r4", "roi", "", "z5"], ["r5"], mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize",
          extrapolation_value=0.5),                                       # [4, 4, 12, 8]
        n("Flatten", ["r5"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    g = helper.make_graph(nodes, "ops_resize", [helper.make_tensor_value_info("x", F, [4, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [4, 10])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with open(f"{outdir}/ops_resize.onnx", "wb") as f:
        f.write(m.SerializeToString())
    os.makedirs(f"{outdir}/ops_resize_data", exist_ok=True)
    x = rng.standard_normal([4, 3, 8, 8]).astype(np.float32)
    with open(f"{outdir}/ops_resize_data/input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())


def reduce(outdir):
    """The reductions between convolutions, each over axes the layers split
    or not: ReduceL2 over the channels (a normalization), ReduceLogSumExp
    over the width, ReduceMin, ReduceProd, ReduceSumSquare and ReduceL1
    over space, and ArgMax/ArgMin of the input's channels (exact data: no
    near-ties for rounding to flip) added as features."""
    n = helper.make_node
    inits = [init("w1", [8, 3, 3, 3]), init("w2", [8, 8, 3, 3]), init("w3", [8, 8, 3, 3]),
             init("wf", [64, 10], 0.05), init("wg", [8, 10], 0.05),
             scalar("eps", 1e-3), scalar("tenth", 0.1), scalar("one", 1.0),
             ints("c", [1]), ints("w", [3]), ints("hw", [2, 3]), ints("last", [-1]),
             ints("h", [-2])]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], **conv),                          # [4, 8, 8, 8]
        n("ReduceL2", ["c1", "c"], ["n1"]),                              # [4, 1, 8, 8]
        n("Add", ["n1", "eps"], ["n2"]),
        n("Div", ["c1", "n2"], ["d1"]),
        n("Conv", ["d1", "w2"], ["c2"], **conv),
        n("ReduceLogSumExp", ["c2", "w"], ["l2"]),                       # [4, 8, 8, 1]
        n("Sub", ["c2", "l2"], ["s2"]),
        n("ArgMax", ["x"], ["am"], axis=1),                              # [4, 1, 8, 8]
        n("ArgMin", ["x"], ["an"], axis=-3, select_last_index=1),       # [4, 1, 8, 8]
        n("Cast", ["am"], ["amf"], to=F),
        n("Cast", ["an"], ["anf"], to=F),
        n("Mul", ["amf", "tenth"], ["am1"]),
        n("Add", ["s2", "am1"], ["s3"]),
        n("Add", ["s3", "anf"], ["s4"]),
        n("Conv", ["s4", "w3"], ["c3"], **conv),                         # [4, 8, 8, 8]
        n("ReduceMin", ["c3", "last"], ["mn"], keepdims=0),              # [4, 8, 8]
        n("Sigmoid", ["c3"], ["sg"]),
        n("ReduceProd", ["sg", "h"], ["pr"], keepdims=0),                # [4, 8, 8]
        n("Add", ["mn", "pr"], ["mp"]),
        n("Flatten", ["mp"], ["f1"], axis=1),                            # [4, 64]
        n("ReduceSumSquare", ["c3", "hw"], ["ss"], keepdims=0),          # [4, 8]
        n("ReduceL1", ["c3", "hw"], ["l1"], keepdims=0),
        n("Add", ["l1", "one"], ["l1p"]),
        n("Div", ["ss", "l1p"], ["r"]),
        n("Gemm", ["f1", "wf"], ["g1"]),
        n("Gemm", ["r", "wg"], ["g2"]),
        n("Add", ["g1", "g2"], ["y"]),
    ]
    save(outdir, "ops_reduce", nodes, [4, 3, 8, 8], [4, 10], inits)


def scan_select(outdir):
    """CumSum (forward over the width, exclusive and reversed over the
    height), Trilu (upper and lower, k constant), TopK over the channels
    (its values: near-ties only swap near-equal values) and OneHot of the
    input's ArgMax (exact data) between convolutions."""
    n = helper.make_node
    inits = [init("w1", [8, 3, 3, 3]), init("w2", [8, 8, 3, 3]), init("w3", [8, 8, 3, 3]),
             init("w4", [8, 3, 3, 3]), init("wf", [512, 10], 0.05),
             scalar("tenth", 0.1), ints("w", 3), ints("h", -2), ints("k1", 1),
             ints("km1", -1), ints("three", [3]), ints("depth", 3),
             numpy_helper.from_array(np.array([0.0, 1.0], dtype=np.float32), "onoff")]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], **conv),                          # [4, 8, 8, 8]
        n("CumSum", ["c1", "w"], ["s1"]),
        n("CumSum", ["s1", "h"], ["s2"], exclusive=1, reverse=1),
        n("Mul", ["s2", "tenth"], ["s3"]),
        n("Conv", ["s3", "w2"], ["c2"], **conv),
        n("Trilu", ["c2", "k1"], ["t1"]),
        n("Trilu", ["c2", "km1"], ["t2"], upper=0),
        n("Add", ["t1", "t2"], ["t3"]),
        n("Conv", ["t3", "w3"], ["c3"], **conv),
        n("TopK", ["c3", "three"], ["v", "vi"], axis=1),                 # [4, 3, 8, 8]
        n("ArgMax", ["x"], ["am"], axis=1, keepdims=0),                  # [4, 8, 8]
        n("OneHot", ["am", "depth", "onoff"], ["oh"], axis=1),           # [4, 3, 8, 8]
        n("Add", ["v", "oh"], ["a"]),
        n("Conv", ["a", "w4"], ["c4"], **conv),                          # [4, 8, 8, 8]
        n("Flatten", ["c4"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    save(outdir, "ops_scan_select", nodes, [4, 3, 8, 8], [4, 10], inits)


def gather_scatter(outdir):
    """GatherElements, ScatterElements (reduction add), GatherND (batch_dims
    1) and ScatterND (reduction mul) between convolutions, with negative and
    int32 indices: the batch axis stays split through the first three, the
    others are gathered where indices address them."""
    n = helper.make_node
    r = np.random.default_rng(7)
    ie = r.integers(-6, 6, [4, 4, 3, 6]).astype(np.int32)
    se = r.integers(-3, 3, [4, 6, 1, 6])
    gn = np.array([[[1], [-2]], [[0], [5]], [[3], [3]], [[-1], [2]]], np.int64)
    inits = [init("w1", [4, 3, 3, 3]), init("w2", [6, 4, 1, 1]), init("w3", [4, 2, 1, 1]),
             init("wf", [4 * 3 * 6, 10], 0.05), numpy_helper.from_array(ie, "ie"),
             numpy_helper.from_array(se, "se"), numpy_helper.from_array(gn, "gn"),
             ints("ax2", [2]), ints("sn", [[0, 1], [3, -1]]), ints("gk", [[1, 2], [2, 3]])]
    nodes = [
        n("Conv", ["x", "w1"], ["c1"]),                                   # [4, 4, 6, 6]
        n("GatherElements", ["c1", "ie"], ["g1"], axis=2),                # [4, 4, 3, 6]
        n("Conv", ["g1", "w2"], ["c2"]),                                  # [4, 6, 3, 6]
        n("ReduceMax", ["c2", "ax2"], ["m2"]),                            # [4, 6, 1, 6]
        n("ScatterElements", ["c2", "se", "m2"], ["s1"], axis=-2, reduction="add"),
        n("GatherND", ["s1", "gn"], ["g2"], batch_dims=1),                # [4, 2, 3, 6]
        n("Conv", ["g2", "w3"], ["c3"]),                                  # [4, 4, 3, 6]
        n("GatherND", ["c3", "gk"], ["u"]),                               # [2, 3, 6]
        n("ScatterND", ["c3", "sn", "u"], ["s2"], reduction="mul"),       # [4, 4, 3, 6]
        n("Flatten", ["s2"], ["f"]),
        n("Gemm", ["f", "wf"], ["y"]),
    ]
    save(outdir, "ops_gather_scatter", nodes, [4, 3, 8, 8], [4, 10], inits)


def norms(outdir):
    """InstanceNormalization (its scale and bias follow a channel split),
    GroupNormalization (opset 18: per-group scale and bias), MeanVariance-
    Normalization over [0, 2, 3] (the batch gathered) and LpNormalization
    (p 2 over channels, p 1 over features) between layers."""
    n = helper.make_node
    inits = [init("w1", [8, 3, 3, 3]), init("s1", [8]), init("b1", [8], 0.1),
             init("w2", [8, 8, 3, 3]), init("s2", [4]), init("b2", [4], 0.1),
             init("w3", [6, 8, 1, 1]), init("w4", [6, 6, 3, 3]), init("wf", [24, 10], 0.3)]
    nodes = [
        n("Conv", ["x", "w1"], ["c1"]),                                   # [4, 8, 6, 6]
        n("InstanceNormalization", ["c1", "s1", "b1"], ["i1"], epsilon=1e-3),
        n("Relu", ["i1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),               # [4, 8, 6, 6]
        n("GroupNormalization", ["c2", "s2", "b2"], ["g1"], num_groups=4),
        n("Conv", ["g1", "w3"], ["c3"]),                                  # [4, 6, 6, 6]
        n("MeanVarianceNormalization", ["c3"], ["m1"]),
        n("Conv", ["m1", "w4"], ["c4"], strides=[2, 2]),                  # [4, 6, 2, 2]
        n("LpNormalization", ["c4"], ["l1"], axis=1),
        n("Flatten", ["l1"], ["f"]),                                      # [4, 24]
        n("LpNormalization", ["f"], ["l2"], p=1),
        n("Gemm", ["l2", "wf"], ["y"]),
    ]
    save(outdir, "ops_norm", nodes, [4, 3, 8, 8], [4, 10], inits)


def einsum(outdir):
    """Einsum as exporters write it: projections with a weight
    ("bid,jd->bij", "bij,jk->bik", implicit "ij,jk"), attention's two
    products ("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"), and GroupNormalization
    in its opset-21 form (scale and bias per channel) between them."""
    n = helper.make_node
    inits = [init("wq", [12, 8]), init("wk", [12, 8]), init("wo", [12, 10]),
             init("wf", [10, 5]), init("gs", [6]), init("gb", [6], 0.1),
             ints("heads", [4, 6, 3, 4]), ints("merged", [4, 6, 12]), ints("rows", [24, 10]),
             ints("flat", [4, 30])]
    nodes = [
        n("Einsum", ["x", "wq"], ["q"], equation="bid,jd->bij"),         # [4, 6, 12]
        n("Einsum", ["x", "wk"], ["k"], equation="bid,jd->bij"),
        n("Reshape", ["q", "heads"], ["qh"]),
        n("Transpose", ["qh"], ["q4"], perm=[0, 2, 1, 3]),                # [4, 3, 6, 4]
        n("Reshape", ["k", "heads"], ["kh"]),
        n("Transpose", ["kh"], ["k4"], perm=[0, 2, 1, 3]),
        n("Einsum", ["q4", "k4"], ["s"], equation="bhqd, bhkd -> bhqk"),  # [4, 3, 6, 6]
        n("Softmax", ["s"], ["p"]),
        n("Einsum", ["p", "k4"], ["a"], equation="bhqk,bhkd->bhqd"),      # [4, 3, 6, 4]
        n("Transpose", ["a"], ["at"], perm=[0, 2, 1, 3]),
        n("Reshape", ["at", "merged"], ["am"]),                           # [4, 6, 12]
        n("GroupNormalization", ["am", "gs", "gb"], ["g"], num_groups=3),
        n("Einsum", ["g", "wo"], ["o"], equation="bij,jk->bik"),          # [4, 6, 10]
        n("Reshape", ["o", "rows"], ["o2"]),
        n("Einsum", ["o2", "wf"], ["f"], equation="ij,jk"),               # [24, 5]
        n("Reshape", ["f", "flat"], ["y"]),
    ]
    save(outdir, "ops_einsum", nodes, [4, 6, 8], [4, 30], inits, opset=21)


def recurrent(outdir):
    """An LSTM and a bidirectional GRU between layers, as PyTorch exports
    them (layout 0, biases, GRU's linear_before_reset 1): the sequences Y,
    the final states Y_h and Y_c all used; the batch of 4 splittable, the
    GRU's sequences of different lengths. An If
    on a shape-derived condition (as exporters write) picks the LSTM's
    input, and a Loop of 2 iterations applies a layer reading an outer
    weight to the GRU's final states."""
    n = helper.make_node
    inits = [init("w0", [6, 8]), init("lw", [1, 32, 8]), init("lr", [1, 32, 8]),
             init("lb", [1, 64], 0.1), init("gw", [2, 18, 8]), init("gr", [2, 18, 6]),
             init("gb", [2, 36], 0.1), init("w1", [12, 3]), init("w2", [12, 3]),
             init("w3", [8, 3]), ints("ax1", [1]), ints("perm_shape", [4, 12]),
             ints("seq_shape", [5, 4, 12]), ints("c_shape", [4, 8]), init("wl", [12, 12]),
             ints("zero", 0), ints("five", 5), ints("trips", 2),
             numpy_helper.from_array(np.array([5, 3, 4, 5], dtype=np.int32), "lens")]
    then_branch = helper.make_graph(
        [n("Relu", ["p"], ["then_out"])], "then", [],
        [helper.make_tensor_value_info("then_out", F, None)])
    else_branch = helper.make_graph(
        [n("Neg", ["p"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", F, None)])
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"]),
         n("MatMul", ["h_in", "wl"], ["hm"]),
         n("Tanh", ["hm"], ["h_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, None)])
    nodes = [
        n("MatMul", ["x", "w0"], ["p"]),
        n("Shape", ["p"], ["ps"]),
        n("Gather", ["ps", "zero"], ["t"]),
        n("Equal", ["t", "five"], ["is5"]),
        n("If", ["is5"], ["pi"], then_branch=then_branch, else_branch=else_branch),
        n("LSTM", ["pi", "lw", "lr", "lb"], ["ly", "", "lc"], hidden_size=8),
        n("Squeeze", ["ly", "ax1"], ["ls"]),
        n("Relu", ["ls"], ["la"]),
        n("GRU", ["la", "gw", "gr", "gb", "lens"], ["gy", "gh"], hidden_size=6,
          direction="bidirectional", linear_before_reset=1),
        n("Transpose", ["gy"], ["gt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["gt", "seq_shape"], ["gs"]),
        n("MatMul", ["gs", "w1"], ["y1"]),
        n("Transpose", ["gh"], ["ht"], perm=[1, 0, 2]),
        n("Reshape", ["ht", "perm_shape"], ["hs"]),
        n("Loop", ["trips", "", "hs"], ["hl"], body=body),
        n("MatMul", ["hl", "w2"], ["y2"]),
        n("Reshape", ["lc", "c_shape"], ["cs"]),
        n("MatMul", ["cs", "w3"], ["y3"]),
        n("Add", ["y1", "y2"], ["y12"]),
        n("Add", ["y12", "y3"], ["y"]),
    ]
    save(outdir, "ops_recurrent", nodes, [5, 4, 6], [5, 4, 3], inits)


def main():
    outdir = sys.argv[1]
    cnn(outdir)
    mlp(outdir)
    pad(outdir)
    depth_space(outdir)
    resize(outdir)
    reduce(outdir)
    scan_select(outdir)


    gather_scatter(outdir)
    norms(outdir)
    einsum(outdir)
    recurrent(outdir)


if __name__ == "__main__":
    main()
