#!/usr/bin/env python3
"""Benchmark: a Hugging Face Llama folder fine-tuned under ZeRO-3 on the CPU, each rank's resident
memory from start to the end's checkpoint and export, against accel's memory estimate.

transformers writes a random LlamaForCausalLM of TinyLlama-1.1B's shape (22 layers, 2048 wide, 32
heads, 4 key/value heads, SwiGLU 5632, vocab 32000; stored bf16 in 1 GB shards as published
folders are); accel starts from it (model.from_pretrained: each rank reads only its slices), trains
2 steps, writes its checkpoint and exports an hf folder. Per rank, from the run report:
  - setup peak (setup_peak_rss_bytes) against the goal "own shards + one layer + 300 MiB": the model
    states the estimate keeps for this rank (parameters kept gathered, its parameter, gradient,
    master and optimizer shards) less what offload puts in files, plus the largest layer's fp32 bytes;
  - the peak through the end (peak_rss_bytes: steps, checkpoint, export) against 1.1 x the
    estimate's step peak + 300 MiB.
The setup peak is also broken down (rank 0's, "setup_breakdown_mib" in the JSON), each part measured
or counted where it is held: the runtime's own (the setup peak of the same job on a tiny folder:
libtorch, the communicator, thread pools, the placeholders), the model states kept (the estimate's),
the compute-dtype shards held beside the kept units' gathered buffers (the engine's report,
memory.param_shards: 0 since a kept unit gathers in place from its own slice; before, with the
masters in files, the root kept a 125 MiB copy of its shard at 1.1B, world 4), the largest layer, and the rest
(what setup held beside these: reading buffers, heap). The 300 MiB of the goal covers the runtime
and the rest.
With --nvme the optimizer states and parameters are offloaded to files (what lets 1.1B at world 4
fit a 24 GiB machine). Writes JSON named by what and where it measured.

  scripts/python scripts/bench_hf_llama_memory.py --world 4 --nvme
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MIB = 1 << 20
TINYLLAMA = dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                 intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                 rope_theta=10000.0, tie_word_embeddings=False)


def write_folder(path, shape):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # initialized in bf16: half the memory of this script
    cfg = LlamaConfig(**shape)
    cfg.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path, max_shard_size="1GB")
    n = sum(p.numel() for p in model.parameters())
    del model
    torch.set_default_dtype(torch.float32)
    return n


def job_text(a, folder, out, nvme_dir):
    nvme = ""
    if a.nvme:
        nvme = (f"  offload_optimizer_device: nvme\n  offload_param_device: nvme\n"
                f"  offload_optimizer_nvme_path: {nvme_dir}\n  offload_param_nvme_path: {nvme_dir}\n")
    return f"""backend: deepspeed
num_processes: {a.world}
device: cpu
main_process_port: 0
collective_timeout_s: 1800
deepspeed:
  zero_stage: 3
{nvme}model:
  from_pretrained: {folder}
data:
  kind: synthetic
scheduler:
  warmup_steps: 1
training:
  max_steps: {a.steps}
  micro_batch_size: 1
  seq_len: {a.seq_len}
  output_dir: {out}
  eval_every: 0
  log_every: 1
  export_format: hf
  export_dtype: bf16
