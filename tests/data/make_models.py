#!/usr/bin/python3
"""Writes the tiny hand-made ONNX models tests/test_frontend.c loads.

Run with Debian's interpreter (it has the onnx package):
    /usr/bin/python3 tests/data/make_models.py
Every file is rebuilt from scratch, so the output is deterministic and the
committed files can be regenerated and compared. Models that must be invalid
are assembled field by field, bypassing onnx.helper's checks on purpose.
"""
import os
import struct

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
T = TensorProto


def save(model, *path):
    full = os.path.join(HERE, *path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(model.SerializeToString())


def model(nodes, inputs, outputs, inits=(), opset=13, value_info=(), ir=7, sparse=()):
    g = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(inits),
                          value_info=list(value_info), sparse_initializer=list(sparse))
    m = helper.make_model(g, producer_name="make_models.py",
                          opset_imports=[helper.make_opsetid("", opset)] if opset else [])
    m.ir_version = ir
    return m


def vi(name, elem=T.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def identity_model(inits=(), **kw):
    """x -> Identity -> y: a valid model around whatever initializers."""
    return model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                 [vi("x")], [vi("y")], inits, **kw)


def tensor(name, dtype, dims, field=None, values=(), raw=None):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    if field:
        getattr(t, field).extend(values)
    if raw is not None:
        t.raw_data = raw
    return t


def ext_tensor(name, dims, location, offset=None, length=None, dtype=T.FLOAT):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, val in (("location", location), ("offset", offset), ("length", length)):
        if val is not None:
            e = t.external_data.add()
            e.key = key
            e.value = str(val)
    return t


def typed_fields():
    """One initializer per typed-field encoding and one per raw_data type.
    The values are checked element by element in test_frontend.c."""
    f16 = [0x3C00, 0xC000, 0x7BFF]     # 1.0, -2.0, 65504
    bf16 = [0x3F80, 0xC040, 0x0000]    # 1.0, -3.0, 0.0
    inits = [
        tensor("f32", T.FLOAT, [3], "float_data", [1.5, -2.0, 3.25]),
        tensor("c64", T.COMPLEX64, [2], "float_data", [1, 2, 3, 4]),
        tensor("i32", T.INT32, [3], "int32_data", [-7, 0, 2147483647]),
        tensor("i16", T.INT16, [3], "int32_data", [-300, 0, 32767]),
        tensor("i8", T.INT8, [3], "int32_data", [-1, 2, -128]),
        tensor("u16", T.UINT16, [3], "int32_data", [1, 65535, 300]),
        tensor("u8", T.UINT8, [3], "int32_data", [0, 255, 7]),
        tensor("b", T.BOOL, [3], "int32_data", [1, 0, 1]),
        tensor("f16", T.FLOAT16, [3], "int32_data", f16),
        tensor("bf16", T.BFLOAT16, [3], "int32_data", bf16),
        tensor("i64", T.INT64, [2, 2], "int64_data", [-(2**40), 1, 2, 2**62]),
        tensor("f64", T.DOUBLE, [2], "double_data", [0.1, -1e300]),
        tensor("c128", T.COMPLEX128, [1], "double_data", [0.5, -0.25]),
        tensor("u32", T.UINT32, [2], "uint64_data", [4294967295, 5]),
        tensor("u64", T.UINT64, [2], "uint64_data", [2**64 - 1, 9]),
        tensor("str", T.STRING, [2], "string_data", [b"hello", b""]),
        tensor("scalar", T.FLOAT, [], "float_data", [42.0]),
        tensor("empty", T.FLOAT, [0, 3]),
        tensor("raw_f32", T.FLOAT, [3], raw=struct.pack("<3f", 1.5, -2.0, 3.25)),
        tensor("raw_i64", T.INT64, [2], raw=struct.pack("<2q", -(2**40), 2**62)),
        tensor("raw_u16", T.UINT16, [3], raw=struct.pack("<3H", 1, 65535, 300)),
        tensor("raw_f16", T.FLOAT16, [3], raw=struct.pack("<3H", *f16)),
        tensor("raw_bool", T.BOOL, [3], raw=bytes([1, 0, 1])),
        tensor("raw_f64", T.DOUBLE, [2], raw=struct.pack("<2d", 0.1, -1e300)),
        tensor("raw_c64", T.COMPLEX64, [2], raw=struct.pack("<4f", 1, 2, 3, 4)),
    ]
    save(identity_model(inits), "typed_fields.onnx")


