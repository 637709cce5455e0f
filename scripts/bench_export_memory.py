#!/usr/bin/env python3
"""Rank 0's resident peak through the end's weights export against the training step's peak, under
deepspeed zero 3 on the CPU (docs/huggingface.md: exports stream one unit at a time).

For each binary (this build, and optionally another, e.g. main's before streaming) and world size,
runs GPT-2 small's shape (124M parameters) for 2 steps with no checkpoint at the end, then reads the step
peak (metrics.jsonl peak_mem_bytes: the largest resident peak over the ranks after the last step)
and rank 0's resident peak at the end of the run (report/rank_0.json peak_rss_bytes, which the
export is the only work after the last step to raise). Prints a table and writes JSON.

  python scripts/bench_export_memory.py --worlds 2 4 --format hf [--baseline /work/main/build/accel]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = dict(name="gpt", n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=64)


def job_text(out, world, fmt):
    training = f"""training:
  max_steps: 2
  micro_batch_size: 1
  seq_len: 64
  output_dir: {out}
  eval_every: 0
  checkpoint_at_end: false
  log_every: 1
"""
    if fmt:
        training += f"  export_format: {fmt}\n"
    model = "model:\n" + "".join(f"  {k}: {v}\n" for k, v in MODEL.items())
    return f"""backend: deepspeed
num_processes: {world}
device: cpu
main_process_port: 0
deepspeed:
  zero_stage: 3
{model}data:
  kind: synthetic
{training}"""


def run(binary, world, fmt, tmp):
    out = os.path.join(tmp, f"w{world}_{os.path.basename(os.path.dirname(binary))}_{fmt or 'default'}")
    path = out + ".yaml"
    with open(path, "w") as f:
        f.write(job_text(out, world, fmt))
    p = subprocess.run([binary, "launch", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{binary} failed:\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        step_peak = [json.loads(line) for line in f if line.strip()][-1]["peak_mem_bytes"]
    ranks = []
    for r in range(world):
        with open(os.path.join(out, "report", f"rank_{r}.json")) as f:
            ranks.append(json.load(f)["peak_rss_bytes"])
    return step_peak, ranks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--format", default="hf", choices=["hf", "safetensors"])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--baseline", help="another accel (e.g. main's, before streaming exports): safetensors format")
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "bench", "export_memory_zero3_cpu.json"))
    args = ap.parse_args()
    params = MODEL["vocab_size"] * MODEL["n_embd"] + MODEL["block_size"] * MODEL["n_embd"] + \
        MODEL["n_layer"] * (12 * MODEL["n_embd"] ** 2 + 13 * MODEL["n_embd"]) + 2 * MODEL["n_embd"]
    rows = []
    mib = 1 << 20
    with tempfile.TemporaryDirectory(prefix="accel_export_mem_") as tmp:
        for world in args.worlds:
            for label, binary, fmt in ([("this build", args.binary, args.format)] +
                                       ([("baseline", args.baseline, None)] if args.baseline else [])):
                step_peak, ranks = run(binary, world, fmt, tmp)
                rows.append(dict(world=world, binary=label, format=fmt or "safetensors", step_peak_mib=step_peak / mib,
                                 rank_peaks_mib=[r / mib for r in ranks],
                                 rank0_export_over_step_mib=(ranks[0] - step_peak) / mib))
                print(f"world {world} {label:10s} {fmt or 'safetensors':11s}: step peak {step_peak / mib:7.1f} MiB; "
                      f"end peak per rank {[round(r / mib, 1) for r in ranks]} MiB; rank 0 export adds "
                      f"{(ranks[0] - step_peak) / mib:+.1f} MiB")
    with open(args.json, "w") as f:
        json.dump(dict(what="rank 0's resident peak through the end's export vs the step peak, zero 3, CPU",
                       model=MODEL, parameters=params, fp32_model_mib=params * 4 / mib, rows=rows), f, indent=2)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
