#!/usr/bin/env python3
"""Predicted against measured training step time on this host.

Measures the host first (`accparc calibrate`), then for each zoo model
compiles a training program for one and for two devices of it (every
strategy on two), runs each R times for S steps (in R rounds, one run of
every program of the model per round, so that a slow spell of the host
slows one run of each rather than every run of one), and prints the cost
model's
step time (the program's --report, predicted_step_time_s) beside the median
measured one (the report's step_time_s: from one step's loss to the next, as
the slowest device ran it), their ratio, and whether the strategies rank the
same by predicted and by measured time (pairs of plans the cost model tells
apart by more than 5%; equal plans are noise). For each two-device plan,
its speed-up over the one-device program, predicted and measured: the
measured one is the median over rounds of the one-device program's step
time over the plan's in the same round, so that the host's speed, which
drifts over minutes (docs/partition.md), cancels. Beside them, the busiest
device's CPU time per step (S steps less one step, start-up cancels), which
other processes on the cores barely change: on one device it is the step's
time; on several it leaves out the waits for messages. Last, each
one-device program's rows (the plan's table: a layer with the weightless
nodes it carries), predicted beside measured (the report's rows), where the
step's time goes and where the cost model misses it. Figures are
measurements of this machine, not assertions; nothing here is run by ctest.

Usage: bench/predict.py [--build DIR] [--batch N] [--steps S] [--runs R]
                        [--device-file F] [MODEL...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

STRATEGIES = ["dp", "owt", "hypar", "accpar"]
DEFAULT_MODELS = ["mlp", "lenet5", "resnet_block", "resnet_small", "inception_block",
                  "gpt2_tiny"]


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


class Program:
    """One compiled program's runs: its step times, the CPU time of a step of
    the busiest device (a run of `steps` steps less a run of one, so start-up
    cancels) and the predicted step time."""

    def __init__(self, exe, report):
        self.exe, self.report = exe, report
        self.times, self.cpu, self.predicted = [], [], None
        self.rounds = []  # the median step time of each run
        self.rows = {}    # node: (predicted, [a step's time on the busiest device, per run])

    def busiest_cpu(self, n):
        run([self.exe, "--steps", str(n), "--lr", "0.01", "--seed", "1",
             "--report", self.report])
        with open(self.report) as f:
            r = json.load(f)
        return max(r["cpu_time_s"]), r

    def measure_once(self, steps):
        c, r = self.busiest_cpu(steps)
        c1, r1 = self.busiest_cpu(1)
        self.times += r["step_time_s"]
        self.rounds.append(statistics.median(r["step_time_s"]))
        self.cpu.append((c - c1) / (steps - 1))
        self.predicted = r["predicted_step_time_s"]
        for row, row1 in zip(r["rows"], r1["rows"]):
            t = max(a - b for a, b in zip(row["time_s"], row1["time_s"])) / (steps - 1)
            self.rows.setdefault(row["node"], (row["predicted_step_s"], []))[1].append(t)

    def medians(self):
        return statistics.median(self.times), statistics.median(self.cpu), self.predicted


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)  # 2 or more
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device-file", help="use this device file instead of calibrating")
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    a = ap.parse_args()
    accparc = os.path.join(a.build, "tools", "accparc")
    zoo = os.path.join(a.build, "samples", "accpar-zoo")
    with tempfile.TemporaryDirectory() as work:
        dev = a.device_file
        if not dev:
            dev = os.path.join(work, "host.dev")
            subprocess.run([accparc, "calibrate", "-o", dev], check=True)
        with open(dev) as f:
            print("".join("    " + line for line in f))
        run([zoo, "--seed", "1", "--batch", str(a.batch), "-o", work] + a.models)
        print(f"batch {a.batch}, {a.runs} runs of {a.steps} steps; times in ms\n")
        print("| model | devices | strategy | predicted | measured | predicted/measured "
              "| busiest CPU | predicted/CPU |")
        print("|---|--:|---|--:|--:|--:|--:|--:|")
        rankings, speedups, row_lines = [], [], []
        report = os.path.join(work, "report.json")
        for m in a.models:
            programs = []
            for n, strategies in ((1, ["accpar"]), (2, STRATEGIES)):
                for s in strategies:
                    out = os.path.join(work, f"{m}.{n}.{s}")
                    run([accparc, "compile", os.path.join(work, m + ".onnx"), "--devices",
                         f"{dev}:{n}", "--strategy", s, "--mode", "train", "-o", out])
                    programs.append((n, s, Program(os.path.join(out, "model"), report)))
            for _ in range(a.runs):
                for _, _, prog in programs:
                    prog.measure_once(a.steps)
            rows = []
            for n, s, prog in programs:
                t, c, p = prog.medians()
                print(f"| {m} | {n} | {s if n > 1 else '-'} | {1e3 * p:.3f} | "
                      f"{1e3 * t:.3f} | {p / t:.2f} | {1e3 * c:.3f} | {p / c:.2f} |",
                      flush=True)
                if n == 2:
                    rows.append((s, p, t, c))
            one = programs[0][2]
            for node, (p, ts) in one.rows.items():
                t = statistics.median(ts)
                if max(p, t) >= 0.05 * one.predicted:
                    row_lines.append(f"| {m} | {node} | {1e3 * p:.3f} | {1e3 * t:.3f} | "
                                     f"{p / t:.2f} |" if t > 0 else f"| {m} | {node} | "
                                     f"{1e3 * p:.3f} | 0 | - |")
            for n, s, prog in programs[1:]:
                measured = statistics.median(a1 / a2 for a1, a2 in zip(one.rounds, prog.rounds))
                speedups.append((m, s, one.predicted / prog.predicted, measured))
            rankings.append((m, rows))
        print("\nTwo devices: the strategies fastest first by predicted and by measured time;"
              "\npairs: of the pairs of strategies whose predicted times differ by more than"
              "\n5%, how many the measured times (and the busiest device's CPU times) order"
              "\nthe same way.\n")
        print("| model | predicted | measured | pairs in the same order | by CPU |")
        print("|---|---|---|--:|--:|")
        for m, rows in rankings:
            by_p = " < ".join(r[0] for r in sorted(rows, key=lambda r: r[1]))
            by_t = " < ".join(r[0] for r in sorted(rows, key=lambda r: r[2]))
            agree = agree_cpu = total = 0
            for i in range(len(rows)):
                for j in range(i + 1, len(rows)):
                    (_, pi, ti, ci), (_, pj, tj, cj) = rows[i], rows[j]
                    if abs(pi - pj) > 0.05 * min(pi, pj):
                        total += 1
                        agree += (pi < pj) == (ti < tj)
                        agree_cpu += (pi < pj) == (ci < cj)
            print(f"| {m} | {by_p} | {by_t} | {agree}/{total} | {agree_cpu}/{total} |")
        print("\nTwo devices over one: the speed-up predicted, and measured as the median"
              "\nover rounds of the one-device step over the plan's in the same round.\n")
        print("| model | strategy | predicted | measured | predicted/measured |")
        print("|---|---|--:|--:|--:|")
        for m, s, p, t in speedups:
            print(f"| {m} | {s} | {p:.2f} | {t:.2f} | {p / t:.2f} |")
        print("\nOne device, by row of the plan's table (the report's rows: a row's steps,"
              "\nits chain's and its loss's included; measured as the CPU figure is, the"
              "\nmedian over runs); rows of at least 5% of the predicted step; in ms.\n")
        print("| model | row | predicted | measured | predicted/measured |")
        print("|---|---|--:|--:|--:|")
        print("\n".join(row_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
