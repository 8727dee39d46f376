// Decodes an ONNX file with ONNX 1.20's schema (npm onnx-buf, generated
// from onnx.proto by @bufbuild/protobuf: an implementation independent of
// accpar's protobuf-c and of the system's ONNX 1.12 schema) and prints its
// multi-device annotations as JSON, with each sharding expanded into the box
// every device holds, following ONNX's rules (docs/proposals/
// ONNXMultiDeviceProposal.md): shards in row-major order over the sharded
// axes, each axis split evenly, a device entry that is a key of
// index_to_device_group_map standing for every device of its group.
//
//   node tests/ort/read_sharding.mjs MODEL.onnx [--against PLAN.json]
//
// Prints {ir_version, configurations, metadata, nodes: [{name, configurations:
// [{configuration_id, specs: [{tensor, device, groups, dims, boxes}]}]}]}
// where boxes[d] is [[lo, hi] per axis] or null for a device holding none.
// Exits 1 with one line on stderr for a spec that breaks those rules.
//
// With --against, the output of `accparc plan --format json` for the same
// model and array, it also checks the annotations against the plan: IR
// version 11, one configuration naming the plan's devices in order, every
// node either annotated or listed in metadata 'accpar.sharding_unexpressed'
// (never both), and for every annotated node the output's boxes equal the
// plan's per-device boxes (a device with an empty box holds nothing). It
// then prints "checked N annotated nodes, M unexpressed" instead.
import { readFileSync } from "node:fs";
import { fromBinary } from "@bufbuild/protobuf";
import { ModelProtoSchema } from "onnx-buf";

function fail(msg) {
  process.stderr.write(`read_sharding: ${msg}\n`);
  process.exit(1);
}

const path = process.argv[2];
if (!path) fail("usage: node read_sharding.mjs MODEL.onnx");
const model = fromBinary(ModelProtoSchema, readFileSync(path));
const graph = model.graph;

// Shapes of every tensor the file declares.
const shapes = new Map();
const dimsOf = (t) =>
  t?.tensorType?.shape?.dim.map((d) => (d.value.case === "dimValue" ? Number(d.value.value) : -1));
for (const vi of [...graph.input, ...graph.output, ...graph.valueInfo]) {
  const dims = vi.type?.value?.case === "tensorType" ? dimsOf({ tensorType: vi.type.value.value }) : undefined;
  if (dims) shapes.set(vi.name, dims);
}
for (const t of graph.initializer) shapes.set(t.name, t.dims.map(Number));

const nDevices = model.configuration.length ? model.configuration[0].numDevices : 0;

function expand(spec) {
  const dims = shapes.get(spec.tensorName);
  if (!dims) fail(`tensor '${spec.tensorName}' has no declared shape`);
  const groups = new Map(spec.indexToDeviceGroupMap.map((e) => [Number(e.key), e.value.map(Number)]));
  const sharded = spec.shardedDim.map((sd) => {
    if (sd.simpleSharding.length !== 1) fail(`${spec.tensorName}: axis ${sd.axis} has ${sd.simpleSharding.length} simple shardings`);
    const ss = sd.simpleSharding[0];
    const axis = Number(sd.axis), k = Number(ss.numShards);
    if (ss.dim.case === "dimValue" && Number(ss.dim.value) !== dims[axis])
      fail(`${spec.tensorName}: axis ${axis} dim_value ${ss.dim.value} is not the tensor's ${dims[axis]}`);
    if (dims[axis] % k) fail(`${spec.tensorName}: axis ${axis} of ${dims[axis]} does not split evenly in ${k}`);
    return { axis, k };
  });
  const nShards = sharded.reduce((n, s) => n * s.k, 1);
  if (spec.device.length !== nShards) fail(`${spec.tensorName}: ${spec.device.length} device entries for ${nShards} shards`);
  const boxes = Array(nDevices).fill(null);
  spec.device.forEach((entry, c) => {
    const box = dims.map((n) => [0, n]);
    let rest = c;
    for (let i = sharded.length - 1; i >= 0; i--) {
      const { axis, k } = sharded[i];
      const w = dims[axis] / k, idx = rest % k;
      rest = Math.floor(rest / k);
      box[axis] = [idx * w, (idx + 1) * w];
    }
    const e = Number(entry);
    const devs = groups.has(e) ? groups.get(e) : [e];
    for (const d of devs) {
      if (d < 0 || d >= nDevices) fail(`${spec.tensorName}: device ${d} outside the configuration`);
      if (boxes[d]) fail(`${spec.tensorName}: device ${d} holds two shards`);
      boxes[d] = box;
    }
  });
  return {
    tensor: spec.tensorName,
    device: spec.device.map(Number),
    groups: Object.fromEntries([...groups].map(([k, v]) => [k, v])),
    dims: spec.shardedDim.map((sd) => ({
      axis: Number(sd.axis),
      dim_value: Number(sd.simpleSharding[0].dim.value),
      num_shards: Number(sd.simpleSharding[0].numShards),
    })),
    boxes,
  };
}

