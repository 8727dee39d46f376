#!/usr/bin/env node
'use strict';
// Runs an ONNX model with ONNX Runtime (onnxruntime-node, CPU) on ONNX test
// data: the reference executor accpar's outputs are checked against.
//
//   node run_ort.js MODEL.onnx INPUT_DIR OUTPUT_DIR
//   node run_ort.js --check
//
// INPUT_DIR/input_N.pb feeds the model's N-th input that is not an
// initializer, in graph order; every output is written as
// OUTPUT_DIR/output_N.pb (created if missing), named after the output, and
// any output_N.pb left there by an earlier run with more outputs is removed.
// --check loads the packages (and read_sharding.mjs's onnx-buf) and onnx.proto
// and prints their versions.
// Errors: one line on stderr, exit 1 (2 for a usage error).

const fs = require('fs');
const path = require('path');
const { OracleError, oneLine, readTensorFile, writeTensorFile, loadOrt, tensorProto, PROTO_PATH } =
  require('./tensor_pb.js');

// Graph optimizations are disabled: every ONNX node then runs as its own
// kernel, in the model's float32 arithmetic. The 'basic' level already folds
// BatchNormalization and Add/Mul into the preceding Conv's weights and the
// 'extended'/'all' levels fuse and re-layout (NCHWc) convolutions; each
// changes rounding, so a reference that used them would check ORT's
// rewrites rather than the model. One thread makes the results
// reproducible and shares the two cores fairly with parallel test jobs.
const SESSION_OPTIONS = {
  executionProviders: ['cpu'],
  graphOptimizationLevel: 'disabled',
  executionMode: 'sequential',
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  logSeverityLevel: 3, // errors only: warnings would break the one-line contract
};

function isDir(p) {
  try {
    return fs.statSync(p).isDirectory();
  } catch (e) {
    return false;
  }
}

function numberedFiles(dir, prefix) {
  const re = new RegExp(`^${prefix}_(\\d+)\\.pb$`);
  const out = [];
  for (const f of fs.readdirSync(dir)) {
    const m = re.exec(f);
    if (m) out.push(Number(m[1]));
  }
  return out;
}

async function check() {
  const ort = loadOrt();
  tensorProto();
  const pbVersion = require('protobufjs/package.json').version;
  // read_sharding.mjs's decoder of the newer ONNX schema.
  let bufVersion;
  try {
    await import('onnx-buf');
    bufVersion = require('onnx-buf/package.json').version;
  } catch (e) {
    throw new OracleError(`onnx-buf does not load (${oneLine(e.message)}): run scripts/setup-ort.sh`);
  }
  console.log(`onnxruntime-node ${ort.env.versions.node}, protobufjs ${pbVersion}, onnx-buf ${bufVersion}, node ${process.versions.node}, ${PROTO_PATH}`);
}

async function run(modelPath, inDir, outDir) {
  if (!fs.existsSync(modelPath)) throw new OracleError(`${modelPath}: no such model file`);
  if (!isDir(inDir)) throw new OracleError(`${inDir}: not a directory`);
  const ort = loadOrt();
  tensorProto();

  let session;
  try {
    session = await ort.InferenceSession.create(modelPath, SESSION_OPTIONS);
  } catch (e) {
    throw new OracleError(`${modelPath}: ONNX Runtime cannot load the model: ${oneLine(e.message)}`);
  }

  const names = session.inputNames;
  const feeds = {};
  for (let i = 0; i < names.length; i++) {
    const file = path.join(inDir, `input_${i}.pb`);
    const meta = session.inputMetadata && session.inputMetadata[i];
    if (meta && meta.isTensor === false)
      throw new OracleError(`${modelPath}: input '${names[i]}' is a sequence, map or optional: this harness feeds tensors only`);
    if (!fs.existsSync(file))
      throw new OracleError(`${file} is missing: the model's input ${i} is '${names[i]}'`);
    const t = readTensorFile(file);
    // ONNX's test data names each tensor after the input it feeds; a
    // different name means the files are in another order than the graph.
    if (t.name && t.name !== names[i])
      throw new OracleError(`${file}: tensor '${t.name}' given for the model's input ${i}, '${names[i]}'`);
    feeds[names[i]] = new ort.Tensor(t.dtype, t.data, t.dims);
  }
  const extra = numberedFiles(inDir, 'input').filter((n) => n >= names.length);
  if (extra.length)
    throw new OracleError(`${path.join(inDir, `input_${Math.min(...extra)}.pb`)}: the model takes only ${names.length} input(s)`);

  let results;
  try {
    results = await session.run(feeds);
  } catch (e) {
    throw new OracleError(`${modelPath}: ONNX Runtime run failed: ${oneLine(e.message)}`);
  }

  try {
    fs.mkdirSync(outDir, { recursive: true });
  } catch (e) {
    throw new OracleError(`${outDir}: cannot create (${e.code || oneLine(e.message)})`);
  }
  const outNames = session.outputNames;
  for (let j = 0; j < outNames.length; j++) {
    const t = results[outNames[j]];
    if (!t || typeof t.type !== 'string' || !t.dims)
      throw new OracleError(`${modelPath}: output '${outNames[j]}' is not a tensor`);
    writeTensorFile(path.join(outDir, `output_${j}.pb`), outNames[j], t);
  }
  for (const n of numberedFiles(outDir, 'output'))
    if (n >= outNames.length) fs.unlinkSync(path.join(outDir, `output_${n}.pb`));
  await session.release();
}

async function main(argv) {
  if (argv.length === 1 && argv[0] === '--check') return check();
  if (argv.length !== 3 || argv.some((a) => a.startsWith('-'))) {
    process.stderr.write('usage: run_ort.js MODEL.onnx INPUT_DIR OUTPUT_DIR | run_ort.js --check\n');
    process.exit(2);
  }
  return run(argv[0], argv[1], argv[2]);
}

main(process.argv.slice(2)).catch((e) => {
  const msg = e instanceof OracleError ? e.message : `internal error: ${oneLine(e && e.stack ? e.stack : e)}`;
  process.stderr.write(`run_ort: ${msg}\n`);
  process.exit(1);
});
