"""Helpers for the end-to-end tests of accel's built-in trainer (test_trainer_end_to_end.py).

Runs the built executable (env ACCEL_BINARY, else build/accel) and the Python reference tools of
scripts/reference with accel's Python environment (ACCEL_PYTHON). Job files are written as plain block YAML.
"""
import atexit
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from reserved_ports import reserve_port

sys.dont_write_bytecode = True

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REF = os.path.join(ROOT, "scripts", "reference")
PY = os.environ.get("ACCEL_PYTHON") or sys.executable  # the python running the tests has torch 2.11
ACCEL = os.environ.get("ACCEL_BINARY") or os.path.join(ROOT, "build", "accel")

# Wall-clock cap for one accel or reference process; the jobs' own collective/rendezvous timeouts
# (60 s) make a hang fail well before this.
PROC_TIMEOUT_S = 300

# Fields that measure time or memory, so they differ between identical runs.
TIMING_FIELDS = ("tokens_per_s", "step_time_s", "peak_mem_bytes")

MODEL = dict(name="gpt", n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=32)

# env_extra for a world-1 launch: its one rank gets OMP_NUM_THREADS = cores (2 here), and libgomp's
# idle threads spin by default, which beside a parallel ctest entry takes the cores from the threads
# with work (ReferenceAgreement: 16 s of CPU, 11 s passive). PASSIVE puts idle threads to sleep: the
# same threads, so the same numbers (byte-identical weights measured). At world >= 2 a rank has 1 thread.
QUIET_IDLE_THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}


def clean_env(extra=None):
    """The environment minus every ACCEL_* variable (env overrides job keys, and a stray ACCEL_FAULT
    would kill a worker), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


_secret_dir = None


def secret_env(extra=None):
    """`extra` plus ACCEL_SECRET_FILE: the job secret every launcher of a multi-launcher job must
    read (refused without it, SECURITY.md), made as the docs say: 32 random bytes, mode 0600, in a
    directory of this test process (removed when it exits). A file `extra` names is kept."""
    global _secret_dir
    if _secret_dir is None:
        _secret_dir = tempfile.mkdtemp(prefix="accel-secret-")
        atexit.register(shutil.rmtree, _secret_dir, True)
        fd = os.open(os.path.join(_secret_dir, "secret"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, os.urandom(32))
        os.close(fd)
    return {"ACCEL_SECRET_FILE": os.path.join(_secret_dir, "secret"), **(extra or {})}


def run(cmd, cwd=None, env_extra=None):
    return subprocess.run(cmd, cwd=cwd, env=clean_env(env_extra), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=PROC_TIMEOUT_S)


def describe(proc):
    """Exit code and output tails, for assertion messages."""
    return (f"exit {proc.returncode}\n--- stderr (tail) ---\n{proc.stderr[-3000:]}"
            f"\n--- stdout (tail) ---\n{proc.stdout[-2000:]}")


def make_tokens(path, n=100000, seed=1, vocab=256):
    p = run([PY, os.path.join(REF, "make_tokens.py"), "--out", path, "--n", str(n), "--vocab", str(vocab),
             "--seed", str(seed)])
    if p.returncode != 0:
        raise RuntimeError("make_tokens.py failed: " + describe(p))
    return path


def export_init(path, model=MODEL, seed=1337):
    p = run([PY, os.path.join(REF, "reference_train.py"), "--n-layer", str(model["n_layer"]),
             "--n-head", str(model["n_head"]), "--n-embd", str(model["n_embd"]),
             "--vocab-size", str(model["vocab_size"]), "--block-size", str(model["block_size"]),
             "--seed-init", str(seed), "--steps", "0", "--export-init", path, "--quiet", "--threads", "1"])
    if p.returncode != 0:
        raise RuntimeError("reference_train.py --export-init failed: " + describe(p))
    return path


def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return json.dumps(str(v))  # a double-quoted JSON string is a valid YAML scalar


def _emit(d, indent=0):
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(" " * indent + f"{k}:")
            lines.extend(_emit(v, indent + 2))
        else:
            lines.append(" " * indent + f"{k}: {_scalar(v)}")
    return lines


def write_job(path, job):
    with open(path, "w") as f:
        f.write("\n".join(_emit(job)) + "\n")
    return path


def job(output_dir, data_path="tok.bin", world=2, micro=4, accum=1, steps=12, lr=1e-3, warmup=3,
        eval_every=5, checkpoint_every=0, max_restarts=0, init_from=None, **training):
    """A small ddp/cpu job. data_path is relative to the job file's folder unless absolute."""
    t = dict(max_steps=steps, micro_batch_size=micro, gradient_accumulation_steps=accum, seq_len=32,
             max_grad_norm=1.0, output_dir=output_dir, eval_every=eval_every,
             checkpoint_every=checkpoint_every, log_every=1)
    if init_from:
        t["init_from"] = init_from
    t.update(training)
    return {
        "backend": "ddp",
        "num_processes": world,
        "device": "cpu",
        "main_process_port": 0,  # a free port: parallel tests never collide
        "collective_timeout_s": 60,  # a hang fails in a minute, not at the 1800 s default
        "rendezvous_timeout_s": 60,
        "max_restarts": max_restarts,
        "model": dict(MODEL),
        "data": {"kind": "tokens", "path": data_path},
        "optimizer": {"name": "adamw", "lr": lr, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8},
        "scheduler": {"name": "cosine", "warmup_steps": warmup, "min_lr_ratio": 0.1},
        "training": t,
    }