const out = {
  ir_version: Number(model.irVersion),
  configurations: model.configuration.map((c) => ({ name: c.name, num_devices: c.numDevices, devices: c.device })),
  metadata: Object.fromEntries(model.metadataProps.map((e) => [e.key, e.value])),
  nodes: graph.node.map((n) => ({
    name: n.name,
    configurations: n.deviceConfigurations.map((dc) => ({
      configuration_id: dc.configurationId,
      specs: dc.shardingSpec.map(expand),
    })),
  })),
};
delete out.metadata["accpar.plan"]; // the plan's own JSON: --against reads it from `plan`

const againstAt = process.argv.indexOf("--against");
if (againstAt < 0) {
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

const plan = JSON.parse(readFileSync(process.argv[againstAt + 1], "utf8"));
if (out.ir_version !== 11) fail(`ir_version ${out.ir_version}, not 11`);
if (out.configurations.length !== 1) fail(`${out.configurations.length} configurations`);
const conf = out.configurations[0];
const planDevices = plan.devices.flatMap((k) => Array(k.count).fill(k.kind)).map((k, i) => `${k}:${i}`);
if (conf.num_devices !== plan.n_devices || JSON.stringify(conf.devices) !== JSON.stringify(planDevices))
  fail(`configuration ${JSON.stringify(conf)} is not the plan's ${JSON.stringify(planDevices)}`);
const unexpressed = new Set((out.metadata["accpar.sharding_unexpressed"] ?? "").split(",").filter((s) => s));
const byName = new Map(out.nodes.map((n) => [n.name, n]));
const emptyBox = (b) => b.some(([lo, hi]) => hi <= lo);
let checked = 0;
for (const pn of plan.nodes) {
  const n = byName.get(pn.name);
  if (!n) fail(`plan node '${pn.name}' is not in the file`);
  if (unexpressed.has(pn.name)) {
    if (n.configurations.length) fail(`node '${pn.name}' is annotated and listed as unexpressed`);
    continue;
  }
  if (n.configurations.length !== 1 || n.configurations[0].configuration_id !== conf.name)
    fail(`node '${pn.name}' has ${n.configurations.length} configurations and is not listed as unexpressed`);
  const spec = n.configurations[0].specs.find((sp) => sp.tensor === pn.output);
  if (!spec) fail(`node '${pn.name}': no sharding of its output '${pn.output}'`);
  pn.boxes.forEach((want, d) => {
    const got = spec.boxes[d];
    const same = emptyBox(want) ? got === null : JSON.stringify(got) === JSON.stringify(want);
    if (!same)
      fail(`node '${pn.name}' output '${pn.output}' device ${d}: annotation ${JSON.stringify(got)}, plan ${JSON.stringify(want)}`);
  });
  checked++;
}
for (const name of unexpressed)
  if (!plan.nodes.some((pn) => pn.name === name) && !byName.has(name)) fail(`unexpressed node '${name}' does not exist`);
process.stdout.write(`checked ${checked} annotated nodes, ${unexpressed.size} unexpressed\n`);
