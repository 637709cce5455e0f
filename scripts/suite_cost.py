#!/usr/bin/env python3
"""What each ctest entry costs: CPU seconds (every process it starts, namespaces included) and wall.

Each entry runs alone inside its own cgroup (cgroup v2, or v1's cpuacct), `--jobs` at a time, so a
figure does not depend on what else the machine does the way wall time does. Root is needed to make
cgroups. Writes a JSON benchmark (docs/bench/suite_cost_*.json by convention) and prints the costliest
entries and the sums: the suite's wall at -jN cannot be below its CPU seconds / cores.

  sudo scripts/python scripts/suite_cost.py --build build --jobs 2 --out docs/bench/suite_cost_cpu_2core.json
"""
import argparse
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import time

V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/cpuacct"


def cgroup_base():
    if os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
        return V2_ROOT, "v2"
    if os.path.isdir(V1_ROOT):
        return V1_ROOT, "v1"
    sys.exit("suite_cost: no cgroup v2 or v1 cpuacct hierarchy under /sys/fs/cgroup")


def cpu_seconds(group, kind):
    if kind == "v2":
        with open(os.path.join(group, "cpu.stat")) as f:
            for line in f:
                key, value = line.split()
                if key == "usage_usec":
                    return int(value) / 1e6
        raise RuntimeError(f"no usage_usec in {group}/cpu.stat")
    with open(os.path.join(group, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def run_entry(name, build, base, kind, index):
    group = os.path.join(base, f"accel_suite_cost_{os.getpid()}_{index}")
    os.makedirs(group, exist_ok=True)
    pattern = "^" + "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in name) + "$"
    # The shell joins the group, then becomes ctest: every process of the entry starts inside it.
    script = f'echo $$ > "{group}/cgroup.procs" && exec ctest --test-dir "{build}" -R "$0"'
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", script, pattern], capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu = cpu_seconds(group, kind)
    try:
        os.rmdir(group)
    except OSError:  # a process the entry left behind still lives in it
        pass
    skipped = "Skipped" in proc.stdout or "Not Run" in proc.stdout
    status = "skipped" if skipped else ("passed" if proc.returncode == 0 else "failed")
    return {"name": name, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "status": status}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--regex", default="", help="only the entries whose name matches (ctest -R)")
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args()
    base, kind = cgroup_base()
    listing = subprocess.run(["ctest", "--test-dir", args.build, "-N"] + (["-R", args.regex] if args.regex else []),
                             capture_output=True, text=True, check=True).stdout
    names = [line.split(":", 1)[1].strip() for line in listing.splitlines() if line.strip().startswith("Test")
             and "#" in line]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda item: run_entry(item[1], args.build, base, kind, item[0]), enumerate(names)))
    total_wall = time.monotonic() - started
    rows.sort(key=lambda r: -r["cpu_s"])
    summary = {
        "entries": len(rows),
        "cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
        "entry_wall_s": round(sum(r["wall_s"] for r in rows), 1),
        "wall_s": round(total_wall, 1),
        "jobs": args.jobs,
        "failed": [r["name"] for r in rows if r["status"] == "failed"],
    }
    for r in rows[:25]:
        print(f"{r['cpu_s']:8.2f} cpu-s {r['wall_s']:8.2f} s  {r['status']:7s} {r['name']}")
    print(f"{summary['entries']} entries: {summary['cpu_s']} cpu-s, entries' wall {summary['entry_wall_s']} s, "
          f"{summary['wall_s']} s at -j{args.jobs}; failed: {summary['failed'] or 'none'}")
    if args.out:
        where = {"cpu": cpu_model(), "cores": os.cpu_count(),
                 "load_average_at_end": os.getloadavg(), "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY")}
        with open(args.out, "w") as f:
            json.dump({"what": "ctest entries' CPU seconds and wall", "where": where, "summary": summary,
                       "entries": rows}, f, indent=1)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
