#!/usr/bin/env python3
"""bench/e2e.py: whole-model speed of accparc's programs, measured in one run.

For each model of the zoo (seeded weights, a seeded input):
  * one thread: the 1-device inference program at batch 1 (--repeat N, warm)
    beside ONNX Runtime on the same model and input (tests/ort: all graph
    optimizations, one intra-op and one inter-op thread), the two sides
    alternating round by round so drift in the machine's speed hits both;
  * two devices of this host over one: inference at batch 8 (--repeat) and a
    training step at batch 8 (the runtime's step_time_s: one whole step as
    the slowest device ran it), with bytes_sent == predicted_bytes checked.
Every figure is the median over all timed runs of all rounds; "noise" is the
interquartile range over the median. Prints markdown for docs/.

  bench/e2e.py [--build DIR] [--models resnet50,vgg11,lenet5,gpt2] [--seq 128]
               [--rounds R] [--repeat N] [--steps S] [--scaling-batch B]
               [--no-ort] [--no-scaling] [--no-one-thread] [--unfused] [--work DIR]

--unfused also times, in the same rounds, the one-thread program compiled
with ACCPAR_NO_FUSION=1 (codegen/fuse.c off): fusion's effect, measured
under the same load.

A benchmark, not a test: nothing here asserts a speed. Needs the build's
accparc and accpar-zoo, and scripts/setup-ort.sh for the ONNX Runtime side.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"e2e: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], statistics.median(xs), xs[-1]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def summary(xs):
    lo, med, hi = quartiles(xs)
    return {"median": med, "noise": (hi - lo) / med if med > 0 else 0.0, "min": min(xs), "n": len(xs)}


def read_floats(pb):
    """The float32 raw_data of a TensorProto written by accparc or ORT (the
    only field the outputs use): enough for a max-difference check."""
    data = open(pb, "rb").read()
    i, raw = 0, b""
    while i < len(data):
        key = 0
        shift = 0
        while True:
            b = data[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        field, wire = key >> 3, key & 7
        if wire == 0:
            while data[i] & 0x80:
                i += 1
            i += 1
        elif wire == 2:
            n = 0
            shift = 0
            while True:
                b = data[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            if field == 9:  # raw_data
                raw = data[i:i + n]
            i += n
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"{pb}: wire type {wire}")
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def max_diff(a_pb, b_pb):
    a, b = read_floats(a_pb), read_floats(b_pb)
    scale = max(abs(v) for v in b) or 1.0
    d = max(abs(x - y) for x, y in zip(a, b))
    return d, d / scale


class Bench:
    def __init__(self, args):
        self.a = args
        self.zoo = os.path.join(args.build, "samples", "accpar-zoo")
        self.accparc = os.path.join(args.build, "tools", "accparc")
        self.work = args.work or tempfile.mkdtemp(prefix="accpar-e2e-")
        self.ort_js = os.path.join(ROOT, "bench", "e2e_ort.js")

    def model(self, name, batch):
        d = os.path.join(self.work, f"b{batch}")
        onnx = os.path.join(d, f"{name}.onnx")
        if not os.path.exists(onnx):
            os.makedirs(d, exist_ok=True)
            run([self.zoo, "--seed", "1", "--batch", str(batch), "--seq", str(self.a.seq), "--inputs",
                 "-o", d, name])
        return onnx, os.path.join(d, f"{name}_data")

    def compile(self, onnx, devices, mode, tag, env=None):
        out = os.path.join(self.work, tag)
        if not os.path.exists(os.path.join(out, "model")):
            run([self.accparc, "compile", onnx, "--devices", devices, "--mode", mode, "-o", out],
                env=dict(os.environ, **(env or {})))
        return os.path.join(out, "model")

    def ours(self, prog, inputs, extra, report):
        cmd = [prog, "--report", report] + extra
        if inputs:
            cmd += ["--inputs", inputs]
        run(cmd)
        r = json.load(open(report))
        if r["bytes_sent"] != r["predicted_bytes"]:
            sys.exit(f"e2e: {prog}: bytes_sent {r['bytes_sent']} != predicted {r['predicted_bytes']}")
        return r

    def one_thread(self, name):
        onnx, data = self.model(name, 1)
        prog = self.compile(onnx, "cpu:1", "infer", f"{name}.infer1")
        unfused_prog = self.compile(onnx, "cpu:1", "infer", f"{name}.infer1.unfused",
                                    {"ACCPAR_NO_FUSION": "1"}) if self.a.unfused else None
        rep = os.path.join(self.work, "r.json")
        ours, theirs, unfused = [], [], []
        cpu, unfused_cpu, ort_cpu = [], [], []
        outs = os.path.join(self.work, f"{name}.out")
        orts = os.path.join(self.work, f"{name}.ortout")
        os.makedirs(outs, exist_ok=True)
        for _ in range(self.a.rounds):
            r = self.ours(prog, data, ["--repeat", str(self.a.repeat), "--outputs", outs], rep)
            ours += r["run_time_s"]
            cpu.append(r["cpu_time_s"][0] / self.a.repeat)
            if unfused_prog:
                r = self.ours(unfused_prog, data, ["--repeat", str(self.a.repeat)], rep)
                unfused += r["run_time_s"]
                unfused_cpu.append(r["cpu_time_s"][0] / self.a.repeat)
            if not self.a.no_ort:
                o = json.loads(run(["node", self.ort_js, onnx, data, str(self.a.repeat), orts]))
                theirs += o["run_time_s"]
                ort_cpu.append(o["cpu_time_s"] / self.a.repeat)
        row = {"model": name, "ours": summary(ours), "cpu": statistics.median(cpu)}
        if unfused:
            row["unfused"] = summary(unfused)
            row["unfused_cpu"] = statistics.median(unfused_cpu)
        if theirs:
            row["ort"] = summary(theirs)
            row["ort_cpu"] = statistics.median(ort_cpu)
            row["diff"] = max_diff(os.path.join(outs, "output_0.pb"), os.path.join(orts, "output_0.pb"))
        return row

    def scaling(self, name, batch):
        onnx, data = self.model(name, batch)
        rep = os.path.join(self.work, "r.json")
        res = {}
        for mode in ("infer", "train"):
            progs = {d: self.compile(onnx, f"cpu:{d}", mode, f"{name}.{mode}{d}.b{batch}") for d in (1, 2)}
            times = {1: [], 2: []}
            cpu = {1: [], 2: []}  # per round: each device's CPU seconds per run or step
            for _ in range(self.a.rounds):
                for d in (1, 2):
                    if mode == "infer":
                        r = self.ours(progs[d], data, ["--repeat", str(self.a.repeat)], rep)
                        times[d] += r["run_time_s"]
                        per = self.a.repeat
                    else:
                        r = self.ours(progs[d], None, ["--steps", str(self.a.steps), "--lr", "0.001"], rep)
                        times[d] += r["step_time_s"]
                        per = self.a.steps
                    cpu[d].append([t / per for t in r["cpu_time_s"]])
            res[mode] = {d: summary(times[d]) for d in (1, 2)}
            # Load-independent view: CPU per device (blocked waits cost none).
            one = statistics.median(c[0] for c in cpu[1])
            busiest = statistics.median(max(c) for c in cpu[2])
            total = statistics.median(sum(c) for c in cpu[2])
            res[mode]["cpu"] = {"one": one, "bound": one / busiest, "work": total / one}
        return res


def ms(s):
    v = s["median"] * 1e3
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def pct(s):
    return f"{s['noise'] * 100:.0f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="resnet50,vgg11,lenet5,gpt2")
    ap.add_argument("--seq", type=int, default=128, help="tokens of the language models (gpt2)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--scaling-batch", type=int, default=8)
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--no-one-thread", action="store_true")
    ap.add_argument("--unfused", action="store_true")
    ap.add_argument("--work")
    a = ap.parse_args()
    b = Bench(a)
    listed = run([b.zoo, "--list"]).split()
    models, missing = [], []
    for m in a.models.split(","):
        (models if m in listed else missing).append(m)

    load0 = os.getloadavg()
    t0 = time.time()
    rows = [] if a.no_one_thread else [b.one_thread(m) for m in models]
    scale = {} if a.no_scaling else {m: b.scaling(m, a.scaling_batch) for m in models}
    load1 = os.getloadavg()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                            text=True).stdout.strip()
    print(f"bench/e2e.py {' '.join(sys.argv[1:])}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}, commit {commit}, {cpu}, "
          f"{os.cpu_count()} cores, {platform.release()}; load average {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f} at the start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end; "
          f"{time.time() - t0:.0f} s")
    if missing:
        print(f"not in this build's zoo (skipped): {', '.join(missing)}")
    if rows:
        print(f"\nOne thread, batch 1: median of {a.rounds} rounds x {a.repeat} warm runs; noise = "
              "interquartile range / median\n")
        print("CPU ms: the median over rounds of each side's CPU time per run (accparc: the "
              "report's cpu_time_s; ONNX Runtime: the node process's), steadier than wall "
              "times on a loaded machine\n")
        print("| model | accparc ms | noise | ONNX Runtime ms | noise | accparc / ORT | accparc CPU ms | "
              "ORT CPU ms | CPU ratio | max abs diff (rel) |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        if "ort" in r:
            d = r["diff"]
            print(f"| {r['model']} | {ms(r['ours'])} | {pct(r['ours'])} | {ms(r['ort'])} | {pct(r['ort'])} | "
                  f"{r['ours']['median'] / r['ort']['median']:.2f} | {r['cpu'] * 1e3:.3g} | "
                  f"{r['ort_cpu'] * 1e3:.3g} | {r['cpu'] / r['ort_cpu']:.2f} | {d[0]:.1e} ({d[1]:.1e}) |")
        else:
            print(f"| {r['model']} | {ms(r['ours'])} | {pct(r['ours'])} | - | - | - | "
                  f"{r['cpu'] * 1e3:.3g} | - | - | - |")
    if any("unfused" in r for r in rows):
        print("\nThe same rounds: fused (the default) against unfused (ACCPAR_NO_FUSION=1), "
              "wall and the program thread's CPU time per run\n")
        print("| model | fused ms | noise | unfused ms | noise | fused / unfused | fused CPU ms | "
              "unfused CPU ms |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            u = r["unfused"]
            print(f"| {r['model']} | {ms(r['ours'])} | {pct(r['ours'])} | {ms(u)} | {pct(u)} | "
                  f"{r['ours']['median'] / u['median']:.2f} | {r['cpu'] * 1e3:.3g} | "
                  f"{r['unfused_cpu'] * 1e3:.3g} |")
    if scale:
        print(f"\nTwo devices (threads) over one, batch {a.scaling_batch}, default strategy (accpar): "
              f"inference median of {a.rounds} x {a.repeat} runs, training median of {a.rounds} x "
              f"{a.steps - 1} steps (step_time_s)\n")
        print("| model | infer 1 dev ms | infer 2 dev ms | speedup | noise 1/2 | train step 1 dev ms | "
              "train step 2 dev ms | speedup | noise 1/2 |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for m, s in scale.items():
            i, t = s["infer"], s["train"]
            print(f"| {m} | {ms(i[1])} | {ms(i[2])} | {i[1]['median'] / i[2]['median']:.2f} | "
                  f"{pct(i[1])}/{pct(i[2])} | {ms(t[1])} | {ms(t[2])} | "
                  f"{t[1]['median'] / t[2]['median']:.2f} | {pct(t[1])}/{pct(t[2])} |")
        print("\nThe same runs by CPU time (each device's thread clock; waiting blocked costs none, so "
              "this does not depend on what else the machine runs): 'work' = the 2 devices' CPU over "
              "1 device's (what splitting adds), 'bound' = 1 device's CPU over the busiest device's "
              "(the speedup if each device had a core of its own and never waited)\n")
        print("| model | infer CPU ms (1 dev) | work | bound | train CPU ms per step (1 dev) | work | bound |")
        print("|---|--:|--:|--:|--:|--:|--:|")
        for m, s in scale.items():
            i, t = s["infer"]["cpu"], s["train"]["cpu"]
            print(f"| {m} | {i['one'] * 1e3:.3g} | {i['work']:.2f} | {i['bound']:.2f} | "
                  f"{t['one'] * 1e3:.3g} | {t['work']:.2f} | {t['bound']:.2f} |")
    if not a.work:
        shutil.rmtree(b.work, ignore_errors=True)


if __name__ == "__main__":
    main()
