#!/usr/bin/env node
'use strict';
// Writes seeded random test inputs for an ONNX model, in ONNX's test-data
// format, so that accpar's executables and run_ort.js can be fed the same
// files.
//
//   node make_inputs.js MODEL.onnx OUTPUT_DIR [--seed S] [--batch N] [--dim NAME=V]...
//
// One OUTPUT_DIR/input_N.pb per input that is not an initializer, in graph
// order, named after the input, with the shape ONNX Runtime reports for it;
// a symbolic dimension named by --dim takes its value, any other (the zoo's
// "N" from accpar-zoo --batch 0) the value of --batch, which is then required. Values: float types uniform in
// [-1, 1); integer types uniform in {0..9} (valid class labels for the zoo's
// 10-class models); bool 0 or 1. The same model, seed and batch always give
// the same bytes. Errors: one line on stderr, exit 1 (2 for a usage error).

const fs = require('fs');
const path = require('path');
const { OracleError, oneLine, writeTensorFile, loadOrt, tensorProto } = require('./tensor_pb.js');

// mulberry32: a small 32-bit generator, plenty for test data and fast
// enough for ImageNet-sized inputs without BigInt arithmetic.
function generator(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return (z ^ (z >>> 14)) >>> 0;
  };
}

function fill(type, numel, next) {
  const TWO32 = 4294967296;
  switch (type) {
    case 'float32': case 'float64': {
      const a = type === 'float32' ? new Float32Array(numel) : new Float64Array(numel);
      for (let i = 0; i < numel; i++) a[i] = (next() / TWO32) * 2 - 1;
      return a;
    }
    case 'int8': case 'uint8': case 'int16': case 'uint16': case 'int32': case 'uint32': {
      const ctor = { int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array,
        int32: Int32Array, uint32: Uint32Array }[type];
      const a = new ctor(numel);
      for (let i = 0; i < numel; i++) a[i] = next() % 10;
      return a;
    }
    case 'int64': case 'uint64': {
      const a = type === 'int64' ? new BigInt64Array(numel) : new BigUint64Array(numel);
      for (let i = 0; i < numel; i++) a[i] = BigInt(next() % 10);
      return a;
    }
    case 'bool': {
      const a = new Uint8Array(numel);
      for (let i = 0; i < numel; i++) a[i] = next() & 1;
      return a;
    }
    default:
      return null;
  }
}

function parseArgs(argv) {
  const pos = [];
  let seed = 1;
  let batch = null;
  const dims = new Map();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--dim') {
      const m = /^([^=]+)=(\d+)$/.exec(argv[++i] || '');
      if (!m || Number(m[2]) < 1) return null;
      dims.set(m[1], Number(m[2]));
    } else if (a === '--seed' || a === '--batch') {
      const v = argv[++i];
      if (v === undefined || !/^\d+$/.test(v)) return null;
      if (a === '--seed') seed = Number(v) >>> 0;
      else batch = Number(v);
      if (a === '--batch' && batch < 1) return null;
    } else if (a.startsWith('-')) {
      return null;
    } else {
      pos.push(a);
    }
  }
  return pos.length === 2 ? { model: pos[0], outDir: pos[1], seed, batch, dims } : null;
}

async function main(argv) {
  const args = parseArgs(argv);
  if (!args) {
    process.stderr.write('usage: make_inputs.js MODEL.onnx OUTPUT_DIR [--seed S] [--batch N] [--dim NAME=V]...\n');
    process.exit(2);
  }
  if (!fs.existsSync(args.model)) throw new OracleError(`${args.model}: no such model file`);
  const ort = loadOrt();
  tensorProto();
  let session;
  try {
    session = await ort.InferenceSession.create(args.model, { graphOptimizationLevel: 'disabled', logSeverityLevel: 3 });
  } catch (e) {
    throw new OracleError(`${args.model}: ONNX Runtime cannot load the model: ${oneLine(e.message)}`);
  }
  const metas = session.inputMetadata;
  try {
    fs.mkdirSync(args.outDir, { recursive: true });
  } catch (e) {
    throw new OracleError(`${args.outDir}: cannot create (${e.code || oneLine(e.message)})`);
  }
  for (let i = 0; i < metas.length; i++) {
    const m = metas[i];
    if (!m.isTensor) throw new OracleError(`${args.model}: input '${m.name}' is not a tensor`);
    const dims = m.shape.map((d) => {
      if (typeof d === 'number' && d >= 0) return d;
      if (args.dims.has(d)) return args.dims.get(d);
      if (args.batch === null)
        throw new OracleError(`${args.model}: input '${m.name}' has the symbolic dimension '${d}': give --batch or --dim`);
      return args.batch;
    });
    const numel = dims.reduce((a, b) => a * b, 1);
    // Each input gets its own stream, so adding an input leaves the others' values alone.
    const data = fill(m.type, numel, generator(Math.imul(args.seed, 0x9e3779b1) + i));
    if (!data) throw new OracleError(`${args.model}: input '${m.name}' has type ${m.type}, which this generator does not fill`);
    writeTensorFile(path.join(args.outDir, `input_${i}.pb`), m.name, { type: m.type, dims, data });
  }
  await session.release();
}

main(process.argv.slice(2)).catch((e) => {
  const msg = e instanceof OracleError ? e.message : `internal error: ${oneLine(e && e.stack ? e.stack : e)}`;
  process.stderr.write(`make_inputs: ${msg}\n`);
  process.exit(1);
});
