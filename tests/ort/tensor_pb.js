'use strict';
// ONNX TensorProto files <-> onnxruntime-node tensors.
//
// The message layout comes from the system's onnx.proto (Debian libonnx-dev,
// the same file accpar's own reader is generated from), parsed at run time by
// protobufjs: no hand-written wire decoder to get wrong, and no generated code
// to keep in step with the schema. ACCPAR_ONNX_PROTO overrides the path.

const fs = require('fs');
const path = require('path');

const PROTO_PATH = process.env.ACCPAR_ONNX_PROTO || '/usr/include/onnx/onnx.proto';
const SETUP_HINT = 'run scripts/setup-ort.sh';

class OracleError extends Error {}

// Loaded on first use, so that a missing package is reported as one line
// with the fix rather than as a stack trace from require().
let protobuf = null;
let tensorType = null;

function requirePackage(name) {
  try {
    return require(name);
  } catch (e) {
    throw new OracleError(`cannot load the npm package ${name} from ${__dirname}/node_modules (${SETUP_HINT})`);
  }
}

function tensorProto() {
  if (tensorType) return tensorType;
  protobuf = requirePackage('protobufjs');
  if (!fs.existsSync(PROTO_PATH))
    throw new OracleError(`${PROTO_PATH} is missing (Debian libonnx-dev; scripts/setup.sh installs it)`);
  let root;
  try {
    root = protobuf.loadSync(PROTO_PATH);
  } catch (e) {
    throw new OracleError(`${PROTO_PATH}: ${oneLine(e.message)}`);
  }
  tensorType = root.lookupType('onnx.TensorProto');
  return tensorType;
}

// TensorProto.DataType -> the onnxruntime-node type name, the typed array
// holding its elements, and the TensorProto field used when raw_data is
// absent (ONNX stores narrow integers, bool and float16 bits in int32_data).
const DTYPES = {
  1: { ort: 'float32', array: Float32Array, field: 'floatData' },
  2: { ort: 'uint8', array: Uint8Array, field: 'int32Data' },
  3: { ort: 'int8', array: Int8Array, field: 'int32Data' },
  4: { ort: 'uint16', array: Uint16Array, field: 'int32Data' },
  5: { ort: 'int16', array: Int16Array, field: 'int32Data' },
  6: { ort: 'int32', array: Int32Array, field: 'int32Data' },
  7: { ort: 'int64', array: BigInt64Array, field: 'int64Data' },
  8: { ort: 'string', array: null, field: 'stringData' },
  9: { ort: 'bool', array: Uint8Array, field: 'int32Data' },
  10: { ort: 'float16', array: Uint16Array, field: 'int32Data' },
  11: { ort: 'float64', array: Float64Array, field: 'doubleData' },
  12: { ort: 'uint32', array: Uint32Array, field: 'uint64Data' },
  13: { ort: 'uint64', array: BigUint64Array, field: 'uint64Data' },
};

const ORT_TO_PROTO = {};
for (const [code, d] of Object.entries(DTYPES)) ORT_TO_PROTO[d.ort] = Number(code);

function oneLine(s) {
  return String(s).replace(/\s+/g, ' ').trim();
}

// protobufjs gives int64 fields as Long objects (or numbers when small).
function toBigInt(v) {
  return typeof v === 'bigint' ? v : BigInt(v.toString());
}

function toSafeNumber(v, what) {
  const n = typeof v === 'number' ? v : Number(v.toString());
  if (!Number.isSafeInteger(n)) throw new OracleError(`${what} ${v} is out of range`);
  return n;
}

// Reads a serialized TensorProto file; returns { name, dtype, dims, data }
// where dtype is the ORT type name and data a typed array (or an array of
// strings) of the tensor's elements.
function readTensorFile(file) {
  const T = tensorProto();
  let bytes;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    throw new OracleError(`${file}: cannot read (${e.code || oneLine(e.message)})`);
  }
  let msg;
  try {
    msg = T.decode(bytes);
  } catch (e) {
    throw new OracleError(`${file}: not a serialized TensorProto (${oneLine(e.message)})`);
  }
  const code = msg.dataType;
  const d = DTYPES[code];
  if (!d) throw new OracleError(`${file}: data_type ${code} is not supported by this harness`);
  if (msg.dataLocation === 1 || (msg.externalData && msg.externalData.length))
    throw new OracleError(`${file}: external data is not supported`);
  if (msg.segment) throw new OracleError(`${file}: segmented tensors are not supported`);
  const dims = msg.dims.map((v) => toSafeNumber(v, `${file}: dimension`));
  for (const v of dims) if (v < 0) throw new OracleError(`${file}: negative dimension ${v}`);
  const numel = dims.reduce((a, b) => a * b, 1);

  let data;
  if (d.ort === 'string') {
    if (msg.stringData.length !== numel)
      throw new OracleError(`${file}: ${msg.stringData.length} strings for ${numel} elements`);
    data = msg.stringData.map((b) => Buffer.from(b).toString('utf8'));
  } else if (msg.rawData && msg.rawData.length) {
    const want = numel * d.array.BYTES_PER_ELEMENT;
    if (msg.rawData.length !== want)
      throw new OracleError(`${file}: raw_data has ${msg.rawData.length} bytes, ${want} expected for dims [${dims}]`);
    // Copied into a fresh buffer: the typed array needs its own alignment.
    const raw = msg.rawData;
    data = new d.array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
  } else {
    const src = msg[d.field] || [];
    if (src.length !== numel)
      throw new OracleError(`${file}: ${d.field} has ${src.length} values for ${numel} elements`);
    data = new d.array(numel);
    for (let i = 0; i < numel; i++) {
      if (d.array === BigInt64Array) data[i] = toBigInt(src[i]);
      else if (d.array === BigUint64Array) data[i] = BigInt.asUintN(64, toBigInt(src[i]));
      else if (d.field === 'uint64Data') data[i] = Number(toBigInt(src[i]));
      else data[i] = src[i];
    }
  }
  return { name: msg.name || '', dtype: d.ort, dims, data };
}

// Writes an ORT tensor as a TensorProto named name: raw_data (little-endian,
// the host order here) for numbers and bool, string_data for strings.
// Written to a temporary file and renamed, so nothing is half-written.
function writeTensorFile(file, name, tensor) {
  const T = tensorProto();
  const code = ORT_TO_PROTO[tensor.type];
  if (!code) throw new OracleError(`${file}: output type ${tensor.type} is not supported by this harness`);
  const fields = { name, dataType: code, dims: tensor.dims.map(Number) };
  if (tensor.type === 'string') {
    fields.stringData = tensor.data.map((s) => Buffer.from(s, 'utf8'));
  } else {
    const a = tensor.data;
    fields.rawData = Buffer.from(a.buffer, a.byteOffset, a.byteLength);
  }
  const bytes = T.encode(T.create(fields)).finish();
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  try {
    fs.writeFileSync(tmp, bytes);
    fs.renameSync(tmp, file);
  } catch (e) {
    try { fs.unlinkSync(tmp); } catch (ignored) { /* the write failed before creating it */ }
    throw new OracleError(`${file}: cannot write (${e.code || oneLine(e.message)})`);
  }
}

function loadOrt() {
  return requirePackage('onnxruntime-node');
}

module.exports = { OracleError, DTYPES, oneLine, readTensorFile, writeTensorFile, loadOrt, tensorProto, PROTO_PATH, SETUP_HINT };
