#!/usr/bin/env python3
"""Two builds of accel, A and B, measured interleaved (A, B, A, B, ...) on the same sizes, so a machine
shared with others' builds slows both alike: `accel bench comm` busbw per collective and size, and
`accel bench launch` (launcher start until every worker is ready to train). Prints medians and spreads
and writes one JSON. Used for issue 48 (the job secret and MACs): A the commit before the security
work, B today's.

    python3 scripts/bench_builds_ab.py --a /work/base/build/accel --b build/accel --label-a 59ab435 \
        --label-b main --pairs 9 --out docs/bench/job_secret_ab_cpu_2core_shared.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def run_json(accel, args, workdir):
    out = os.path.join(workdir, "out.json")
    if os.path.exists(out):
        os.unlink(out)
    p = subprocess.run([accel, *args, "--json", out], cwd=workdir, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{accel} {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def spread(values):
    s = sorted(values)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "n": len(s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the accel binary of build A")
    ap.add_argument("--b", required=True, help="the accel binary of build B")
    ap.add_argument("--label-a", default="a")
    ap.add_argument("--label-b", default="b")
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--where", default="", help="what the machine was doing, for the JSON")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    comm_args = ["bench", "comm", "--set", f"num_processes={a.processes}", "--min-bytes", str(a.min_bytes),
                 "--max-bytes", str(a.max_bytes), "--iters", str(a.iters)]
    launch_args = ["bench", "launch", "--set", f"num_processes={a.processes}"]
    builds = {a.label_a: a.a, a.label_b: a.b}
    busbw = {label: {} for label in builds}   # label -> "collective size" -> [GB/s per pair]
    ready = {label: [] for label in builds}   # label -> [slowest rank's ready time, ms]
    loads = []
    with tempfile.TemporaryDirectory(prefix="accel_ab_") as workdir:
        for pair in range(a.pairs):
            loads.append(os.getloadavg()[0])
            for label, accel in builds.items():
                for r in run_json(accel, comm_args, workdir)["results"]:
                    key = f"{r['collective']} {int(r['size_bytes']) >> 20} MiB"
                    busbw[label].setdefault(key, []).append(r["busbw_gbps"])
                ready[label].append(run_json(accel, launch_args, workdir)["slowest_ready_ms"])
            print(f"pair {pair + 1}/{a.pairs}: ready ms " +
                  ", ".join(f"{label} {ready[label][-1]:.1f}" for label in builds), flush=True)
            time.sleep(0.2)

    la, lb = a.label_a, a.label_b
    summary = {"busbw_gbps": {}, "ready_ms": {la: spread(ready[la]), lb: spread(ready[lb])}}
    # The paired difference (B - A within a pair) cancels the load both saw in that pair.
    summary["ready_ms"]["b_minus_a_per_pair"] = spread([y - x for x, y in zip(ready[la], ready[lb])])
    for key in busbw[la]:
        ratios = [y / x for x, y in zip(busbw[la][key], busbw[lb][key])]
        summary["busbw_gbps"][key] = {la: spread(busbw[la][key]), lb: spread(busbw[lb][key]),
                                      "b_over_a_per_pair": spread(ratios)}
    record = {
        "what": (f"accel bench comm ({' '.join(comm_args[2:])}) busbw and accel bench launch (slowest rank's "
                 f"ready time) of two builds, interleaved A,B per pair, {a.pairs} pairs"),
        "where": a.where or f"{platform.node()}, {os.cpu_count()} CPUs",
        "a": {"label": la, "binary": a.a}, "b": {"label": lb, "binary": a.b},
        "load_average_1min_per_pair": loads,
        "summary": summary,
        "raw": {"busbw_gbps": busbw, "ready_ms": ready},
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"ready ms median {la} {summary['ready_ms'][la]['median']:.1f}, {lb} {summary['ready_ms'][lb]['median']:.1f}; "
          f"per-pair {lb}-{la} median {summary['ready_ms']['b_minus_a_per_pair']['median']:+.1f} ms "
          f"(min {summary['ready_ms']['b_minus_a_per_pair']['min']:+.1f}, max {summary['ready_ms']['b_minus_a_per_pair']['max']:+.1f})")
    for key, s in summary["busbw_gbps"].items():
        print(f"{key:24s} busbw median {la} {s[la]['median']:.2f} [{s[la]['min']:.2f}, {s[la]['max']:.2f}]  "
              f"{lb} {s[lb]['median']:.2f} [{s[lb]['min']:.2f}, {s[lb]['max']:.2f}]  "
              f"{lb}/{la} per pair median {s['b_over_a_per_pair']['median']:.3f} "
              f"[{s['b_over_a_per_pair']['min']:.3f}, {s['b_over_a_per_pair']['max']:.3f}]")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
