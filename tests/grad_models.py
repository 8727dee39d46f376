"""Tiny ONNX graphs for the gradient checks of tests/test_grad.c.

Usage: grad_models.py OUTDIR CASE...   (writes OUTDIR/CASE.onnx)
       grad_models.py --list

Every differentiable operand is a graph input (not an initializer), so the
test can perturb it through input files; only values without a gradient
(BatchNormalization's statistics, shapes, split sizes, slice parameters)
are initializers. Cases whose name ends in _f32 are float32 (the project's
GEMM and convolution kernels); the others are float64, so that central
differences are accurate to ~1e-9. Run with /usr/bin/python3 (Debian's onnx).
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from model_files import write_whole

D, F, I64 = TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, output, inits=(), opset=17):
    """inputs: [(name, dtype, shape)]; output: (name, dtype)."""
    g = helper.make_graph(
        nodes, "grad",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(output[0], output[1], None)],
        initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def unary(op, t=D, opset=17, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", t, [3, 4])], ("y", t),
                 opset=opset)


def binary(op, sa, sb):
    return model([helper.make_node(op, ["a", "b"], ["y"])], [("a", D, sa), ("b", D, sb)],
                 ("y", D))


def conv(t, xs, ws, bias, **attrs):
    ins = [("x", t, xs), ("w", t, ws)] + ([("b", t, [ws[0]])] if bias else [])
    return model([helper.make_node("Conv", [n for n, _, _ in ins], ["y"], **attrs)], ins, ("y", t))


def gemm(t, sa, sb, sc, **attrs):
    ins = [("a", t, sa), ("b", t, sb)] + ([("c", t, sc)] if sc else [])
    return model([helper.make_node("Gemm", [n for n, _, _ in ins], ["y"], **attrs)], ins, ("y", t))


def pool(op, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", D, [2, 2, 5, 5])], ("y", D))


def batch_norm():
    c = 3
    inits = [numpy_helper.from_array(np.array([0.1, -0.2, 0.3]), "mean"),
             numpy_helper.from_array(np.array([0.5, 1.5, 0.8]), "var")]
    n = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], epsilon=1e-3)
    return model([n], [("x", D, [2, c, 2, 2]), ("s", D, [c]), ("b", D, [c])], ("y", D), inits)


def layer_norm(axis, ss):
    n = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis, epsilon=1e-3)
    return model([n], [("x", D, [2, 3, 4]), ("s", D, ss), ("b", D, ss)], ("y", D))


def softmax(op, axis, opset=17):
    return model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", D, [2, 3, 4])], ("y", D),
                 opset=opset)


def split():
    n1 = helper.make_node("Split", ["x", "sizes"], ["s0", "s1", "s2"], axis=1)
    n2 = helper.make_node("Concat", ["s2", "s0"], ["y"], axis=1)
    return model([n1, n2], [("x", D, [2, 6])], ("y", D), [const("sizes", [2, 1, 3])])


def slice_():
    n = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = [const("starts", [1, -1]), const("ends", [4, -9]), const("axes", [0, 1]),
             const("steps", [2, -2])]
    return model([n], [("x", D, [4, 5])], ("y", D), inits)


def shortcut():
    """A residual block: x reaches the output through a convolution and
    directly, so its gradient accumulates."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    return model(nodes, [("x", D, [1, 2, 4, 4]), ("w", D, [2, 2, 3, 3])], ("y", D))


def conv_add_sigmoid():
    """Conv -> Add -> Sigmoid in float32, which a training program computes
    in one kernel (codegen/fuse.c) storing only the Sigmoid's output."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["h", "r"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["y"])]
    return model(nodes, [("x", F, [1, 2, 4, 4]), ("w", F, [3, 2, 3, 3]), ("b", F, [3]),
                         ("r", F, [1, 3, 4, 4])], ("y", F))


def branches():
    """An Inception-style block: x feeds three branches joined by Concat."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["b0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b0"], ["b"]),
             helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[1, 1]),
             helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)]
    return model(nodes, [("x", D, [1, 2, 4, 4]), ("w1", D, [3, 2, 1, 1]),
                         ("w2", D, [2, 2, 3, 3])], ("y", D))


