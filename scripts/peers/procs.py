"""Starting the processes of one contender run, and making sure none outlives it.

Every process is started in a session of its own (start_new_session), so that killing its process
group also reaches what it started (accel's workers, the python that `accelerate launch` runs).
A run fails as a whole: the first process to exit non-zero, or the deadline, ends every other one
(SIGTERM, then SIGKILL after a grace period). Output goes to one log file per process, and the
failure reason quotes the end of the failing process's log.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import socket
import subprocess
import time
from typing import Dict, List, Optional, Sequence

_LIVE: Dict[int, subprocess.Popen] = {}  # pid -> process, for the exit handler


def _kill_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)  # the session leader's pid is its process group id
    except (ProcessLookupError, PermissionError):
        pass


def _kill_all_live() -> None:
    for p in list(_LIVE.values()):
        _kill_group(p, signal.SIGKILL)
    _LIVE.clear()


atexit.register(_kill_all_live)


def install_signal_handlers() -> None:
    """SIGINT/SIGTERM to the bench ends every child group before the bench exits."""
    def handler(signum, frame):
        _kill_all_live()
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Proc:
    cmd: Sequence[str]
    env: Dict[str, str]
    log: str  # path of the combined stdout/stderr log
    cwd: Optional[str] = None


@dataclasses.dataclass
class GroupResult:
    ok: bool
    reason: str  # "" when ok
    wall_s: float
    returncodes: List[Optional[int]]


def tail(path: str, n_chars: int = 2500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n_chars))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"


def run_group(procs: Sequence[Proc], timeout_s: float, grace_s: float = 5.0) -> GroupResult:
    """Start every process, wait for all of them; the first failure or the deadline ends them all."""
    t0 = time.monotonic()
    started: List[subprocess.Popen] = []
    files = []
    try:
        for pr in procs:
            f = open(pr.log, "wb")
            files.append(f)
            p = subprocess.Popen(list(pr.cmd), env=pr.env, cwd=pr.cwd, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            started.append(p)
            _LIVE[p.pid] = p
        reason = ""
        deadline = t0 + timeout_s
        while True:
            codes = [p.poll() for p in started]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                i = bad[0]
                what = f"signal {-codes[i]}" if codes[i] < 0 else f"exit code {codes[i]}"
                reason = f"process {i} ({os.path.basename(procs[i].cmd[0])}) ended with {what}; end of its log:\n" + \
                    tail(procs[i].log)
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                reason = f"timed out after {timeout_s:.0f} s (killed); end of process 0's log:\n" + tail(procs[0].log)
                break
            time.sleep(0.1)
        if reason:
            for p in started:
                if p.poll() is None:
                    _kill_group(p, signal.SIGTERM)
            end = time.monotonic() + grace_s
            while time.monotonic() < end and any(p.poll() is None for p in started):
                time.sleep(0.1)
        # Whatever is left in a group (a worker the launcher did not reap) goes too.
        for p in started:
            _kill_group(p, signal.SIGKILL)
            p.wait()
        return GroupResult(not reason, reason, time.monotonic() - t0, [p.returncode for p in started])
    finally:
        for p in started:
            _LIVE.pop(p.pid, None)
        for f in files:
            f.close()


def rank_env(base: Dict[str, str], rank: int, world: int, port: int, threads: int) -> Dict[str, str]:
    """torchrun's environment for one rank on this machine, plus the thread and loopback pins."""
    env = dict(base)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
               LOCAL_RANK=str(rank), LOCAL_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0",
               OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo", PYTHONDONTWRITEBYTECODE="1")
    return env


def vm_hwm_bytes() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
