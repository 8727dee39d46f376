#!/usr/bin/python3
"""Writes the small models the golden tests feed to accparc: one valid model
and one for each kind of bad input the driver must refuse with a one-line
error. Run with Debian's python3-onnx: /usr/bin/python3 make_models.py"""
import os
import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
os.makedirs(here, exist_ok=True)


def save(name, graph, opset=13, check=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="accpar-golden")
    model.ir_version = 7
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(here, name + ".onnx"))
    return model


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


rng = np.random.default_rng(7)

# A small valid classifier with a symbolic batch: Conv/Relu/MaxPool/Flatten/Gemm,
# a Shape->Gather->Unsqueeze->Concat->Reshape chain as exporters write it.
w = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "conv.w")
b = numpy_helper.from_array(np.zeros(4, np.float32), "conv.b")
fw = numpy_helper.from_array(rng.standard_normal((10, 64)).astype(np.float32), "fc.w")
fb = numpy_helper.from_array(np.zeros(10, np.float32), "fc.b")
idx0 = numpy_helper.from_array(np.array(0, np.int64), "idx0")
minus1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
small = save("small_cnn", helper.make_graph([
    helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv",
                     pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c"], ["r"], name="relu"),
    helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Shape", ["p"], ["p.shape"], name="shape"),
    helper.make_node("Gather", ["p.shape", "idx0"], ["n"], name="gather", axis=0),
    helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
    helper.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
    helper.make_node("Reshape", ["p", "target"], ["flat"], name="reshape"),
    helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
], "small_cnn", [vi("x", ["N", 1, 8, 8])], [vi("y", ["N", 10])],
    [w, b, fw, fb, idx0, minus1, numpy_helper.from_array(np.array([0], np.int64), "axes0")]))

# Truncated: the valid model cut in the middle of a tensor.
data = small.SerializeToString()
with open(os.path.join(here, "truncated.onnx"), "wb") as f:
    f.write(data[: len(data) // 2])

with open(os.path.join(here, "not_onnx.onnx"), "wb") as f:
    f.write(b"this is a text file, not a protobuf\n")

# Operators accpar does not support: every type and node in one message.
save("unsupported", helper.make_graph([
    helper.make_node("Unique", ["x"], ["v"], name="uniq1"),
    helper.make_node("Relu", ["v"], ["r"], name="relu"),
    helper.make_node("Unique", ["r"], ["v2"], name="uniq2"),
    helper.make_node("Hardmax", ["v2"], ["y"], name="hard"),
], "unsupported", [vi("x", [2, 8])], [vi("y", [2, 3])]))

# A cycle: a -> b -> a.
save("cycle", helper.make_graph([
    helper.make_node("Add", ["x", "b_out"], ["a_out"], name="a"),
    helper.make_node("Relu", ["a_out"], ["b_out"], name="b"),
], "cycle", [vi("x", [4])], [vi("a_out", [4])]), check=False)

# Two nodes writing the same value.
save("duplicate_output", helper.make_graph([
    helper.make_node("Relu", ["x"], ["y"], name="first"),
    helper.make_node("Sigmoid", ["x"], ["y"], name="second"),
], "dup", [vi("x", [4])], [vi("y", [4])]), check=False)

# A node reading a value nothing defines.
save("missing_input", helper.make_graph([
    helper.make_node("Add", ["x", "ghost"], ["y"], name="add"),
], "missing", [vi("x", [4])], [vi("y", [4])]), check=False)

# Shapes that do not fit: a 3-D input into a 2-D convolution.
save("conv_rank", helper.make_graph([
    helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
], "conv_rank", [vi("x", [1, 3, 8]), vi("w", [4, 3, 3, 3])], [vi("y", None)]), check=False)

# Broadcasting that cannot work.
save("broadcast", helper.make_graph([
    helper.make_node("Add", ["x", "z"], ["y"], name="add"),
], "broadcast", [vi("x", [2, 3]), vi("z", [4])], [vi("y", None)]), check=False)

# An initializer with a negative dimension.
neg = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
neg.dims[0] = -2
save("negative_dim", helper.make_graph([
    helper.make_node("Add", ["x", "w"], ["y"], name="add"),
], "negative_dim", [vi("x", [2])], [vi("y", [2])], [neg]), check=False)

# External data pointing outside the model's folder.
ext = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
ext.ClearField("float_data")
ext.data_location = TensorProto.EXTERNAL
for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "8")):
    entry = ext.external_data.add()
    entry.key, entry.value = k, v
