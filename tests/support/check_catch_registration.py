"""Every Catch2 test case is run by some ctest entry.

accel_catch_tests (tests/CMakeLists.txt) registers one entry per test_*.cpp file of an executable,
filtered by the file tag Catch2's -# gives each case, and one entry for its [wall_clock] cases. A
case in a file not named test_*.cpp, or a [wall_clock] case of an executable registered without
WALL_CLOCK, would be compiled and never run; this check names it.

Usage: check_catch_registration.py BUILD_DIR
"""
import collections
import json
import re
import subprocess
import sys


def main(build_dir):
    listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True,
                             check=True).stdout
    files, wall_clock = collections.defaultdict(set), set()
    for test in json.loads(listing)["tests"]:
        if ":" not in test["name"] or "command" not in test:
            continue
        exe, part = test["command"][0], test["name"].split(":", 1)[1]
        (wall_clock.add(exe) if part == "wall_clock" else files[exe].add(part))
    missed = []
    for exe in sorted(set(files) | wall_clock):
        out = subprocess.run([exe, "-#", "--list-tests"], capture_output=True, text=True).stdout
        cases = 0
        for line in out.splitlines():
            tags = re.findall(r"\[([^\]]+)\]", line) if re.match(r"^\s+\[", line) else []
            stems = [t[1:] for t in tags if t.startswith("#")]
            if not stems:
                continue
            cases += 1
            covered = exe in wall_clock if "wall_clock" in tags else stems[0] in files[exe]
            if not covered:
                missed.append(f"{exe}: a case in {stems[0]}.cpp{' [wall_clock]' if 'wall_clock' in tags else ''}")
        if cases == 0:
            missed.append(f"{exe}: lists no test cases")
    for m in missed:
        print("not run by any ctest entry:", m)
    print(f"{len(set(files) | wall_clock)} Catch2 executables checked; {len(missed)} problem(s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
