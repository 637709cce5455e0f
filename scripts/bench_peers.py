#!/usr/bin/env python3
"""accel next to the real peers on one model, one init, one data order: PyTorch DDP, Accelerate
(MULTI_CPU = DDP), FSDP2, FSDP1 and DeepSpeed ZeRO 1-3, at world 2 on the CPU over gloo.

Every contender trains the spec GPT from one init file (reference_train.py --export-init; accel
reads it through training.init_from) on one token file (make_tokens.py) in the spec's batch order
(window ((s*G+m)*W+r)*B+b mod n_train, the same val_fraction), with torch.optim.AdamW and the
reference's two parameter groups, the spec's lr schedule (written into the optimizer's groups
every step) and clipping at max_grad_norm. Contenders are alternated (round-robin over --repeat
repeats). Per contender: tokens/s (median over the timed steps, median over repeats), peak RSS per
rank (VmHWM), model-state bytes per rank, bytes moved per step, and the loss after every step.
A contender that fails is a "failed" row with its reason; every process it started is ended.
The first row is the no-communication floor (scripts/peers/floor_runner.py: W solo accel ranks at
once): each contender's step minus the floor's is what its data parallelism costs.

  scripts/python scripts/bench_peers.py --quick                    # small model, ~2-3 minutes
  scripts/python scripts/bench_peers.py --repeat 3 --json docs/bench/peers_cpu.json --markdown docs/bench/peers_cpu.md
  scripts/python scripts/bench_peers.py --size large --only accel,deepspeed   # model states dominate
  scripts/python scripts/bench_peers.py --quick --accel-config accelerate     # accel driven by Accelerate files
  scripts/python scripts/bench_peers.py --from-json docs/bench/peers_default_cpu_2core_idle_floor_a.json  # print a saved run

Settings per peer (scripts/peers/*.py and ../shared/notes/cpu_peers.md): PyTorch DDP with
gradient_as_bucket_view, static_graph, broadcast_buffers off and accel's bucket_cap_mb; FSDP2
fully_shard per Block + root on an explicit CPU mesh (the gloo reduce-scatter AVG check runs in
the peer, with the SUM workaround where AVG is broken); FSDP1 with device_id=cpu, use_orig_params,
one unit per Block; DeepSpeed with DS_ACCELERATOR=cpu, a client torch.optim.AdamW, the ZeRO bucket
sizes accel's job uses, stage3_param_persistence_threshold 0, its own gradient_clipping, and the
shm op built before any timed run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(HERE, "peers")
REF = os.path.join(HERE, "reference")
sys.path[:0] = [PEERS, REF]

import accel_runner  # noqa: E402
import floor_runner  # noqa: E402
import procs  # noqa: E402
import python_runner  # noqa: E402
import report  # noqa: E402
from settings import SIZES, RunSpec, select  # noqa: E402


def machine_state() -> dict:
    """Load average and whether compilers are running: timings are only meaningful on a quiet machine."""
    compiling = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if name in ("cc1plus", "cc1", "ld", "ninja", "make", "cmake", "ctest"):
                compiling.append(name)
    return {"load": round(os.getloadavg()[0], 2), "compilers": sorted(set(compiling))}


def prepare_inputs(spec: RunSpec, work: str, call=None) -> None:
    """The token file and the init file every contender reads. `call(script, args) -> (exit status,
    stderr)` runs a scripts/reference tool (default: a new interpreter; the tests call its main() in
    their own process, which has imported torch already)."""
    windows = spec.steps * spec.world * spec.micro_batch * spec.accum
    n_tokens = max(200_000, int((windows / (1 - spec.val_fraction) + 2) * spec.seq_len) + 1)
    spec.tokens_path = os.path.join(work, "tokens.bin")
    spec.init_path = os.path.join(work, "init.safetensors")
    commands = [("make_tokens.py", ["--out", spec.tokens_path, "--n", str(n_tokens), "--vocab", str(spec.vocab_size),
                                    "--seed", "1"]),
                ("reference_train.py", ["--n-layer", str(spec.n_layer), "--n-head", str(spec.n_head), "--n-embd",
                                        str(spec.n_embd), "--vocab-size", str(spec.vocab_size), "--block-size",
                                        str(spec.seq_len), "--seed-init", "1337", "--steps", "0", "--export-init",
                                        spec.init_path, "--quiet", "--threads", str(spec.threads)])]
    for script, args in commands:
        if call is None:
            subprocess.run([sys.executable, os.path.join(REF, script)] + args, check=True, stdout=subprocess.DEVNULL)
            continue
        code, err = call(script, args)
        if code != 0:
            raise RuntimeError(f"{script} exit {code}: {err[-2000:]}")


def prebuild_deepspeed_op(env) -> dict:
    """DeepSpeed JIT-builds its shm comm op at init (cached under ~/.cache/torch_extensions): build
    it once here so that no contender's run includes a compile."""
    code = ("import time; t = time.time(); from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; "
            "ShareMemCommBuilder().load(); print(round(time.time() - t, 1))")
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, DS_ACCELERATOR="cpu"), capture_output=True, text=True)
    if p.returncode != 0:
        return {"ok": False, "reason": p.stderr[-2000:]}
    return {"ok": True, "seconds": float(p.stdout.strip().splitlines()[-1])}