save("external_escape", helper.make_graph([
    helper.make_node("Add", ["x", "w"], ["y"], name="add"),
], "external_escape", [vi("x", [2])], [vi("y", [2])], [ext]), check=False)

# A sequence-typed input.
seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
save("sequence_input", helper.make_graph([
    helper.make_node("Identity", ["s"], ["y"], name="id"),
], "sequence_input", [seq], [helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, [2])]))

# An attribute of the wrong type: Softmax's axis as a float.
save("float_axis", helper.make_graph([
    helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=1.0),
], "float_axis", [vi("x", [2, 3])], [vi("y", [2, 3])]), check=False)

# An opset newer than the semantics accpar implements.
save("opset_99", helper.make_graph([
    helper.make_node("Relu", ["x"], ["y"], name="relu"),
], "opset_99", [vi("x", [2, 3])], [vi("y", [2, 3])]), opset=99, check=False)

# Inputs with symbolic dims, shared ('B') or not ('S'), and one without a name.
save("symbolic_dims", helper.make_graph([
    helper.make_node("Add", ["a", "b"], ["t"], name="add1"),
    helper.make_node("Add", ["t", "c"], ["y"], name="add2"),
], "symbolic_dims", [vi("a", ["B", "S", 4]), vi("b", ["B", 1, 4]), vi("c", [None, 4])],
    [vi("y", ["B", "S", 4])]))

# A layer fed by two inputs whose dims are all symbolic ('batch', 'frames'):
# --inputs DIR binds every one of them on plan, compare, dump and compile.
save("two_inputs_layer", helper.make_graph([
    helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
    helper.make_node("Add", ["h", "m"], ["s"], name="add"),
    helper.make_node("Relu", ["s"], ["y"], name="relu"),
], "two_inputs_layer", [vi("x", ["batch", "frames", 8]), vi("m", ["batch", "frames", 16])],
    [vi("y", ["batch", "frames", 16])],
    [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")]))

# Values that meet the batch without coming from the input, as exporters
# write them at a fixed batch B: a class token expanded to [B, 1, 8] and
# concatenated with the patches, a ConstantOfShape([B, 5, 2]) padding
# concatenated on the features, a token tiled to [B, 5, 10] and added, and
# (B > 1) a Slice of the whole batch, [0, B), as x[:B] exports.
# Re-batched (--batch N), the literals that wrote B follow (ir/rebatch.c);
# test_bind compares each with the model written at batch 5.
mrng = np.random.default_rng(11)
meet_weights = [
    numpy_helper.from_array(mrng.standard_normal((1, 1, 8)).astype(np.float32), "cls"),
    numpy_helper.from_array(mrng.standard_normal((1, 1, 10)).astype(np.float32), "tok"),
    numpy_helper.from_array(mrng.standard_normal((10, 3)).astype(np.float32), "w"),
]
for batch in (1, 2, 5):
    whole = [helper.make_node("Slice", ["x", "zero", "bend", "zero"], ["xs"], name="whole_batch")]
    save(f"meets_batch_b{batch}", helper.make_graph((whole if batch > 1 else []) + [
        helper.make_node("Expand", ["cls", "cls_shape"], ["e"], name="expand_cls"),
        helper.make_node("Concat", ["e", "xs" if batch > 1 else "x"], ["cat"], name="cat_tokens",
                         axis=1),
        helper.make_node("ConstantOfShape", ["pad_shape"], ["pad"], name="pad",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Concat", ["cat", "pad"], ["cat2"], name="cat_features", axis=2),
        helper.make_node("Tile", ["tok", "reps"], ["tiled"], name="tile_tok"),
        helper.make_node("Add", ["cat2", "tiled"], ["s"], name="add_tok"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="proj"),
    ], f"meets_batch_b{batch}", [vi("x", [batch, 4, 8])], [vi("y", [batch, 5, 3])],
        meet_weights + [
            numpy_helper.from_array(np.array([batch, 1, 8], np.int64), "cls_shape"),
            numpy_helper.from_array(np.array([batch, 5, 2], np.int64), "pad_shape"),
            numpy_helper.from_array(np.array([batch, 5, 1], np.int64), "reps")] +
        ([numpy_helper.from_array(np.array([0], np.int64), "zero"),
          numpy_helper.from_array(np.array([batch], np.int64), "bend")] if batch > 1 else [])))