def branches_f32():
    """The float32 kernels with accumulating gradients: x feeds two
    convolutions (apk_conv2d_backward_data adds through the workspace) and a
    pool; linear in every operand, as the float32 checks need."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)]
    return model(nodes, [("x", F, [2, 2, 4, 4]), ("w1", F, [3, 2, 1, 1]),
                         ("w2", F, [2, 2, 3, 3])], ("y", F))


def shared_gemm_f32():
    """h feeds a Gemm and an Add: the Gemm's input gradient accumulates
    (apk_sgemm with beta 1)."""
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]),
             helper.make_node("Gemm", ["h", "w2"], ["g"], transB=1),
             helper.make_node("Add", ["g", "h"], ["y"])]
    return model(nodes, [("x", F, [3, 4]), ("w1", F, [4, 5]), ("w2", F, [5, 5])], ("y", F))


def exp_sqrt_log_neg():
    """y = -(log(sqrt(exp(x))) * exp(x)) = -x e^x / 2."""
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Sqrt", ["e"], ["s"]),
             helper.make_node("Log", ["s"], ["l"]),
             helper.make_node("Mul", ["l", "e"], ["m"]),
             helper.make_node("Neg", ["m"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D))


def reshaping():
    """Unsqueeze, Dropout (the identity), Expand and Squeeze."""
    nodes = [helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
             helper.make_node("Dropout", ["u"], ["d"]),
             helper.make_node("Expand", ["d", "shape"], ["e"]),
             helper.make_node("Squeeze", ["e", "ax1"], ["y"])]
    inits = [const("ax0", [0]), const("shape", [2, 1, 3, 4]), const("ax1", [1])]
    return model(nodes, [("x", D, [3, 4])], ("y", D), inits)


def div():
    nodes = [helper.make_node("Exp", ["c"], ["b"]),
             helper.make_node("Div", ["a", "b"], ["y"])]
    return model(nodes, [("a", D, [2, 3, 4]), ("c", D, [3, 1])], ("y", D))


def pow_():
    nodes = [helper.make_node("Exp", ["a"], ["e"]),
             helper.make_node("Pow", ["e", "b"], ["y"])]
    return model(nodes, [("a", D, [3, 4]), ("b", D, [4])], ("y", D))


def erf_abs_reciprocal():
    nodes = [helper.make_node("Erf", ["x"], ["e"]),
             helper.make_node("Abs", ["e"], ["a"]),
             helper.make_node("Exp", ["a"], ["p"]),
             helper.make_node("Reciprocal", ["p"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D))


def four():
    """A Constant node (not an initializer, which would be a weight)."""
    return helper.make_node("Constant", [], ["four"],
                            value=numpy_helper.from_array(np.array(4.0), "four"))


def leaky_relu_prelu():
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.2),
             helper.make_node("PRelu", ["a", "s"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4]), ("s", D, [3, 1])], ("y", D))


def elu_selu_celu():
    nodes = [helper.make_node("Elu", ["x"], ["a"], alpha=0.7),
             helper.make_node("Selu", ["x"], ["b"]),
             helper.make_node("Celu", ["x"], ["c"], alpha=1.5),
             helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D))


def hard_sigmoid_swish():
    """On 4x, in [-4, 4): both clipped ends and the linear part."""
    nodes = [four(), helper.make_node("Mul", ["x", "four"], ["t"]),
             helper.make_node("HardSigmoid", ["t"], ["a"], alpha=0.5, beta=0.2),
             helper.make_node("HardSwish", ["t"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D), opset=18)


def softplus_softsign_mish():
    nodes = [four(), helper.make_node("Mul", ["x", "four"], ["t"]),
             helper.make_node("Softplus", ["t"], ["a"]),
             helper.make_node("Softsign", ["t"], ["b"]),
             helper.make_node("Mish", ["t"], ["c"]),
             helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D), opset=18)


def thresholded_relu_sin_cos():
    nodes = [helper.make_node("ThresholdedRelu", ["x"], ["a"], alpha=0.3),
             helper.make_node("Sin", ["x"], ["b"]),
             helper.make_node("Cos", ["x"], ["c"]),
             helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D))


def pads():
    """Pad in every mode (opset 19), pads as inputs, a cropping pad, the
    reflections and wraps longer than nothing: repeated elements sum."""
    nodes = [helper.make_node("Pad", ["x", "p1"], ["a"], mode="reflect"),
             helper.make_node("Pad", ["a", "p2"], ["b"], mode="edge"),
             helper.make_node("Pad", ["b", "p3", "v"], ["c"]),
             helper.make_node("Pad", ["c", "p4", "", "ax"], ["y"], mode="wrap")]
    inits = [const("p1", [1, 2, 1, 1]), const("p2", [0, 2, 1, 0]),
             const("p3", [-1, 1, 1, 0]), const("ax", [1]), const("p4", [3, 2]),
             numpy_helper.from_array(np.array(0.25), "v")]
    return model(nodes, [("x", D, [3, 4])], ("y", D), inits, opset=19)


def pad_attributes():
    """Pad before opset 11: pads and the value as attributes."""
    n = helper.make_node("Pad", ["x"], ["y"], mode="constant", pads=[1, 0, 0, 2], value=0.5)
    return model([n], [("x", D, [3, 4])], ("y", D), opset=10)


def tile_depth_space():
    """Tile (copies of an element sum), DepthToSpace in both modes and
    SpaceToDepth."""
    nodes = [helper.make_node("Tile", ["x", "reps"], ["t"]),
             helper.make_node("DepthToSpace", ["t"], ["d"], blocksize=2, mode="CRD"),
             helper.make_node("SpaceToDepth", ["d"], ["s"], blocksize=2),
             helper.make_node("DepthToSpace", ["s"], ["y"], blocksize=2, mode="DCR")]
    return model(nodes, [("x", D, [1, 4, 2, 3])], ("y", D), [const("reps", [2, 2, 1, 2])])


def resizes():
    """Resize nearest (asymmetric, floor), linear (half_pixel, then
    align_corners down), cubic (exclude_outside, A = -0.5) and
    tf_crop_and_resize (a region partly outside: those outputs are the
    extrapolation value, their error goes nowhere): repeated reads add,
    linear and cubic weights split."""
    nodes = [helper.make_node("Resize", ["x", "", "s1"], ["a"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["a", "", "", "z2"], ["b"], mode="linear"),
             helper.make_node("Resize", ["b", "", "s3"], ["c"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Resize", ["c", "", "s4"], ["e"], mode="cubic",
                              exclude_outside=1, cubic_coeff_a=-0.5),
             helper.make_node("Resize", ["e", "roi", "", "z5"], ["y"], mode="linear",
                              coordinate_transformation_mode="tf_crop_and_resize",
                              extrapolation_value=2.0)]
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "s1"),
             const("z2", [1, 2, 5, 7]),
             numpy_helper.from_array(np.array([1, 1, 0.6, 1], np.float32), "s3"),
             numpy_helper.from_array(np.array([1, 1, 1.5, 0.8], np.float32), "s4"),
             numpy_helper.from_array(np.array([0, 0, 0.2, -0.3, 1, 1, 0.9, 0.8], np.float32),
                                     "roi"),
             const("z5", [1, 2, 4, 5])]
    return model(nodes, [("x", D, [1, 2, 3, 4])], ("y", D), inits, opset=13)


def gather_scatter():
    """GatherElements (a repeated index sums), ScatterElements (reduction
    none: the replaced elements of data get no gradient), ScatterND
    (reduction add, a repeated tuple) and GatherND with batch_dims; negative
    indices in each."""
    n = helper.make_node
    nodes = [n("GatherElements", ["x", "ie"], ["a"], axis=1),
             n("ScatterElements", ["x", "se", "u"], ["s"], axis=0),
             n("ScatterND", ["s", "sn", "v"], ["t"], reduction="add"),
             n("GatherND", ["t", "gn"], ["r"], batch_dims=1),
             n("Flatten", ["a"], ["fa"], axis=0),
             n("Flatten", ["t"], ["ft"], axis=0),
             n("Flatten", ["r"], ["fr"], axis=0),
             n("Concat", ["fa", "ft", "fr"], ["y"], axis=1)]
    inits = [const("ie", [[0, -1], [2, 2], [1, 0]]), const("se", [[1, -1], [0, 0]]),
             const("sn", [[0], [2], [-3]]), const("gn", [[1], [-1], [0]])]
    return model(nodes, [("x", D, [3, 4]), ("u", D, [2, 2]), ("v", D, [3, 4])], ("y", D), inits)


def normalizations():
    """InstanceNormalization and GroupNormalization (opset 18: a scale and
    bias per group) with their scale and bias, MeanVarianceNormalization,
    LpNormalization with p 2 and 1."""
    n = helper.make_node
    nodes = [n("InstanceNormalization", ["x", "s1", "b1"], ["i"], epsilon=0.01),
             n("GroupNormalization", ["i", "s2", "b2"], ["g"], num_groups=2, epsilon=0.1),
             n("MeanVarianceNormalization", ["g"], ["m"], axes=[0, 2, 3]),
             n("LpNormalization", ["m"], ["l"], axis=1),
             n("LpNormalization", ["l"], ["y"], axis=-1, p=1)]
    return model(nodes, [("x", D, [2, 4, 3, 3]), ("s1", D, [4]), ("b1", D, [4]),
                         ("s2", D, [2]), ("b2", D, [2])], ("y", D), opset=18)


def group_norm_per_channel():
    """GroupNormalization from opset 21: a scale and bias per channel."""
    n = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    return model([n], [("x", D, [2, 6, 2, 3]), ("s", D, [6]), ("b", D, [6])], ("y", D),
                 opset=21)


def einsums():
    """Einsum rewritten into MatMul: a projection by a weight, a product
    whose output is reordered, and one whose operand has no column index
    (Unsqueeze, then Squeeze)."""
    n = helper.make_node
    nodes = [n("Einsum", ["x", "w"], ["p"], equation="bid,jd->bij"),
             n("Einsum", ["p", "z"], ["q"], equation="bij,bkj->bki"),
             n("Einsum", ["q", "v"], ["y"], equation="bki,k->bi")]
    return model(nodes, [("x", D, [2, 3, 4]), ("w", D, [5, 4]), ("z", D, [2, 2, 5]),
                         ("v", D, [2])], ("y", D))


def clip():
    n = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    inits = [numpy_helper.from_array(np.array(-0.5), "lo"),
             numpy_helper.from_array(np.array(0.6), "hi")]
    return model([n], [("x", D, [3, 4])], ("y", D), inits)


def sum_max_min():
    nodes = [helper.make_node("Max", ["a", "b", "c"], ["m"]),
             helper.make_node("Min", ["a", "b"], ["n"]),
             helper.make_node("Sum", ["m", "n", "c"], ["y"])]
    return model(nodes, [("a", D, [3, 4]), ("b", D, [4]), ("c", D, [3, 1])], ("y", D))


def where():
    cond = numpy_helper.from_array(np.array([[True, False, True, True],
                                             [False, False, True, False],
                                             [True, True, False, True]]), "cond")
    n = helper.make_node("Where", ["cond", "a", "b"], ["y"])
    return model([n], [("a", D, [3, 4]), ("b", D, [4])], ("y", D), [cond])


def reductions():
    """ReduceSum (axes input), ReduceMean and ReduceMax (axes attributes
    at opset 17), joined by broadcasting."""
    nodes = [helper.make_node("ReduceSum", ["x", "ax1"], ["s"], keepdims=1),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[2], keepdims=1),
             helper.make_node("ReduceMax", ["x"], ["x2"], axes=[0, 2], keepdims=1),
             helper.make_node("Add", ["s", "m"], ["a"]),
             helper.make_node("Mul", ["a", "x2"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4])], ("y", D), [const("ax1", [1])])


def reductions_more():
    """ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSumExp and
    ReduceSumSquare with axes attributes (opset 17: negative, several,
    none, keepdims=0), joined by broadcasting."""
    n = helper.make_node
    nodes = [n("ReduceMin", ["x"], ["mn"], axes=[1]),                    # [2, 1, 4]
             n("ReduceProd", ["x"], ["p"], axes=[-1]),                   # [2, 3, 1]
             n("ReduceL1", ["x"], ["l1"], axes=[0, 2]),                  # [1, 3, 1]
             n("ReduceL2", ["x"], ["l2"]),                               # [1, 1, 1]
             n("ReduceLogSumExp", ["x"], ["lse"], axes=[2]),             # [2, 3, 1]
             n("ReduceSumSquare", ["x"], ["ss"], axes=[0], keepdims=0),  # [3, 4]
             n("Sum", ["mn", "p", "l1", "l2", "lse", "ss"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4])], ("y", D))


def reductions_axes_input():
    """The same reductions at opset 18: axes as a constant input (negative,
    unsorted), and noop_with_empty_axes with no axes (the identity)."""
    n = helper.make_node
    nodes = [n("ReduceMin", ["x", "a1"], ["mn"], keepdims=0),            # [2, 4]
             n("ReduceProd", ["x", "a20"], ["p"]),                       # [1, 3, 1]
             n("ReduceL1", ["x", "a1"], ["l1"]),                         # [2, 1, 4]
             n("ReduceL2", ["x", "a0"], ["l2"], keepdims=0),             # [3, 4]
             n("ReduceLogSumExp", ["x", "none"], ["lse"], noop_with_empty_axes=1),  # [2, 3, 4]
             n("ReduceSumSquare", ["x", "none"], ["ss"]),                # [1, 1, 1]
             n("Unsqueeze", ["mn", "a1"], ["mn1"]),                      # [2, 1, 4]
             n("Sum", ["mn1", "p", "l1", "l2", "lse", "ss"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4])], ("y", D),
                 [const("a1", [-2]), const("a20", [2, 0]), const("a0", [0]),
                  const("none", [], np.int64)],
                 opset=18)


def cumsum_trilu():
    """CumSum in every mode (exclusive, reverse, a negative axis, an int32
    axis) and Trilu, upper and lower, with k from a constant and by
    default."""
    n = helper.make_node
    nodes = [n("CumSum", ["x", "a1"], ["c1"]),
             n("CumSum", ["c1", "am1"], ["c2"], exclusive=1),
             n("CumSum", ["c2", "a0"], ["c3"], reverse=1),
             n("CumSum", ["c3", "a1"], ["c4"], exclusive=1, reverse=1),
             n("Trilu", ["c4", "k"], ["t1"]),
             n("Trilu", ["t1"], ["t2"], upper=0),
             n("Trilu", ["c4", "kneg"], ["t3"], upper=0),
             n("Add", ["t2", "t3"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4])], ("y", D),
                 [const("a1", 1), const("am1", -1, np.int32), const("a0", 0),
                  const("k", 1), const("kneg", -1)])


def top_k_one_hot():
    """TopK's values (largest along the last axis, smallest along a
    negative one) scatter their gradient into the elements their indices
    name; OneHot's values (a fed input) collect the gradients of the
    outputs that took them."""
    n = helper.make_node
    nodes = [n("TopK", ["x", "k2"], ["v1", "i1"]),                       # [2, 3, 2]
             n("TopK", ["x", "k1"], ["v2", "i2"], axis=-3, largest=0),   # [1, 3, 4]
             n("OneHot", ["ix", "depth", "vals"], ["oh"], axis=1),       # [2, 3, 2]
             n("Mul", ["v1", "oh"], ["m"]),
             n("ReduceSum", ["v2", "a2"], ["s"]),                        # [1, 3, 1]
             n("Add", ["m", "s"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 4]), ("vals", D, [2])], ("y", D),
                 [const("k2", [2]), const("k1", [1]), const("a2", [2]),
                  const("ix", [[0, 2], [-1, 5]]), const("depth", 3)])


def flatten():
    n = helper.make_node("Flatten", ["x"], ["y"], axis=2)
    return model([n], [("x", D, [2, 3, 2])], ("y", D))


def reshape():
    n1 = helper.make_node("Reshape", ["x", "shape"], ["r"])
    n2 = helper.make_node("Tanh", ["r"], ["y"])
    return model([n1, n2], [("x", D, [2, 6])], ("y", D), [const("shape", [3, 4])])


def scalar(name, value, dtype=np.float64):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def cast_f32():
    """Float32 through float64 and back, as exporters write mixed precision."""
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=D),
             helper.make_node("Mul", ["d", "d"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=F)]
    return model(nodes, [("x", F, [3, 4])], ("y", F))


def masked_softmax():
    """Attention scores under a causal mask: Where fills the future with the
    lowest float, Softmax over the last axis."""
    mask = numpy_helper.from_array(np.tril(np.ones((4, 4), bool))[None], "mask")
    nodes = [helper.make_node("Where", ["mask", "s", "low"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1)]
    return model(nodes, [("s", D, [2, 4, 4])], ("y", D),
                 [mask, scalar("low", np.finfo(np.float64).min)])


def layer_norm_decomposed():
    """LayerNormalization the way opset < 17 exporters write it."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    return model(nodes, [("x", D, [2, 3, 5]), ("g", D, [5]), ("b", D, [5])], ("y", D),
                 [scalar("two", 2.0), scalar("eps", 1e-5)], opset=13)