def attrs():
    """A node of an unknown operator carrying an attribute of every type."""
    t = helper.make_tensor("tv", T.INT64, [2], [5, -6])
    node = helper.make_node(
        "AllAttrs", ["x"], ["y"], name="all", domain="test.attrs",
        f=0.5, i=-3, s=b"with\x00nul", t=t, fs=[1.0, 2.5], is_=[1, -2, 3],
        ss=[b"a", b"bc"], ts=[t, helper.make_tensor("tf", T.FLOAT, [1], [7.0])])
    # "is" is a Python keyword, so it is passed as is_ and renamed here.
    next(a for a in node.attribute if a.name == "is_").name = "is"
    m = model([node], [vi("x")], [vi("y")])
    m.opset_import.append(helper.make_opsetid("test.attrs", 1))
    save(m, "attrs.onnx")


def external():
    """weights.bin: 16 bytes of padding, then a float32 [2, 3]; sub/w2.bin a
    float32 [2] starting at offset 0 with no length."""
    w = struct.pack("<16x6f", 1, 2, 3, 4, 5, 6)
    os.makedirs(os.path.join(HERE, "ext", "sub"), exist_ok=True)
    with open(os.path.join(HERE, "ext", "weights.bin"), "wb") as f:
        f.write(w)
    with open(os.path.join(HERE, "ext", "sub", "w2.bin"), "wb") as f:
        f.write(struct.pack("<2f", 7, 8))
    good = [ext_tensor("w", [2, 3], "weights.bin", 16, 24), ext_tensor("w2", [2], "sub/w2.bin")]
    save(identity_model(good), "ext", "good.onnx")
    cases = {
        "abs": ext_tensor("w", [2, 3], "/etc/passwd", 0, 24),
        "dotdot": ext_tensor("w", [2, 3], "sub/../weights.bin", 16, 24),
        "offset_past_end": ext_tensor("w", [2, 3], "weights.bin", 1000),
        "length_past_end": ext_tensor("w", [2, 3], "weights.bin", 16, 4096),
        "length_mismatch": ext_tensor("w", [2, 3], "weights.bin", 16, 20),
        "short_file": ext_tensor("w", [2, 3], "weights.bin", 32),
        "missing": ext_tensor("w", [2, 3], "nowhere.bin"),
        "no_location": ext_tensor("w", [2, 3], None, 0, 24),
        "bad_offset": ext_tensor("w", [2, 3], "weights.bin", "-5", 24),
        "link": ext_tensor("w", [2, 3], "link.bin", 16, 24),
    }
    for name, t in cases.items():
        save(identity_model([t]), "ext", "bad_" + name + ".onnx")