def versions() -> dict:
    code = ("import json, torch\nout = {'torch': torch.__version__}\nfor m in ('deepspeed', 'accelerate'):\n"
            "    try:\n        out[m] = __import__(m).__version__\n    except Exception as e:\n"
            "        out[m] = 'not importable: ' + str(e).splitlines()[0]\nprint(json.dumps(out))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, DS_ACCELERATOR="cpu"))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"torch": "?", "deepspeed": "?", "accelerate": "?"}


def run_one(spec, contender, run_dir, a, env) -> dict:
    os.makedirs(run_dir, exist_ok=True)
    t0 = time.monotonic()
    try:
        if contender.family in ("accel", "accel_tcp", "floor") and not os.path.exists(a.accel):
            return {"ok": False, "reason": f"accel binary not found at {a.accel} (build it, or pass --accel)"}
        if contender.family in ("accel", "accel_tcp"):
            res, result = accel_runner.run(spec, contender, run_dir, a.accel, a.accel_config, env)
        elif contender.family == "floor":
            res, result = floor_runner.run(spec, run_dir, a.accel, env)
        else:
            res, result = python_runner.run(spec, contender, run_dir, env, ds_skip_shm=a.ds_skip_shm)
    except Exception as e:  # a setup error of the bench itself, reported as this contender's failure
        return {"ok": False, "reason": f"{type(e).__name__}: {e}"}
    if not res.ok:
        return {"ok": False, "reason": res.reason, "wall_s": res.wall_s}
    try:
        return {"ok": True, "summary": report.run_summary(spec, result), "wall_s": time.monotonic() - t0,
                "info": result.get("info"), "setup_s": result.get("setup_s")}
    except (KeyError, ValueError, TypeError) as e:
        return {"ok": False, "reason": f"unreadable results in {run_dir}: {type(e).__name__}: {e}"}


def build_spec(a) -> RunSpec:
    spec = RunSpec(**SIZES["quick" if a.quick else a.size])
    for k in ("n_layer", "n_head", "n_embd", "seq_len", "micro_batch", "accum", "warmup_steps", "timed_steps",
              "lr", "threads", "timeout_s", "ddp_bucket_cap_mb", "reduce_bucket_size", "allgather_bucket_size",
              "prefetch_bucket_size"):
        v = getattr(a, k, None)
        if v is not None:
            setattr(spec, k, v)
    spec.mixed_precision = a.mixed_precision
    if spec.n_embd % spec.n_head:
        raise SystemExit(f"bench_peers: error: --n-embd {spec.n_embd} is not divisible by --n-head {spec.n_head}")
    if a.accel_config == "accelerate":
        # The ZeRO keys come from the DeepSpeed JSONs the Accelerate files name, for both sides.
        fixed = [f for f in ("reduce_bucket_size", "allgather_bucket_size", "prefetch_bucket_size", "ddp_bucket_cap_mb")
                 if getattr(a, f, None) is not None]
        if fixed:
            raise SystemExit(f"bench_peers: error: --accel-config accelerate takes the bucket sizes from "
                             f"scripts/peers/accelerate_configs/*.json; drop --{', --'.join(f.replace('_', '-') for f in fixed)}")
        spec.ds_config_dir = accel_runner.ACCELERATE_CONFIGS
    return spec


def render_saved(path: str, markdown_path) -> int:
    with open(path) as f:
        saved = json.load(f)
    md = report.markdown(RunSpec.from_json(saved["spec"]), saved["contenders"], saved["meta"])
    print(md)
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 layers x 128, seq 64: every contender in ~2-3 minutes")
    ap.add_argument("--size", choices=sorted(SIZES), default="default",
                    help="default: 6 x 384, seq 256; large: 12 x 512, seq 64, micro batch 1 (model states dominate)")
    ap.add_argument("--repeat", type=int, default=1, help="round-robin repeats; medians over them (1)")
    ap.add_argument("--only", help="comma list of contender keys, families (accel, deepspeed, fsdp2, ...) or strategies")
    ap.add_argument("--skip", help="the same, to leave out")
    ap.add_argument("--list", action="store_true", help="list the contenders and exit")
    ap.add_argument("--accel", default=os.environ.get("ACCEL_BINARY", os.path.join(ROOT, "build", "accel")))
    ap.add_argument("--accel-config", choices=("native", "accelerate"), default="native",
                    help="accel's job: a native YAML, or the Accelerate config files in scripts/peers/accelerate_configs "
                         "(unchanged) plus --set; the DeepSpeed peers then read the same DeepSpeed JSONs")
    ap.add_argument("--mixed-precision", choices=("no", "bf16"), default="no")
    for flag, typ in (("n-layer", int), ("n-head", int), ("n-embd", int), ("seq-len", int), ("micro-batch", int),
                      ("accum", int), ("warmup-steps", int), ("timed-steps", int), ("lr", float), ("threads", int),
                      ("ddp-bucket-cap-mb", float), ("reduce-bucket-size", int), ("allgather-bucket-size", int),
                      ("prefetch-bucket-size", int)):
        ap.add_argument("--" + flag, type=typ, dest=flag.replace("-", "_"))
    ap.add_argument("--timeout", type=int, dest="timeout_s", help="seconds per contender run before it is killed (600)")
    ap.add_argument("--work-dir", help="keep every run directory (logs, jobs, results) here")
    ap.add_argument("--no-prebuild", dest="prebuild", action="store_false", help="do not build DeepSpeed's shm op first")
    ap.add_argument("--ds-skip-shm", action="store_true",
                    help="mark DeepSpeed's shm op incompatible so init does not build it (it is unused in training)")
    ap.add_argument("--from-json", help="print (and with --markdown write) the tables of an earlier run's --json file")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--markdown", help="write the tables here (they are printed too)")
    a = ap.parse_args()
    if a.from_json:
        return render_saved(a.from_json, a.markdown)
    try:
        contenders = select(a.only, a.skip)
    except ValueError as e:
        ap.error(str(e))
    if a.list:
        for c in contenders:
            print(f"{c.key:28s} {c.name}")
        return 0
    if not contenders:
        ap.error("no contender selected")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    procs.install_signal_handlers()
    spec = build_spec(a)
    env = dict(os.environ)
    work = a.work_dir or tempfile.mkdtemp(prefix="bench_peers_")
    os.makedirs(work, exist_ok=True)
    t_start = time.monotonic()
    before = machine_state()
    meta = {"repeat": a.repeat, "accel_config": a.accel_config, "work_dir": work if a.work_dir else None,
            "load_before": before["load"], "compilers_before": before["compilers"], **versions()}
    print(f"bench_peers: {len(contenders)} contenders x {a.repeat} repeat(s); GPT {spec.n_layer} x {spec.n_embd}, "
          f"{spec.num_params():,} parameters; load {before['load']}"
          + (f", compilers running: {', '.join(before['compilers'])}" if before["compilers"] else ""), file=sys.stderr)
    try:
        prepare_inputs(spec, work)
        if a.prebuild and not a.ds_skip_shm and any(c.family == "deepspeed" for c in contenders):
            meta["deepspeed_shm_prebuild"] = prebuild_deepspeed_op(env)
        runs = {c.key: [] for c in contenders}
        for rep in range(a.repeat):
            for c in contenders:
                r = run_one(spec, c, os.path.join(work, f"r{rep}", c.key), a, env)
                runs[c.key].append(r)
                status = (f"{r['summary']['tokens_per_s']:,.0f} tokens/s, final loss {r['summary']['losses'][-1]:.5f}"
                          if r["ok"] else "FAILED: " + report.headline(r["reason"]))
                print(f"  [{rep + 1}/{a.repeat}] {c.name}: {status}", file=sys.stderr)
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    after = machine_state()
    meta.update(load_after=after["load"], compilers_after=after["compilers"], wall_s=round(time.monotonic() - t_start, 1))
    meta["loaded"] = bool(before["compilers"] or after["compilers"] or before["load"] > 0.5)
    summaries = [report.contender_summary(spec, c, runs[c.key]) for c in contenders]
    infos = {c.key: next((r.get("info") for r in runs[c.key] if r.get("ok")), None) for c in contenders}
    md = report.markdown(spec, summaries, meta)
    print(md)
    print(f"bench_peers: {meta['wall_s']} s in all", file=sys.stderr)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.json:
        spec_json = dataclasses.asdict(spec)
        spec_json.update(tokens_path=None, init_path=None)  # temporary files
        with open(a.json, "w") as f:
            json.dump({"spec": spec_json, "meta": meta, "contenders": summaries, "peer_settings": infos,
                       "runs": {k: [{kk: vv for kk, vv in r.items() if kk != "info"} for r in v] for k, v in runs.items()}},
                      f, indent=1)
    return 0 if all(s["status"] == "ok" for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
