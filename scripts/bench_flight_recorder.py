#!/usr/bin/env python3
"""Benchmark: what the collective flight recorder (docs/design/0025) costs per op.

1. build/tests/comm/bench_flight_recorder: a ring's own work per op (issue, start, finish), and an
   OpQueue round trip (a no-op submitted and waited for) with and without a ring, in one process.
2. `accel bench comm` at --world ranks on this machine (Gloo, shared memory), sizes 8 B to 512 B,
   alternately with recording off (ACCEL_FLIGHT_RECORDER=0) and on, --repeat times each: the median
   per-op time of each collective and size.
Prints a markdown table and writes --json. It asserts nothing; small ops on a shared machine are
noisy, so compare the ring's own cost with the spread of the round trips.

  scripts/python scripts/bench_flight_recorder.py --repeat 5 --json /tmp/bench_flight.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def bench_comm(accel: str, d: str, world: int, iters: int, recording: bool, n: int) -> dict:
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(f"num_processes: {world}\ndevice: cpu\nmain_process_port: 0\ntraining: {{output_dir: {d}/run}}\n")
    out = os.path.join(d, f"comm_{'on' if recording else 'off'}_{n}.json")
    env = dict(os.environ)
    env.pop("ACCEL_FLIGHT_RECORDER", None)
    if not recording:
        env["ACCEL_FLIGHT_RECORDER"] = "0"
    subprocess.run([accel, "bench", "comm", job, "--min-bytes", "8", "--max-bytes", "512", "--iters", str(iters),
                    "--json", out], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return {(r["collective"], int(r["size_bytes"])): r["time_us"] for r in json.load(f)["results"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=2000, help="timed ops per size in each accel bench comm run")
    ap.add_argument("--repeat", type=int, default=3, help="accel bench comm runs with recording off and on, alternately")
    ap.add_argument("--json", help="where to write the figures")
    a = ap.parse_args()

    micro = json.loads(subprocess.run([os.path.join(a.build, "tests", "comm", "bench_flight_recorder")],
                                      check=True, capture_output=True, text=True).stdout)
    runs = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="accel_bench_flight_") as d:
        for n in range(a.repeat):
            for recording in (False, True):
                runs[recording].append(bench_comm(os.path.join(a.build, "accel"), d, a.world, a.iters, recording, n))
    rows = []
    for key in sorted(runs[True][0]):
        off = statistics.median(r[key] for r in runs[False])
        on = statistics.median(r[key] for r in runs[True])
        rows.append({"collective": key[0], "size_bytes": key[1], "off_us": off, "on_us": on,
                     "off_spread_us": [min(r[key] for r in runs[False]), max(r[key] for r in runs[False])]})

    print(f"flight recorder cost: a ring's own work {micro['ring_ns_per_op']:.0f} ns per op; an OpQueue round trip "
          f"{micro['queue_round_trip_us_recording_off']:.2f} us without a ring, "
          f"{micro['queue_round_trip_us_recording_on']:.2f} us with one (medians of {micro['rounds']} rounds)\n")
    print(f"accel bench comm, world {a.world}, {a.iters} ops per size, median of {a.repeat} runs each (us per op):\n")
    print("| collective | size (B) | recording off | recording on | off: min-max over runs |")
    print("|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["off_spread_us"]
        print(f"| {r['collective']} | {r['size_bytes']} | {r['off_us']:.1f} | {r['on_us']:.1f} | {lo:.1f}-{hi:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"micro": micro, "world": a.world, "iters": a.iters, "repeat": a.repeat, "bench_comm": rows}, f,
                      indent=2)
            f.write("\n")
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