"""


def run_job(a, folder, out, nvme_dir, job):
    """accel launch on `folder`; each rank's run report (a list), and the wall time."""
    with open(job, "w") as f:
        f.write(job_text(a, folder, out, nvme_dir))
    t0 = time.monotonic()
    proc = subprocess.Popen([a.accel, "launch", job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    threading.Thread(target=guard, args=(proc, 1536 * MIB, stop), daemon=True).start()
    log = proc.communicate()[0]
    stop.set()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"accel launch failed ({proc.returncode}):\n{log[-4000:]}")
    reports = []
    for r in range(a.world):
        with open(os.path.join(out, "report", f"rank_{r}.json")) as f:
            reports.append(json.load(f))
    return reports, wall


def guard(proc, floor_bytes, stop):
    """Kills the job when the machine's MemAvailable falls under `floor_bytes` (no OOM killer roulette)."""
    while not stop.is_set() and proc.poll() is None:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))
        if avail < floor_bytes:
            proc.kill()
            print(f"memory guard: MemAvailable {avail / MIB:.0f} MiB < {floor_bytes / MIB:.0f}; job killed", flush=True)
            return
        time.sleep(0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--nvme", action="store_true", help="offload optimizer states and parameters to files")
    ap.add_argument("--layers", type=int, default=TINYLLAMA["num_hidden_layers"])
    ap.add_argument("--hidden", type=int, default=TINYLLAMA["hidden_size"])
    ap.add_argument("--intermediate", type=int, default=TINYLLAMA["intermediate_size"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--accel", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--tmp", default=None, help="where the folder, run and nvme files go (default: $TMPDIR)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    shape = dict(TINYLLAMA, num_hidden_layers=a.layers, hidden_size=a.hidden, intermediate_size=a.intermediate)
    tag = f"llama_{a.layers}x{a.hidden}_zero3{'_nvme' if a.nvme else ''}_w{a.world}"
    a.json = a.json or os.path.join(ROOT, "docs", "bench", f"hf_{tag}_cpu.json")
    d = tempfile.mkdtemp(prefix="bench_hf_llama_", dir=a.tmp)
    try:
        folder, out, nvme_dir = os.path.join(d, "model"), os.path.join(d, "run"), os.path.join(d, "nvme")
        os.makedirs(nvme_dir)
        t0 = time.monotonic()
        params = write_folder(folder, shape)
        print(f"wrote {folder}: {params:,} parameters in {time.monotonic() - t0:.0f} s", flush=True)
        job = os.path.join(d, "job.yaml")
        with open(job, "w") as f:
            f.write(job_text(a, folder, out, nvme_dir))
        p = subprocess.run([a.accel, "estimate-memory", job, "--json", job + ".est.json"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"estimate-memory failed:\n{p.stderr}")
        with open(job + ".est.json") as f:
            est_all = json.load(f)
        est = next(r for r in est_all["strategies"] if r["configured"])
        b = est["bytes"]
        # One layer: the largest unit other than the root (kept gathered, so already in "params").
        largest_unit = max(u["numel"] for u in est_all["model"]["units"] if u["name"] != "root")
        # The model states this rank keeps in memory: all of them less what offload puts in files
        # (the estimate's components add up to device + host + nvme; staging buffers are transients).
        own = b["params"] + b["param_shard"] + b["grad_shard"] + b["master"] + b["optimizer_states"] - b["nvme"]
        setup_bound = own + 4 * largest_unit + 300 * MIB
        end_bound = 1.1 * b["peak"] + 300 * MIB
        # The runtime's own: the same job on a tiny folder (1 layer, 64 wide, vocab 256: under 1 MiB).
        base_dir = os.path.join(d, "base")
        os.makedirs(os.path.join(base_dir, "nvme"))
        write_folder(os.path.join(base_dir, "model"), dict(shape, num_hidden_layers=1, hidden_size=64, intermediate_size=128,
                                                          vocab_size=256, num_attention_heads=4, num_key_value_heads=2))
        base_reports, _ = run_job(a, os.path.join(base_dir, "model"), os.path.join(base_dir, "run"),
                                  os.path.join(base_dir, "nvme"), os.path.join(base_dir, "job.yaml"))
        runtime_base = max(rep["setup_peak_rss_bytes"] for rep in base_reports)
        reports, wall = run_job(a, folder, out, nvme_dir, job)
        ranks = []
        for r, rep in enumerate(reports):
            ranks.append({"rank": r, "setup_peak_mib": round(rep["setup_peak_rss_bytes"] / MIB),
                          "peak_before_export_mib": round(rep["peak_rss_before_export_bytes"] / MIB),
                          "export_peak_mib": round(rep["export_peak_rss_bytes"] / MIB),
                          # The export restarts the high-water mark: the run's peak is the larger of the two.
                          "peak_mib": round(max(rep["peak_rss_before_export_bytes"], rep["export_peak_rss_bytes"]) / MIB),
                          "pretrained_bytes_read": rep.get("pretrained_bytes_read"),
                          "param_shards_bytes": rep["memory"]["param_shards"],
                          "time_s": rep.get("time_s")})
        exported = sum(os.path.getsize(os.path.join(out, "hf", f)) for f in os.listdir(os.path.join(out, "hf")))
        folder_bytes = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"\n{tag}: {params:,} parameters, folder {folder_bytes / MIB:.0f} MiB (bf16), export {exported / MIB:.0f} MiB;"
          f" {wall:.0f} s")
    print(f"estimate: step peak {b['peak'] / MIB:.0f} MiB per rank ({est['peak_phase']}); own shards in memory "
          f"{own / MIB:.0f} MiB, largest unit {4 * largest_unit / MIB:.0f} MiB")
    print(f"setup bound (own + one layer + 300 MiB) {setup_bound / MIB:.0f} MiB; end bound (1.1 x step peak + 300 MiB) "
          f"{end_bound / MIB:.0f} MiB")
    print("| rank | setup peak MiB | peak before export MiB | export peak MiB | peak MiB | bytes read |")
    for r in ranks:
        print(f"| {r['rank']} | {r['setup_peak_mib']} | {r['peak_before_export_mib']} | {r['export_peak_mib']} | "
              f"{r['peak_mib']} | {r['pretrained_bytes_read']:,} |")
    # Rank 0's setup peak, part by part (the docstring says how each is measured).
    r0 = ranks[0]
    parts = {"runtime (setup peak on a tiny folder)": runtime_base / MIB,
             "model states kept (estimate)": own / MIB,
             "kept units' compute shard (engine report)": r0["param_shards_bytes"] / MIB,
             "largest layer, fp32 (estimate)": 4 * largest_unit / MIB}
    parts["rest (reading buffers, heap)"] = r0["setup_peak_mib"] - sum(parts.values())
    print(f"rank 0 setup peak {r0['setup_peak_mib']} MiB:")
    for k, v in parts.items():
        print(f"  {v:7.0f} MiB  {k}")
    overhead = parts["runtime (setup peak on a tiny folder)"] + parts["rest (reading buffers, heap)"]
    print(f"  runtime + rest {overhead:.0f} MiB against the goal's 300")
    setup_ok = all(r["setup_peak_mib"] * MIB <= setup_bound for r in ranks)
    end_ok = all(r["peak_mib"] * MIB <= end_bound for r in ranks)
    print(f"setup goal {'met' if setup_ok else 'NOT met'}; end goal {'met' if end_ok else 'NOT met'}")
    with open(a.json, "w") as f:
        json.dump({"what": "resident memory per rank of a Hugging Face Llama folder fine-tuned under deepspeed zero 3 "
                           "on the CPU, from start through the end's checkpoint and hf export, against accel's estimate",
                   "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                   "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
                   "shape": shape, "parameters": params, "folder_bytes": folder_bytes, "export_bytes": exported,
                   "world": a.world, "nvme": a.nvme, "steps": a.steps, "seq_len": a.seq_len, "wall_s": round(wall, 1),
                   "estimate": {"peak_phase": est["peak_phase"], "own_in_memory_bytes": own,
                                "largest_unit_params": largest_unit, "bytes": b},
                   "runtime_base_setup_peak_mib": round(runtime_base / MIB),
                   "setup_breakdown_mib": {k: round(v) for k, v in parts.items()},
                   "setup_bound_mib": round(setup_bound / MIB), "end_bound_mib": round(end_bound / MIB),
                   "setup_goal_met": setup_ok, "end_goal_met": end_ok, "ranks": ranks}, f, indent=1)
    print("wrote", a.json)


if __name__ == "__main__":
    main()
