#!/usr/bin/env node
'use strict';
// The ONNX Runtime side of bench/e2e.sh: one model on one input, the way a
// user would deploy it on one core (all graph optimizations, one intra-op
// and one inter-op thread), one warm-up run, then N timed runs.
//
//   node bench/e2e_ort.js MODEL.onnx INPUT_DIR N [OUTPUT_DIR]
//
// Prints {"run_time_s": [...], "cpu_time_s": T} (each run's wall time:
// session.run on tensors already built, as accparc's --repeat times its runs
// on inputs already read; T: the process's user and system CPU time over
// the N runs, comparable with accparc's report's cpu_time_s when the machine
// is loaded and wall times are not); OUTPUT_DIR receives the outputs of the
// last run. Uses the ONNX
// Runtime that scripts/setup-ort.sh installs under tests/ort.

const path = require('path');
const { readTensorFile, writeTensorFile, loadOrt, tensorProto, oneLine } =
  require(path.join(__dirname, '..', 'tests', 'ort', 'tensor_pb.js'));

async function main(argv) {
  if (argv.length < 3 || argv.length > 4 || !(Number(argv[2]) >= 1)) {
    process.stderr.write('usage: e2e_ort.js MODEL.onnx INPUT_DIR N [OUTPUT_DIR]\n');
    process.exit(2);
  }
  const [model, inDir, n, outDir] = argv;
  const ort = loadOrt();
  tensorProto();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    logSeverityLevel: 3,
  });
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const t = readTensorFile(path.join(inDir, `input_${i}.pb`));
    feeds[name] = new ort.Tensor(t.dtype, t.data, t.dims);
  });
  let results = await session.run(feeds);
  const times = [];
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < Number(n); i++) {
    const t0 = process.hrtime.bigint();
    results = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) * 1e-9);
  }
  const cpu = process.cpuUsage(cpu0);
  if (outDir) {
    require('fs').mkdirSync(outDir, { recursive: true });
    session.outputNames.forEach((name, j) =>
      writeTensorFile(path.join(outDir, `output_${j}.pb`), name, results[name]));
  }
  process.stdout.write(JSON.stringify({ run_time_s: times, cpu_time_s: (cpu.user + cpu.system) * 1e-6 }) + '\n');
  await session.release();
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`e2e_ort: ${oneLine(e && e.message ? e.message : e)}\n`);
  process.exit(1);
});
