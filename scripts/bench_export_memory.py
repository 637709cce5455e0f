#!/usr/bin/env python3
"""Rank 0's resident peak through the end's weights export against the training step's peak, under
deepspeed zero 3 on the CPU (docs/huggingface.md: exports stream one unit at a time).

For each world size and export format, runs GPT-2 small's shape (124M parameters) for 2 steps with no checkpoint at the end, then reads each
rank's report: the resident peak before the export (setup and steps) and the export's own peak
(the trainer restarts the high-water mark when the export begins). Prints a table, writes JSON.

  python scripts/bench_export_memory.py --worlds 2 4 --formats hf safetensors
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
    ranks = []
    for r in range(world):
        with open(os.path.join(out, "report", f"rank_{r}.json")) as f:
            rep = json.load(f)
        ranks.append(dict(before=rep["peak_rss_before_export_bytes"], export=rep["export_peak_rss_bytes"],
                          start=rep["export_start_rss_bytes"]))
    return ranks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--formats", nargs="+", default=["hf", "safetensors"])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "accel"))
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "bench", "export_memory_zero3_cpu.json"))
    args = ap.parse_args()
    params = MODEL["vocab_size"] * MODEL["n_embd"] + MODEL["block_size"] * MODEL["n_embd"] + \
        MODEL["n_layer"] * (12 * MODEL["n_embd"] ** 2 + 13 * MODEL["n_embd"]) + 2 * MODEL["n_embd"]
    rows = []
    mib = 1 << 20
    with tempfile.TemporaryDirectory(prefix="accel_export_mem_") as tmp:
        for world in args.worlds:
            for fmt in args.formats:
                ranks = run(args.binary, world, fmt, tmp)
                r0 = ranks[0]
                rows.append(dict(world=world, format=fmt,
                                 ranks=[{k: round(v / mib, 1) for k, v in r.items()} for r in ranks]))
                print(f"world {world} {fmt:11s}: rank 0 peak before the export {r0['before'] / mib:7.1f} MiB, "
                      f"during it {r0['export'] / mib:7.1f} MiB (it started at {r0['start'] / mib:7.1f} MiB: "
                      f"{(r0['export'] - r0['start']) / mib:+.1f}); other ranks' export peaks "
                      f"{[round(r['export'] / mib, 1) for r in ranks[1:]]} MiB")
    with open(args.json, "w") as f:
        json.dump(dict(what="resident peak per rank before and during the end's weights export (MiB), deepspeed "
                            "zero 3, CPU, no checkpoint at the end; the export's peak is VmHWM restarted at its start",
                       model=MODEL, parameters=params, fp32_model_mib=round(params * 4 / mib, 1), rows=rows), f, indent=2)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
