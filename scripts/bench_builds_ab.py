#!/usr/bin/env python3
"""Two builds of accel, A and B, measured interleaved (A, B, A, B, ...) on the same sizes, so a machine
shared with others' builds slows both alike: `accel bench comm` busbw per collective and size, and
`accel bench launch` (launcher start until every worker is ready to train; its wall time and the CPU time
of the launcher and its workers). Prints medians and spreads
and writes one JSON. Used for issue 48 (the job secret and MACs): A the commit before the security
work, B today's.

    python3 scripts/bench_builds_ab.py --a /work/base/build/accel --b build/accel --label-a 59ab435 \
        --label-b main --pairs 9 --out docs/bench/job_secret_ab_cpu_2core_shared.json
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_json(accel, args, workdir):
    """The command's JSON and the CPU seconds it and its processes (launcher, workers) used."""
    out = os.path.join(workdir, "out.json")
    if os.path.exists(out):
        os.unlink(out)
    cpu = children_cpu_s()
    p = subprocess.run([accel, *args, "--json", out], cwd=workdir, capture_output=True, text=True, timeout=600)
    cpu = children_cpu_s() - cpu
    if p.returncode != 0:
        sys.exit(f"{accel} {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f), cpu


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
    start_cpu = {label: [] for label in builds}  # label -> [CPU ms of the whole bench launch]
    loads = []
    with tempfile.TemporaryDirectory(prefix="accel_ab_") as workdir:
        for pair in range(a.pairs):
            loads.append(os.getloadavg()[0])
            for label, accel in builds.items():
                for r in run_json(accel, comm_args, workdir)[0]["results"]:
                    key = f"{r['collective']} {int(r['size_bytes']) >> 20} MiB"
                    busbw[label].setdefault(key, []).append(r["busbw_gbps"])
                launched, cpu = run_json(accel, launch_args, workdir)
                ready[label].append(launched["slowest_ready_ms"])
                start_cpu[label].append(cpu * 1000)
            print(f"pair {pair + 1}/{a.pairs}: ready ms " +
                  ", ".join(f"{label} {ready[label][-1]:.1f}" for label in builds), flush=True)
            time.sleep(0.2)

    la, lb = a.label_a, a.label_b
    summary = {"busbw_gbps": {}, "ready_ms": {la: spread(ready[la]), lb: spread(ready[lb])}}
    # The paired difference (B - A within a pair) cancels the load both saw in that pair.
    summary["ready_ms"]["b_minus_a_per_pair"] = spread([y - x for x, y in zip(ready[la], ready[lb])])
    # CPU time is less sensitive than wall time to what else the machine runs.
    summary["start_cpu_ms"] = {la: spread(start_cpu[la]), lb: spread(start_cpu[lb]),
                               "b_minus_a_per_pair": spread([y - x for x, y in zip(start_cpu[la], start_cpu[lb])])}
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
        "raw": {"busbw_gbps": busbw, "ready_ms": ready, "start_cpu_ms": start_cpu},
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    r, d = summary["ready_ms"], summary["ready_ms"]["b_minus_a_per_pair"]
    print(f"ready ms median {la} {r[la]['median']:.1f}, {lb} {r[lb]['median']:.1f}; per-pair {lb}-{la} median "
          f"{d['median']:+.1f} ms (min {d['min']:+.1f}, max {d['max']:+.1f})")
    c = summary["start_cpu_ms"]
    print(f"start CPU ms median {la} {c[la]['median']:.0f}, {lb} {c[lb]['median']:.0f}; per-pair {lb}-{la} median "
          f"{c['b_minus_a_per_pair']['median']:+.0f} ms (min {c['b_minus_a_per_pair']['min']:+.0f}, "
          f"max {c['b_minus_a_per_pair']['max']:+.0f})")
    for key, s in summary["busbw_gbps"].items():
        print(f"{key:24s} busbw median {la} {s[la]['median']:.2f} [{s[la]['min']:.2f}, {s[la]['max']:.2f}]  "
              f"{lb} {s[lb]['median']:.2f} [{s[lb]['min']:.2f}, {s[lb]['max']:.2f}]  "
              f"{lb}/{la} per pair median {s['b_over_a_per_pair']['median']:.3f} "
              f"[{s['b_over_a_per_pair']['min']:.3f}, {s['b_over_a_per_pair']['max']:.3f}]")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