def invalid():
    """One model per structural error the reader must refuse."""
    relu = lambda i, o, name="": helper.make_node("Relu", [i], [o], name=name)
    w = tensor("w", T.FLOAT, [2, 3], "float_data", [0] * 6)
    bad = {
        "dup_initializer": identity_model([w, w]),
        "dup_input": model([relu("x", "y")], [vi("x"), vi("x")], [vi("y")]),
        "dup_producer": model([relu("x", "y", "a"), relu("x", "y", "b")], [vi("x")], [vi("y")]),
        "producer_is_input": model([relu("x", "x", "a")], [vi("x")], [vi("x")]),
        "producer_is_initializer": model([relu("x", "w", "a")], [vi("x")], [vi("w")], [w]),
        "undefined_input": model([relu("nope", "y", "r")], [vi("x")], [vi("y")]),
        "undefined_output": model([relu("x", "y", "r")], [vi("x")], [vi("z")]),
        "no_default_opset": identity_model(opset=0),
        "no_op_type": model([helper.make_node("", ["x"], ["y"], name="n")], [vi("x")], [vi("y")]),
        "sparse_initializer": identity_model(sparse=[helper.make_sparse_tensor(
            tensor("sv", T.FLOAT, [1], "float_data", [1.0]),
            tensor("si", T.INT64, [1], "int64_data", [0]), [4])]),
        "negative_dim": identity_model([tensor("w", T.FLOAT, [2, -3])]),
        "rank9": identity_model([tensor("w", T.FLOAT, [1] * 9, "float_data", [1.0])]),
        "overflow_dims": identity_model([tensor("w", T.FLOAT, [2**40, 2**40], "float_data", [1])]),
        "raw_size": identity_model([tensor("w", T.FLOAT, [2, 3], raw=b"\0" * 20)]),
        "count": identity_model([tensor("w", T.FLOAT, [2, 3], "float_data", [1, 2])]),
        "wrong_field": identity_model([tensor("w", T.INT64, [2], "float_data", [1, 2])]),
        "two_fields": identity_model([tensor("w", T.FLOAT, [1], "float_data", [1], raw=b"\0" * 4)]),
        "no_data": identity_model([tensor("w", T.FLOAT, [2])]),
        "no_dtype": identity_model([tensor("w", 0, [1], "float_data", [1])]),
        "float8": identity_model([tensor("w", 17, [1], raw=b"\0")]),
        "value_rank9": model([relu("x", "y")], [vi("x", shape=[1] * 9)], [vi("y")]),
        "value_negative_dim": model([relu("x", "y")], [vi("x", shape=[2, -1])], [vi("y")]),
        "input_mismatch": model([relu("x", "y")], [vi("x"), vi("w", T.INT64)], [vi("y")], [w]),
    }
    m = identity_model()
    m.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    bad["dup_opset"] = m
    bad["opset_zero"] = identity_model(opset=0)
    bad["opset_zero"].opset_import.append(helper.make_opsetid("", 0))
    bad["input_no_name"] = model([relu("x", "y")], [vi("x"), vi("")], [vi("y")])
    bad["initializer_no_name"] = identity_model([tensor("", T.FLOAT, [1], "float_data", [1])])
    bad["output_no_name"] = model([relu("x", "y")], [vi("x")], [vi("")])
    bad["output_twice"] = model([relu("x", "y")], [vi("x")], [vi("y"), vi("y")])
    bad["input_rank_mismatch"] = model([relu("x", "y")], [vi("x"), vi("w", shape=[6])],
                                       [vi("y")], [w])
    bad["input_dim_mismatch"] = model([relu("x", "y")], [vi("x"), vi("w", shape=[2, 4])],
                                      [vi("y")], [w])
    bad["unknown_elem_type"] = model([relu("x", "y")], [vi("x", 99)], [vi("y")])
    n = helper.make_node("Relu", ["x"], ["y"], name="r")
    n.attribute.add().i = 1
    bad["attr_no_name"] = model([n], [vi("x")], [vi("y")])
    bad["attr_twice"] = model([helper.make_node("Relu", ["x"], ["y"], name="r", a=1)],
                              [vi("x")], [vi("y")])
    bad["attr_twice"].graph.node[0].attribute.append(
        bad["attr_twice"].graph.node[0].attribute[0])
    n = helper.make_node("Relu", ["x"], ["y"], name="r")
    a = n.attribute.add()
    a.name, a.type = "t", onnx.AttributeProto.TENSOR
    bad["attr_tensor_missing"] = model([n], [vi("x")], [vi("y")])
    n = helper.make_node("Relu", ["x"], ["y"], name="r")
    # Type 42 is not in the enum, so Python refuses to set it: parse it from
    # the wire bytes (name "u", field 20 = 42), kept as an unknown field.
    n.attribute.add().MergeFromString(b"\x0a\x01u\xa0\x01\x2a")
    bad["attr_unknown_type"] = model([n], [vi("x")], [vi("y")])
    for name, m in bad.items():
        save(m, "invalid", name + ".onnx")