def gelu_tanh_exported():
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    nodes = [helper.make_node("Pow", ["x", "three"], ["x3"]),
             helper.make_node("Mul", ["k2", "x3"], ["a"]),
             helper.make_node("Add", ["x", "a"], ["b"]),
             helper.make_node("Mul", ["k", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["t"]),
             helper.make_node("Add", ["one", "t"], ["u"]),
             helper.make_node("Mul", ["x", "u"], ["v"]),
             helper.make_node("Mul", ["half", "v"], ["y"])]
    return model(nodes, [("x", D, [3, 4])], ("y", D),
                 [scalar("three", 3.0), scalar("k2", 0.044715), scalar("k", 0.7978845608028654),
                  scalar("one", 1.0), scalar("half", 0.5)], opset=13)


def attention():
    """One head of scaled dot-product attention with an additive mask from
    int64 token flags (Cast, Sub, Mul), as BERT's exporters write it."""
    flags = numpy_helper.from_array(np.array([[1, 1, 1, 0]], np.int64), "flags")
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Div", ["qk", "scale"], ["s"]),
             helper.make_node("Unsqueeze", ["flags", "ax1"], ["f1"]),
             helper.make_node("Cast", ["f1"], ["ff"], to=D),
             helper.make_node("Sub", ["one", "ff"], ["inv"]),
             helper.make_node("Mul", ["inv", "low"], ["bias"]),
             helper.make_node("Add", ["s", "bias"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return model(nodes, [("q", D, [1, 3, 2]), ("k", D, [1, 4, 2]), ("v", D, [1, 4, 3])],
                 ("y", D),
                 [flags, const("ax1", [1]), scalar("scale", 1.4142135623730951),
                  scalar("one", 1.0), scalar("low", -1e9)], opset=13)


def embedding_tied():
    """A table read as an embedding and, transposed, as the output layer."""
    ids = numpy_helper.from_array(np.array([[3, 1, 3], [0, -1, 2]], np.int64), "ids")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Transpose", ["table"], ["tt"], perm=[1, 0]),
             helper.make_node("MatMul", ["e", "tt"], ["y"])]
    return model(nodes, [("table", D, [4, 3])], ("y", D), [ids], opset=13)


def ce_per_token():
    return model([helper.make_node("Identity", ["x"], ["y"])], [("x", D, [2, 3, 5])], ("y", D))


def sgd_gemm():
    """y = x W^T + b with W and b trainable initializers (float64)."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, (5, 4)), "W"),
             numpy_helper.from_array(rng.uniform(-1, 1, (5,)), "bias")]
    n = helper.make_node("Gemm", ["x", "W", "bias"], ["y"], transB=1)
    return model([n], [("x", D, [3, 4])], ("y", D), inits)


def recurrent(op, inputs, outputs, x_shape, w_shape, r_shape, extra, lens=None, **attrs):
    """One LSTM/GRU/RNN node, every operand fed (float64) but the
    sequence lengths (an initializer): training through the unrolled time
    steps (ir/recurrent.c)."""
    shapes = {"x": x_shape, "W": w_shape, "R": r_shape, **extra}
    node = helper.make_node(op, inputs, outputs, **attrs)
    ins = [(n, D, shapes[n]) for n in inputs if n and n != "lens"]
    inits = [const("lens", lens, np.int32)] if lens else []
    return model([node], ins, (next(o for o in outputs if o), D), inits, opset=14)


CASES = {
    "cast_f32": cast_f32,
    "masked_softmax": masked_softmax,
    "layer_norm_decomposed": layer_norm_decomposed,
    "gelu_tanh_exported": gelu_tanh_exported,
    "attention": attention,
    "embedding_tied": embedding_tied,
    "ce_per_token": ce_per_token,
    "lstm_through_time": lambda: recurrent(
        "LSTM", ["x", "W", "R", "B", "", "h0", "c0", "P"], ["y"], [3, 2, 3], [1, 8, 3],
        [1, 8, 2], {"B": [1, 16], "h0": [1, 2, 2], "c0": [1, 2, 2], "P": [1, 6]},
        hidden_size=2),
    "lstm_bidirectional_batchwise_yc": lambda: recurrent(
        "LSTM", ["x", "W", "R"], ["", "", "yc"], [2, 3, 3], [2, 8, 3], [2, 8, 2], {},
        hidden_size=2, direction="bidirectional", layout=1),
    "gru_bidirectional": lambda: recurrent(
        "GRU", ["x", "W", "R", "B", "lens", "h0"], ["y"], [3, 2, 2], [2, 6, 2], [2, 6, 2],
        {"B": [2, 12], "h0": [2, 2, 2]}, lens=[2, 3], hidden_size=2,
        direction="bidirectional"),
    "gru_linear_before_reset_reverse_yh": lambda: recurrent(
        "GRU", ["x", "W", "R", "B"], ["", "yh"], [2, 3, 2], [1, 9, 2], [1, 9, 3],
        {"B": [1, 18]}, hidden_size=3, direction="reverse", layout=1, linear_before_reset=1),
    "rnn_through_time": lambda: recurrent(
        "RNN", ["x", "W", "R", "B", "", "h0"], ["y"], [3, 2, 2], [1, 3, 2], [1, 3, 3],
        {"B": [1, 6], "h0": [1, 2, 3]}, hidden_size=3),
    "lrn": lambda: model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75,
                                           bias=1.5)],
                         [("x", D, [2, 5, 2, 2])], ("y", D)),
    "lrn_even_size": lambda: model([helper.make_node("LRN", ["x"], ["y"], size=4, alpha=0.3)],
                                   [("x", D, [1, 6, 3])], ("y", D)),
    "gather_repeated_negative": lambda: model(
        [helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)],
        [("x", D, [2, 5, 3])], ("y", D), [const("idx", [[4, -1], [0, 2]])]),
    "conv_transpose": lambda: model(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 1],
                          pads=[1, 0, 0, 1], output_padding=[1, 0], group=2,
                          dilations=[1, 2])],
        [("x", D, [1, 4, 3, 4]), ("w", D, [4, 3, 2, 2]), ("b", D, [6])], ("y", D)),
    "sgd_gemm": sgd_gemm,
    "ce_identity": lambda: model([helper.make_node("Identity", ["x"], ["y"])],
                                 [("x", D, [4, 5])], ("y", D)),
    "gemm": lambda: gemm(D, [3, 4], [4, 5], [5]),
    "gemm_trans_alpha_beta": lambda: gemm(D, [4, 3], [5, 4], [3, 1], transA=1, transB=1,
                                          alpha=0.7, beta=1.3),
    "gemm_transa": lambda: gemm(D, [4, 3], [4, 5], None, transA=1),
    "gemm_f32": lambda: gemm(F, [3, 6], [5, 6], [1, 5], transB=1),
    "matmul_batched_broadcast": lambda: model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", D, [2, 1, 3, 4]), ("b", D, [3, 4, 2])], ("y", D)),
    "matmul_1d": lambda: model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                               [("a", D, [4]), ("b", D, [2, 4, 3])], ("y", D)),
    "matmul_f32": lambda: model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                [("a", F, [2, 3, 4]), ("b", F, [4, 5])], ("y", F)),
    "conv": lambda: conv(D, [2, 3, 5, 5], [4, 3, 3, 3], True, pads=[1, 1, 1, 1]),
    "conv_groups_strides_pads_dilations": lambda: conv(
        D, [1, 4, 7, 6], [6, 2, 3, 2], True, group=2, strides=[2, 1], pads=[1, 0, 0, 1],
        dilations=[1, 2]),
    "conv_1d": lambda: conv(D, [2, 2, 7], [3, 2, 3], False, strides=[2], pads=[1, 1]),
    "conv_f32": lambda: conv(F, [2, 3, 5, 5], [4, 3, 3, 3], True, pads=[1, 1, 1, 1]),
    "conv_groups_f32": lambda: conv(F, [1, 4, 7, 6], [6, 2, 3, 2], True, group=2,
                                    strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2]),
    "relu": lambda: unary("Relu"),
    "sigmoid": lambda: unary("Sigmoid"),
    "tanh": lambda: unary("Tanh"),
    "gelu_none": lambda: unary("Gelu", opset=20),
    "gelu_tanh": lambda: unary("Gelu", opset=20, approximate="tanh"),
    "maxpool_pads_ceil": lambda: pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1], ceil_mode=1),
    "maxpool_dilations": lambda: pool("MaxPool", kernel_shape=[2, 2], dilations=[2, 2]),
    "averagepool_pads_ceil": lambda: pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 1], ceil_mode=1),
    "averagepool_count_include_pad": lambda: pool("AveragePool", kernel_shape=[3, 2],
                                                  strides=[2, 2], pads=[1, 0, 1, 1],
                                                  count_include_pad=1),
    "global_average_pool": lambda: pool("GlobalAveragePool"),
    "global_max_pool": lambda: pool("GlobalMaxPool"),
    "batch_norm": batch_norm,
    "add_broadcast": lambda: binary("Add", [2, 3, 4], [3, 1]),
    "sub_broadcast": lambda: binary("Sub", [3, 1], [2, 1, 4]),
    "mul_broadcast": lambda: binary("Mul", [2, 3, 4], [4]),
    "mul_broadcast_both": lambda: binary("Mul", [2, 1, 4], [3, 1]),
    "mul_square": lambda: model([helper.make_node("Mul", ["x", "x"], ["y"])],
                                [("x", D, [3, 4])], ("y", D)),
    "flatten": flatten,
    "div_broadcast": div,
    "pow_broadcast": pow_,
    "erf_abs_reciprocal": erf_abs_reciprocal,
    "clip": clip,
    "pad_modes": pads,
    "pad_attributes": pad_attributes,
    "tile_depth_space": tile_depth_space,
    "gather_scatter": gather_scatter,
    "normalizations": normalizations,
    "group_norm_per_channel": group_norm_per_channel,
    "einsum": einsums,
    "resize_nearest_linear": resizes,
    "leaky_relu_prelu": leaky_relu_prelu,
    "elu_selu_celu": elu_selu_celu,
    "hard_sigmoid_swish": hard_sigmoid_swish,
    "softplus_softsign_mish": softplus_softsign_mish,
    "thresholded_relu_sin_cos": thresholded_relu_sin_cos,
    "sum_max_min_broadcast": sum_max_min,
    "where_broadcast": where,
    "reduce_sum_mean_max": reductions,
    "reduce_min_prod_l1_l2_lse_ssq": reductions_more,
    "reduce_axes_input_noop": reductions_axes_input,
    "cumsum_trilu": cumsum_trilu,
    "top_k_one_hot": top_k_one_hot,
    "exp_sqrt_log_neg": exp_sqrt_log_neg,
    "unsqueeze_dropout_expand_squeeze": reshaping,
    "reshape": reshape,
    "transpose": lambda: model([helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1])],
                               [("x", D, [2, 3, 4])], ("y", D)),
    "concat": lambda: model([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
                            [("a", D, [2, 2, 3]), ("b", D, [2, 1, 3])], ("y", D)),
    "split": split,
    "slice_negative_steps": slice_,
    "softmax_axis1": lambda: softmax("Softmax", 1),
    "softmax_last": lambda: softmax("Softmax", -1),
    "softmax_opset11": lambda: softmax("Softmax", 1, opset=11),
    "logsoftmax_axis0": lambda: softmax("LogSoftmax", 0),
    "logsoftmax_last": lambda: softmax("LogSoftmax", -1),
    "layer_norm_last": lambda: layer_norm(-1, [4]),
    "layer_norm_axis1": lambda: layer_norm(1, [3, 4]),
    "shortcut": shortcut,
    "conv_add_sigmoid": conv_add_sigmoid,
    "branches": branches,
    "branches_f32": branches_f32,
    "shared_gemm_f32": shared_gemm_f32,
}


def main():
    if sys.argv[1:] == ["--list"]:
        print("\n".join(CASES))
        return
    outdir = sys.argv[1]
    for case in sys.argv[2:]:
        m = CASES[case]()
        write_whole(f"{outdir}/{case}.onnx", m.SerializeToString())


if __name__ == "__main__":
    main()
