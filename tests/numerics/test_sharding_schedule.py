"""The sharding engine's per-unit schedule, read from `accel launch --trace FILE` (Chrome trace).

A 3-block GPT at world 2 under deepspeed zero_stage 3 with every unit partitioned
(stage3_param_persistence_threshold 0). Each test reads the instant events of one steady-state
step in their recorded order ("args.seq") and checks what the prefetch settings promise:
  - with prefetch, unit i+1's gather is issued before unit i's forward ends, and unit i-1's gather
    before unit i's gradients are reduced (DeepSpeed's prefetch; FSDP's BACKWARD_PRE);
  - with stage3_prefetch_bucket_size 0 nothing is gathered ahead: every gather is waited on at once;
  - stage3_max_live_parameters bounds the values gathered at once;
  - every rank issues the same schedule (collectives must match across ranks), and the schedule
    never changes the numbers.
"""
import json
import os
import shutil
import tempfile
import unittest

import trainer_test_support as ts

N_EMBD = 64
BLOCK_NUMEL = 12 * N_EMBD * N_EMBD + 13 * N_EMBD  # attn (3 + 1) + mlp (4 + 4) matrices, 13 bias/norm vectors
FINAL_NUMEL = 2 * N_EMBD
BLOCKS = ["h.0", "h.1", "h.2"]


class UnitSchedule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_schedule_")
        cls.tokens = ts.make_tokens(os.path.join(cls.dir, "tok.bin"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_traced(self, name, *sets):
        out = os.path.join(self.dir, name)
        job = ts.job(out, data_path=self.tokens, world=2, micro=2, steps=3, eval_every=0)
        job["model"]["n_layer"] = 3
        job_path = ts.write_job(os.path.join(self.dir, name + ".yaml"), job)
        trace = os.path.join(self.dir, name + ".trace.json")
        p = ts.run([ts.ACCEL, "launch", job_path, "--trace", trace, "--set", "backend=deepspeed",
                    "--set", "deepspeed.zero_stage=3", "--set", "deepspeed.stage3_param_persistence_threshold=0"]
                   + [x for s in sets for x in ("--set", s)], cwd=self.dir)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        ranks = [self.events(trace), self.events(os.path.join(self.dir, name + ".trace.rank1.json"))]
        self.assertEqual([e["name"] for e in ranks[0]], [e["name"] for e in ranks[1]],
                         "ranks 0 and 1 issued different schedules")
        return ranks[0], ts.read_metrics(out)

    @staticmethod
    def events(path, step=2):
        with open(path) as f:
            doc = json.load(f)
        ev = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["args"]["step"] == step]
        return sorted(ev, key=lambda e: e["args"]["seq"])

    @staticmethod
    def first(events, event, unit, after=-1):
        for e in events:
            if e["args"]["seq"] > after and e["args"]["event"] == event and e["args"]["unit"] == unit:
                return e["args"]["seq"]
        raise AssertionError(f"no {event} {unit} after seq {after}")

    def test_prefetch_issues_gathers_ahead_in_both_directions(self):
        ev, _ = self.run_traced("prefetch")
        backward_start = self.first(ev, "backward_begin", "embedding")
        for i in range(len(BLOCKS) - 1):  # forward: block i+1 is in flight before block i finishes
            self.assertLess(self.first(ev, "gather_issued", BLOCKS[i + 1]), self.first(ev, "forward_end", BLOCKS[i]))
        for i in range(1, len(BLOCKS)):  # backward: block i-1 is in flight before block i's reduction
            self.assertLess(self.first(ev, "gather_issued", BLOCKS[i - 1], after=backward_start),
                            self.first(ev, "reduce_issued", BLOCKS[i]))

    def test_no_prefetch_gathers_only_on_demand(self):
        ev, _ = self.run_traced("on_demand", "deepspeed.stage3_prefetch_bucket_size=0")
        gathers = 0
        for k, e in enumerate(ev):
            if e["args"]["event"] == "gather_issued":
                gathers += 1
                nxt = ev[k + 1]["args"]
                self.assertEqual((nxt["event"], nxt["unit"]), ("gather_done", e["args"]["unit"]),
                                 f"gather of {e['args']['unit']} was issued ahead of its use")
        self.assertEqual(gathers, 1 + 2 * (len(BLOCKS) + 1), "embedding once, every other unit twice")

    def test_live_limit_bounds_gathered_values_and_schedule_keeps_numbers(self):
        limit = BLOCK_NUMEL + BLOCK_NUMEL // 2  # room for one block (and the small final norm) at a time
        ev, limited = self.run_traced("limited", f"deepspeed.stage3_max_live_parameters={limit}")
        _, free = self.run_traced("unlimited", "deepspeed.stage3_max_live_parameters=1000000000")
        size = dict({b: BLOCK_NUMEL for b in BLOCKS}, final=FINAL_NUMEL)
        live, peak = set(), 0
        for e in ev:
            unit, what = e["args"]["unit"], e["args"]["event"]
            if unit not in size:
                continue  # the embedding is pinned through the micro-step (tied with the head)
            if what == "gather_issued":
                live.add(unit)
            elif what == "reshard":
                live.discard(unit)
            peak = max(peak, sum(size[u] for u in live))
        self.assertLessEqual(peak, limit)
        self.assertEqual([r["loss"] for r in limited], [r["loss"] for r in free],
                         "the gather schedule changed the numbers")


if __name__ == "__main__":
    unittest.main()