def structure():
    """Valid models exercising naming, ordering and value types."""
    # Nodes listed after their consumers; the second node is unnamed and
    # its generated name "Relu_1" is taken by the third, named node.
    nodes = [helper.make_node("Relu", ["t"], ["y"]),
             helper.make_node("Relu", ["y"], ["z"]),
             helper.make_node("Relu", ["x"], ["t"], name="Relu_1")]
    save(model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, None])],
               [vi("z", shape=None)], value_info=[vi("t", shape=("N", 3, 5))]),
         "out_of_order.onnx")
    # A sequence input and an optional output: recorded, refused later.
    seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, None)
    save(model([helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")],
               [seq, vi("i", T.INT64, ())], [vi("y", shape=None)]),
         "sequence.onnx")
    # An omitted optional input in the middle and an initializer that is
    # also a graph input.
    clip_min = tensor("hi", T.FLOAT, [], "float_data", [6.0])
    save(model([helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")],
               [vi("x"), vi("hi", T.FLOAT, ())], [vi("y")], [clip_min], ir=3),
         "optional_input.onnx")
    # Before IR version 2, attributes carried no type: the field set tells it.
    n = helper.make_node("Custom", ["x"], ["y"], name="old", domain="test.old", f=0.5, i=2,
                         s="s", t=helper.make_tensor("t", T.FLOAT, [1], [1.0]), fs=[1.0],
                         is_=[1], ss=["a"], ts=[helper.make_tensor("u", T.FLOAT, [1], [2.0])])
    for a in n.attribute:
        a.ClearField("type")
    m = model([n], [vi("x")], [vi("y")], ir=1)
    m.opset_import.append(helper.make_opsetid("test.old", 1))
    save(m, "untyped_attrs.onnx")
    # Map and sparse tensor types, recorded by kind.
    mp = onnx.ValueInfoProto(name="m")
    mp.type.map_type.key_type = T.INT64
    mp.type.map_type.value_type.tensor_type.elem_type = T.FLOAT
    sp = onnx.ValueInfoProto(name="sp")
    sp.type.sparse_tensor_type.elem_type = T.FLOAT
    save(model([helper.make_node("Custom", ["m", "sp"], ["y"], name="c", domain="test.old")],
               [mp, sp], [vi("y")]),
         "map_sparse.onnx")
    # Control flow: a GRAPH attribute is recorded by type only.
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "then", [],
                               [vi("o")])
    save(model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g,
                                 else_branch=then_g)],
               [vi("c", T.BOOL, ()), vi("x")], [vi("y")]),
         "if.onnx")


def small_cnn():
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm with float initializers, a
    symbolic batch and value_info: the truncation test's model."""
    conv_w = helper.make_tensor("conv_w", T.FLOAT, [2, 1, 3, 3], [0.1 * i for i in range(18)])
    conv_b = helper.make_tensor("conv_b", T.FLOAT, [2], [0.5, -0.5])
    fc_w = helper.make_tensor("fc_w", T.FLOAT, [8, 3],
                              struct.pack("<24f", *[0.01 * i for i in range(24)]), raw=True)
    fc_b = helper.make_tensor("fc_b", T.FLOAT, [3], [1, 2, 3])
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", alpha=1.0,
                         beta=1.0, transB=0),
    ]
    m = model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["N", 1, 4, 4])],
              [helper.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
              [conv_w, conv_b, fc_w, fc_b],
              value_info=[helper.make_tensor_value_info("c", T.FLOAT, ["N", 2, 4, 4])])
    onnx.checker.check_model(m)
    save(m, "small_cnn.onnx")


def fuzz_corpus():
    """Seeds for tests/fuzz: every model above, valid or not (a few hundred
    bytes each), so the fuzzer starts next to each of the reader's checks."""
    out = os.path.join(HERE, "..", "fuzz", "corpus")
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        os.remove(os.path.join(out, old))
    for root, _, files in sorted(os.walk(HERE)):
        for name in sorted(files):
            if name.endswith(".onnx"):
                rel = os.path.relpath(os.path.join(root, name), HERE)
                with open(os.path.join(root, name), "rb") as src:
                    data = src.read()
                with open(os.path.join(out, rel.replace(os.sep, "_")), "wb") as dst:
                    dst.write(data)


if __name__ == "__main__":
    small_cnn()
    typed_fields()
    attrs()
    external()
    invalid()
    structure()
    fuzz_corpus()