def launch(job_path, sets=(), env_extra=None):
    """`accel launch JOB [--set k=v ...]`, run in the job file's folder."""
    cmd = [ACCEL, "launch", job_path]
    for s in sets:
        cmd += ["--set", s]
    return run(cmd, cwd=os.path.dirname(os.path.abspath(job_path)), env_extra=env_extra)


def launch_machines(job_path, num_machines, sets=(), env_extra=None, cwd=None, machine_sets=None):
    """`num_machines` launchers of one job on loopback, `machine_rank` 0..n-1, all at once (each
    machine's share of the ranks rendezvouses with the others), in `cwd` (default: the job file's
    folder); `machine_sets[m]` are overrides for machine m only (e.g. its own output_dir). They share
    one job secret (secret_env). Returns their CompletedProcesses."""
    port = reserve_port()
    procs = []
    for machine in range(num_machines):
        cmd = [ACCEL, "launch", job_path, "--set", f"num_machines={num_machines}", "--set", f"machine_rank={machine}",
               "--set", "main_process_ip=127.0.0.1", "--set", f"main_process_port={port}"]
        for s in tuple(sets) + tuple(machine_sets[machine] if machine_sets else ()):
            cmd += ["--set", s]
        procs.append((cmd, subprocess.Popen(cmd, cwd=cwd or os.path.dirname(os.path.abspath(job_path)),
                                            env=clean_env(secret_env(env_extra)), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    results = []
    for cmd, p in procs:
        try:
            out, err = p.communicate(timeout=PROC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        results.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
    return results


def reference_train(job_path, out_dir, init_weights, world, micro, accum):
    p = run([PY, os.path.join(REF, "reference_train.py"), "--job", job_path, "--init-weights", init_weights,
             "--world", str(world), "--micro-batch", str(micro), "--accum", str(accum),
             "--out-dir", out_dir, "--quiet", "--threads", "1"])
    if p.returncode != 0:
        raise RuntimeError("reference_train.py failed: " + describe(p))
    return out_dir


def largest_diff(diffs, what="difference"):
    """The largest of `diffs` (numbers, e.g. a generator of per-step or per-tensor differences).
    Raises AssertionError, a test failure, when one is NaN or infinite or when there is none: plain
    max() keeps a NaN only in first place (every comparison with NaN is False) and passes over a
    later one, and assertLessEqual(inf, tol) would fail but assertGreater(inf, floor) would not."""
    values = [float(d) for d in diffs]
    if not values:
        raise AssertionError(f"{what}: nothing to compare")
    bad = [(i, v) for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise AssertionError(f"{what}: not finite (position, value) {bad[:5]} of {len(values)}")
    return max(values)


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def without_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in records]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def ckpt_dir(run_dir, step):
    return os.path.join(run_dir, "checkpoints", f"step_{step:08d}")


def read_latest(run_dir):
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        return f.read().strip()


def check_run_times(test, out, label):
    """The report and the log say where the wall time went: every phase measured, none negative,
    the phases adding up to the total (other: what no phase covers)."""
    with open(os.path.join(out, "report", "rank_0.json")) as f:
        times = json.load(f)["time_s"]
    phases = ("setup", "training", "evaluation", "checkpoint", "export", "other")
    test.assertEqual(sorted(times), sorted(phases + ("total",)), f"{label}: report time_s")
    test.assertTrue(all(times[p] >= 0 for p in phases), f"{label}: {times}")
    # The run evaluates and saves its final checkpoint (unless training.checkpoint_at_end is false),
    # so those phases took time.
    saved = os.path.isdir(os.path.join(out, "checkpoints"))
    for phase in ("setup", "training", "evaluation") + (("checkpoint",) if saved else ()):
        test.assertGreater(times[phase], 0, f"{label}: {phase} took no time: {times}")
    if not saved:  # only the end-of-run wait for a save in flight is timed, and there is none: microseconds
        test.assertLess(times["checkpoint"], 0.01, f"{label}: no checkpoint, yet checkpoint time: {times}")
    # "other" is the total minus the measured phases: the sum is the total up to float rounding.
    test.assertAlmostEqual(sum(times[p] for p in phases), times["total"], delta=1e-6, msg=f"{label}: {times}")
    with open(os.path.join(out, "logs", "rank_0.log")) as f:
        test.assertRegex(f.read(), r"time: setup [\d.]+ s, training [\d.]+ s, evaluation [\d.]+ s, "
                                   r"checkpoints [\d.]+ s, export [\d.]+ s, other [\d.]+ s \(of [\d.]+ s\)")
