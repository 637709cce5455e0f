"""The sharding engine's per-unit schedule, read from `accel launch --trace FILE` (Chrome trace).

UnitSchedule: a 3-block GPT at world 2 under deepspeed zero_stage 3 with every unit partitioned
(stage3_param_persistence_threshold 0), one run per setting (default prefetch, none, a live limit).
FsdpSchedule: the same model under fsdp FULL_SHARD, one run per prefetch setting (BACKWARD_PRE /
BACKWARD_POST / NO_PREFETCH, forward_prefetch, limit_all_gathers). Each run is made once for its
class and read by every test that needs it; the token file is made once for the module. Each test
reads the instant events of one steady-state step in their recorded order ("args.seq") and checks
what the prefetch settings promise:
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

import reference_in_process as ref
import trainer_test_support as ts

N_EMBD = 64
BLOCK_NUMEL = 12 * N_EMBD * N_EMBD + 13 * N_EMBD  # attn (3 + 1) + mlp (4 + 4) matrices, 13 bias/norm vectors
BLOCKS = ["h.0", "h.1", "h.2"]
LIVE_LIMIT = BLOCK_NUMEL + BLOCK_NUMEL // 2  # stage3_max_live_parameters with room for one block at a time
# The built-in GPT is a torch module whose Blocks are accel::Unit<> wrappers (docs/design/0017): the
# rest (wte, wpe, ln_f) is the root unit, which stays gathered as FSDP's root does. It has no
# boundaries, so its only events are its reduction and its refresh gather after the step.
ROOT = "root"


ZERO3 = ("backend=deepspeed", "deepspeed.zero_stage=3", "deepspeed.stage3_param_persistence_threshold=0")
FULL_SHARD = ("backend=fsdp", "fsdp.sharding_strategy=FULL_SHARD")

# One token file for both classes (written in this process: no interpreter started for it).
_module_dir = None
_tokens = None


def setUpModule():
    global _module_dir, _tokens
    _module_dir = tempfile.mkdtemp(prefix="accel_schedule_tokens_")
    _tokens = ref.make_tokens(os.path.join(_module_dir, "tok.bin"))


def tearDownModule():
    shutil.rmtree(_module_dir, ignore_errors=True)


def traced_run(test_dir, tokens, name, sets):
    """Runs the 3-block model for 3 steps at world 2 with --trace; returns (exit status and output,
    rank traces' file names, output dir)."""
    out = os.path.join(test_dir, name)
    job = ts.job(out, data_path=tokens, world=2, micro=2, steps=3, eval_every=0)
    job["model"]["n_layer"] = 3
    job_path = ts.write_job(os.path.join(test_dir, name + ".yaml"), job)
    trace = os.path.join(test_dir, name + ".trace.json")
    p = ts.run([ts.ACCEL, "launch", job_path, "--trace", trace] + [x for s in sets for x in ("--set", s)],
               cwd=test_dir)
    return p, [trace, os.path.join(test_dir, name + ".trace.rank1.json")], out


def assert_gathers_on_demand(test, ev):
    """Every gather is waited on right after it is issued (nothing gathered ahead), and each unit is
    gathered as often as it is used: every block twice (forward, backward), the root once (its
    refresh after the optimizer step)."""
    gathers = 0
    for k, e in enumerate(ev):
        if e["args"]["event"] == "gather_issued":
            gathers += 1
            nxt = ev[k + 1]["args"]
            test.assertEqual((nxt["event"], nxt["unit"]), ("gather_done", e["args"]["unit"]),
                             f"gather of {e['args']['unit']} was issued ahead of its use")
    test.assertEqual(gathers, 1 + 2 * len(BLOCKS), "the root once, every block twice")


def backward_start(ev):
    """The sequence number of the step's first backward event (the last block's)."""
    return min(e["args"]["seq"] for e in ev if e["args"]["event"] == "backward_begin")


class UnitSchedule(unittest.TestCase):
    """One traced run per setting, made at its first use and shared by the tests that read it."""

    RUNS = {
        "prefetch": (),  # the defaults: prefetch on, stage3_max_live_parameters 1e9 (asserted below)
        "on_demand": ("deepspeed.stage3_prefetch_bucket_size=0",),
        "limited": (f"deepspeed.stage3_max_live_parameters={LIVE_LIMIT}",),
    }

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_schedule_")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_traced(self, name):
        """Rank 0's step-2 events, the metrics and the output dir of run `name` (made at the first
        call), after checking that rank 1 issued the same schedule."""
        if name not in self.runs:
            p, traces, out = traced_run(self.dir, _tokens, name, ZERO3 + self.RUNS[name])
            self.assertEqual(p.returncode, 0, ts.describe(p))
            ranks = [self.events(t) for t in traces]
            self.assertEqual([e["name"] for e in ranks[0]], [e["name"] for e in ranks[1]],
                             f"{name}: ranks 0 and 1 issued different schedules")
            self.runs[name] = (ranks[0], ts.read_metrics(out), out)
        return self.runs[name]

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
        ev, _, _ = self.run_traced("prefetch")
        start = backward_start(ev)
        for i in range(len(BLOCKS) - 1):  # forward: block i+1 is in flight before block i finishes
            self.assertLess(self.first(ev, "gather_issued", BLOCKS[i + 1]), self.first(ev, "forward_end", BLOCKS[i]))
        for i in range(1, len(BLOCKS)):  # backward: block i-1 is in flight before block i's reduction
            self.assertLess(self.first(ev, "gather_issued", BLOCKS[i - 1], after=start),
                            self.first(ev, "reduce_issued", BLOCKS[i]))

    def test_no_prefetch_gathers_only_on_demand(self):
        ev, on_demand, _ = self.run_traced("on_demand")
        assert_gathers_on_demand(self, ev)
        self.assertEqual([r["loss"] for r in on_demand], [r["loss"] for r in self.run_traced("prefetch")[1]],
                         "gathering on demand changed the numbers")

    def test_live_limit_bounds_gathered_values_and_schedule_keeps_numbers(self):
        ev, limited, _ = self.run_traced("limited")
        # The unlimited run is the default one: its bound (1e9 values) holds every unit at once.
        _, free, free_out = self.run_traced("prefetch")
        with open(os.path.join(free_out, "job.resolved.yaml")) as f:
            self.assertIn("stage3_max_live_parameters: 1000000000\n", f.read())
        size = {b: BLOCK_NUMEL for b in BLOCKS}
        live, peak = set(), 0
        for e in ev:
            unit, what = e["args"]["unit"], e["args"]["event"]
            if unit not in size:
                continue  # the root stays gathered (FSDP's root), outside the limit
            if what == "gather_issued":
                live.add(unit)
            elif what == "reshard":
                live.discard(unit)
            peak = max(peak, sum(size[u] for u in live))
        self.assertLessEqual(peak, LIVE_LIMIT)
        self.assertEqual([r["loss"] for r in limited], [r["loss"] for r in free],
                         "the gather schedule changed the numbers")


class FsdpSchedule(unittest.TestCase):
    """fsdp FULL_SHARD: FSDP's prefetch enums on the engine's schedule. One run per setting, made
    once for the class; every test reads the steady-state step (step 2) of rank 0's trace after
    checking that rank 1 issued the same schedule."""

    RUNS = {
        "pre": ("fsdp.backward_prefetch=BACKWARD_PRE", "fsdp.forward_prefetch=false"),
        "post": ("fsdp.backward_prefetch=BACKWARD_POST", "fsdp.forward_prefetch=false"),
        "none": ("fsdp.backward_prefetch=NO_PREFETCH", "fsdp.forward_prefetch=false"),
        "limited": ("fsdp.backward_prefetch=BACKWARD_PRE", "fsdp.forward_prefetch=true",
                    "fsdp.limit_all_gathers=true"),
        "unlimited": ("fsdp.backward_prefetch=BACKWARD_PRE", "fsdp.forward_prefetch=true",
                      "fsdp.limit_all_gathers=false"),
    }

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="accel_fsdp_schedule_")
        cls.events, cls.metrics, cls.logs = {}, {}, {}
        for name, sets in cls.RUNS.items():
            p, traces, out = traced_run(cls.dir, _tokens, name, FULL_SHARD + sets)
            if p.returncode != 0:
                raise RuntimeError(f"fsdp run {name} failed: " + ts.describe(p))
            cls.events[name] = [UnitSchedule.events(t) for t in traces]
            cls.metrics[name] = ts.read_metrics(out)
            with open(os.path.join(out, "logs", "rank_0.log")) as f:
                cls.logs[name] = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def ev(self, name):
        return self.events[name][0]

    first = staticmethod(UnitSchedule.first)

    def test_every_rank_issues_the_same_schedule(self):
        for name, (rank0, rank1) in self.events.items():
            self.assertTrue(rank0, f"{name}: no events in step 2")
            self.assertEqual([e["name"] for e in rank0], [e["name"] for e in rank1],
                             f"{name}: ranks 0 and 1 issued different schedules")
            self.assertIn("fsdp FULL_SHARD:", self.logs[name])

    def test_backward_pre_gathers_the_previous_unit_before_this_units_reduction(self):
        ev = self.ev("pre")
        start = backward_start(ev)
        for i in range(1, len(BLOCKS)):
            gather = self.first(ev, "gather_issued", BLOCKS[i - 1], after=start)
            self.assertLess(gather, self.first(ev, "backward_end", BLOCKS[i], after=start),
                            f"{BLOCKS[i - 1]} is gathered before {BLOCKS[i]}'s gradients are computed")
            self.assertLess(gather, self.first(ev, "reduce_issued", BLOCKS[i], after=start))

    def test_backward_post_gathers_after_this_units_backward_before_its_reduction(self):
        ev = self.ev("post")
        start = backward_start(ev)
        for i in range(1, len(BLOCKS)):
            gather = self.first(ev, "gather_issued", BLOCKS[i - 1], after=start)
            self.assertGreater(gather, self.first(ev, "backward_end", BLOCKS[i], after=start))
            self.assertLess(gather, self.first(ev, "reduce_issued", BLOCKS[i], after=start))

    def test_no_prefetch_and_no_forward_prefetch_gather_only_on_demand(self):
        ev = self.ev("none")
        assert_gathers_on_demand(self, ev)
        # forward_prefetch false (BACKWARD_PRE): in forward, too, each gather waits at once
        ev = self.ev("pre")
        start = backward_start(ev)
        for k, e in enumerate(ev):
            if e["args"]["seq"] < start and e["args"]["event"] == "gather_issued":
                self.assertEqual(ev[k + 1]["args"]["event"], "gather_done", "a forward gather was issued ahead")

    def test_forward_prefetch_gathers_the_next_unit_before_this_one_ends(self):
        ev = self.ev("limited")
        for i in range(len(BLOCKS) - 1):
            self.assertLess(self.first(ev, "gather_issued", BLOCKS[i + 1]), self.first(ev, "forward_end", BLOCKS[i]))

    def test_limit_all_gathers_keeps_at_most_two_units_gathered(self):
        for name in ("limited", "pre", "post"):
            live, peak = set(), 0
            for e in self.ev(name):
                unit, what = e["args"]["unit"], e["args"]["event"]
                if unit == ROOT:
                    continue  # stays gathered, as FSDP's root
                if what == "gather_issued":
                    live.add(unit)
                elif what == "reshard":
                    live.discard(unit)
                peak = max(peak, len(live))
            self.assertLessEqual(peak, 2, f"{name}: more than two units gathered at once")
            self.assertEqual(peak, 2, f"{name}: prefetch never overlapped a gather with a unit's compute")

    def test_prefetch_settings_never_change_the_numbers(self):
        base = [(r["loss"], r["grad_norm"]) for r in self.metrics["pre"]]
        self.assertEqual(len(base), 3)
        for name in self.RUNS:
            self.assertEqual([(r["loss"], r["grad_norm"]) for r in self.metrics[name]], base,
                             f"{name}: the gather schedule changed the numbers")


if __name__ == "__main__":
    unittest.main()
