"""`accel report` (docs/design/0026) on two short CPU runs of one job under two backends, and the
progress lines of long work when the launcher's output is not a terminal.

Run A: deepspeed zero_stage 3, an evaluation every 4 steps, a checkpoint every 6, the weights
export. Run B: the same job under fsdp SHARD_GRAD_OP without evaluation. Both at world 2, 12 steps.

ReportTwoBackends: `accel report A B -o OUT` writes a page whose every curve has one series per run
that has the field (the evaluation loss only A's, with a note saying why B has none), each series'
SVG path runs through exactly its metrics.jsonl records mapped onto the figure's stated axes, the
axes hold the data, the bar charts have a group per run (a bar per rank, and memory's estimate) and
hold the run reports' figures, every PNG decodes at its stated size, and nothing on the page is fetched.
ReportErrors: bad input is exit 2 naming the file; a last metrics line cut short is a note.
ProgressLines: each long piece of work of run A printed one start line and one end line with its
time, on rank 0 only, and no carriage return.

Tolerance: 0.01 px between a series' SVG coordinates and the records mapped onto the axes: cairo
holds path coordinates in fixed point (1/256 px), so a point is off by up to 1/512 px; a point
drawn at the wrong record or scale is off by a whole pixel or more.
"""
import html
import json
import os
import re
import shutil
import tempfile
import unittest

from PIL import Image

import trainer_test_support as ts

STEPS = 12
LINE_FIGURES = {  # figure id -> (metrics.jsonl field, scale to the figure's unit before byte units)
    "loss": ("loss", 1.0), "eval_loss": ("eval_loss", 1.0), "lr": ("lr", 1.0),
    "throughput": ("tokens_per_s", 1.0), "step_time": ("step_time_s", 1e3), "peak_memory": ("peak_mem_bytes", 1.0)}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
FIGURE = re.compile(r'<figure class="chart" id="chart-(\w+)"([^>]*)>(.*?)</figure>', re.S)
ATTR = re.compile(r'(data-[\w-]+)="([^"]*)"')
PATH = re.compile(r'<path\b([^>]*)/?>', re.S)


def run_job(root, name, backend_sets, eval_every):
    out = os.path.join(root, name)
    job = ts.job(out, world=2, steps=STEPS, eval_every=eval_every, checkpoint_every=6, save_weights=True)
    job["data"] = {"kind": "synthetic", "val_fraction": 0.02}
    path = ts.write_job(os.path.join(root, name + ".yaml"), job)
    return out, ts.launch(path, sets=backend_sets)


def figures_of(page):
    out = {}
    for fid, attrs, body in FIGURE.findall(page):
        out[fid] = (dict(ATTR.findall(attrs)), body)
    return out


def stroke_rgb(attrs):
    """The stroke colour of an SVG path as 0-255 integers, from cairo's rgb(r%, g%, b%)."""
    m = re.search(r'stroke(?:="|:)rgb\(([\d.]+)%,\s*([\d.]+)%,\s*([\d.]+)%\)', attrs)
    return tuple(round(float(v) * 2.55) for v in m.groups()) if m else None


def path_points(attrs):
    d = re.search(r'\bd="([^"]*)"', attrs).group(1)
    nums = [float(v) for v in re.findall(r'-?\d+(?:\.\d+)?(?:e-?\d+)?', d)]
    return list(zip(nums[0::2], nums[1::2]))


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def hex_rgb(hex_color):
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


class _Runs:
    root = None
    a = b = None

    @classmethod
    def make_runs(cls):
        if _Runs.root:
            return
        _Runs.root = tempfile.mkdtemp(prefix="accel_report_")
        _Runs.a, _Runs.proc_a = run_job(_Runs.root, "zero3", ["backend=deepspeed", "deepspeed.zero_stage=3"], 4)
        _Runs.b, _Runs.proc_b = run_job(_Runs.root, "shard_grad_op", ["backend=fsdp",
                                                                      "fsdp.sharding_strategy=SHARD_GRAD_OP"], 0)

    @classmethod
    def tearDownModule(cls):
        if _Runs.root:
            shutil.rmtree(_Runs.root, ignore_errors=True)


def tearDownModule():
    _Runs.tearDownModule()


def report(*args):
    return ts.run([ts.ACCEL, "report", *args])


class ReportTwoBackends(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _Runs.make_runs()
        for p in (_Runs.proc_a, _Runs.proc_b):
            assert p.returncode == 0, ts.describe(p)
        cls.out = os.path.join(_Runs.root, "compare")
        cls.proc = report(_Runs.a, _Runs.b, "-o", cls.out)
        assert cls.proc.returncode == 0, ts.describe(cls.proc)
        cls.page = read(os.path.join(cls.out, "report.html"))
        cls.figures = figures_of(cls.page)
        cls.metrics = [ts.read_metrics(_Runs.a), ts.read_metrics(_Runs.b)]
        cls.colors = [hex_rgb(c) for c in re.findall(r'<span class="swatch" style="background:(#[0-9a-f]{6})"',
                                                     cls.page)]

    def test_every_figure_is_there(self):
        self.assertEqual(list(self.figures), ["loss", "eval_loss", "lr", "throughput", "step_time", "peak_memory",
                                              "memory", "comm", "time"])
        self.assertEqual(len(self.colors), 2, "one row (and colour) per run in the table")
        self.assertIn("deepspeed zero_stage 3", self.page)
        self.assertIn("fsdp SHARD_GRAD_OP", self.page)
        self.assertIn("shard_grad_op: no evaluation (training.eval_every 0)", html.unescape(self.page))

    def test_curves_run_through_the_records_on_their_axes(self):
        for fid, (field, scale) in LINE_FIGURES.items():
            attrs, body = self.figures[fid]
            with self.subTest(figure=fid):
                self.assertEqual(attrs["data-kind"], "line")
                runs = [(i, [r for r in m if field in r]) for i, m in enumerate(self.metrics)]
                runs = [(i, recs) for i, recs in runs if recs]
                self.assertEqual(int(attrs["data-series"]), len(runs))
                self.assertEqual(len(runs), 1 if fid == "eval_loss" else 2)
                self.assertEqual([int(n) for n in attrs["data-points"].split()], [len(recs) for _, recs in runs])
                unit = re.search(r"\((\w+)\)$", attrs["data-y-label"])
                divisor = UNITS[unit.group(1)] if fid == "peak_memory" else 1
                x0, x1 = float(attrs["data-x-min"]), float(attrs["data-x-max"])
                y0, y1 = float(attrs["data-y-min"]), float(attrs["data-y-max"])
                steps = [r["step"] + 1 for _, recs in runs for r in recs]  # counted from 1, as the console does
                self.assertEqual((x0, x1), (min(steps), max(steps)))
                ys = [r[field] * scale / divisor for _, recs in runs for r in recs]
                lo, hi = min(ys), max(ys)
                self.assertLessEqual(y0, lo)
                self.assertGreaterEqual(y1, hi)
                # Nice ticks round each end out by less than one tick, at most 2/5 of the data's span
                # (about 5 ticks, steps of 1/2/2.5/5 x 10^k); a flat series gets a band of 10%.
                pad = 0.4 * (hi - lo) if hi > lo else 0.1 * abs(hi) + 1e-12
                self.assertGreaterEqual(y0, lo - pad - 1e-12)
                self.assertLessEqual(y1, hi + pad + 1e-12)
                left, top, w, h = (float(v) for v in attrs["data-plot"].split())
                paths = [(stroke_rgb(a), path_points(a)) for a in PATH.findall(body)]
                for i, recs in runs:
                    drawn = max((pts for rgb, pts in paths if rgb == self.colors[i]), key=len, default=[])
                    expected = [(left + (r["step"] + 1 - x0) / (x1 - x0) * w,
                                 top + h - (r[field] * scale / divisor - y0) / (y1 - y0) * h) for r in recs]
                    self.assertPolylineThrough(drawn, expected, f"run {i}")

    def assertPolylineThrough(self, drawn, expected, what):
        """The drawn polyline starts and ends at the first and last record, each of its vertices is a
        record's point, and every record's point lies on it (cairo merges a run of collinear
        segments, as a flat stretch of peak memory is, into one)."""
        self.assertGreaterEqual(len(drawn), 2 if len(expected) > 1 else 1, what)
        for a, b in ((drawn[0], expected[0]), (drawn[-1], expected[-1])):
            self.assertAlmostEqual(a[0], b[0], delta=0.01, msg=what)
            self.assertAlmostEqual(a[1], b[1], delta=0.01, msg=what)
        for v in drawn:
            self.assertTrue(any(abs(v[0] - e[0]) <= 0.01 and abs(v[1] - e[1]) <= 0.01 for e in expected),
                            f"{what}: vertex {v} is no record's point")
        for ex, ey in expected:
            seg = next((k for k in range(len(drawn) - 1) if drawn[k][0] - 0.01 <= ex <= drawn[k + 1][0] + 0.01), None)
            self.assertIsNotNone(seg, f"{what}: no segment over x {ex}")
            (ax, ay), (bx, by) = drawn[seg], drawn[seg + 1]
            y = ay if bx == ax else ay + (by - ay) * (ex - ax) / (bx - ax)
            self.assertAlmostEqual(y, ey, delta=0.01, msg=f"{what}: the line misses the record at x {ex}")

    def test_bars_hold_the_run_reports(self):
        reports = [[json.loads(read(os.path.join(d, "report", f"rank_{r}.json"))) for r in range(2)]
                   for d in (_Runs.a, _Runs.b)]
        # (groups, bars): a group per run; memory: a bar per rank and the estimate, comm: a bar per rank.
        expect = {"memory": (2, 6), "comm": (2, 4), "time": (2, 2)}
        for fid, (groups, bars) in expect.items():
            attrs, body = self.figures[fid]
            with self.subTest(figure=fid):
                self.assertEqual(attrs["data-kind"], "bar")
                self.assertEqual((int(attrs["data-groups"]), int(attrs["data-bars"])), (groups, bars))
        mem_attrs = self.figures["memory"][0]
        unit = UNITS[re.search(r"\((\w+)\)$", mem_attrs["data-y-label"]).group(1)]
        held = max(sum(v for k, v in rep["memory"].items() if k in (
            "params", "param_shards", "grads", "grad_shard", "master", "optimizer_states", "live_params_peak",
            "live_grads_peak")) for run in reports for rep in run)
        self.assertGreaterEqual(float(mem_attrs["data-y-max"]), held / unit)
        self.assertLess(float(mem_attrs["data-y-max"]), 4 * held / unit, "the axis fits the bars")
        comm_attrs = self.figures["comm"][0]
        unit = UNITS[re.search(r"\((\w+)\)$", comm_attrs["data-y-label"]).group(1)]
        bus = max(rep["comm_per_step"]["bus_bytes"] for run in reports for rep in run)
        self.assertGreater(bus, 0)
        self.assertGreaterEqual(float(comm_attrs["data-y-max"]), bus / unit)
        self.assertEqual(int(comm_attrs["data-categories"]),
                         len({k for run in reports for rep in run for k in rep["comm_per_step"]["by_kind"]}))

    def test_pngs_decode_at_their_size(self):
        for fid, (attrs, _) in self.figures.items():
            with self.subTest(figure=fid):
                path = os.path.join(self.out, attrs["data-png"])
                with Image.open(path) as im:
                    im.load()
                    self.assertEqual(im.size, tuple(int(v) for v in attrs["data-size"].split()))
                    self.assertGreater(len(im.convert("RGB").getcolors(1 << 16) or range(1 << 16)), 8,
                                       "a drawing, not a blank image")

    def test_page_is_self_contained(self):
        for pattern in (r"<script", r"<link", r"\bsrc=", r"@import", r"url\((?!#)"):
            self.assertIsNone(re.search(pattern, self.page), pattern)
        for m in re.finditer(r"https?://[^\s\"']+", self.page):
            self.assertRegex(m.group(0), r"^http://www\.w3\.org/", "only XML namespace names, never fetched")


class ReportErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _Runs.make_runs()
        assert _Runs.proc_a.returncode == 0, ts.describe(_Runs.proc_a)

    def copy_of_a(self):
        d = tempfile.mkdtemp(prefix="run_", dir=_Runs.root)
        shutil.rmtree(d)
        shutil.copytree(_Runs.a, d, ignore=shutil.ignore_patterns("checkpoints", "*.safetensors"))
        return d

    def assertExit2Naming(self, proc, *texts):
        self.assertEqual(proc.returncode, 2, ts.describe(proc))
        for t in texts:
            self.assertIn(t, proc.stderr)

    def test_bad_inputs_are_exit_2_naming_the_file(self):
        missing = os.path.join(_Runs.root, "no_such_run")
        self.assertExit2Naming(report(missing), missing, "is not a directory")
        empty = tempfile.mkdtemp(dir=_Runs.root)
        self.assertExit2Naming(report(empty), os.path.join(empty, "metrics.jsonl"), "training.output_dir")

        run = self.copy_of_a()
        metrics = os.path.join(run, "metrics.jsonl")
        text = read(metrics)
        lines = text.splitlines(keepends=True)
        write(metrics, "".join(lines[:2] + ["{\"step\": 2, \"loss\": \n"] + lines[3:]))
        self.assertExit2Naming(report(run), metrics + ":3: not JSON")
        write(metrics, text)

        rank1 = os.path.join(run, "report", "rank_1.json")
        write(rank1, "{\"rank\": 1,")
        self.assertExit2Naming(report(run), rank1, "not a run report")
        os.remove(rank1)

        job = os.path.join(run, "job.resolved.yaml")
        text = read(job)
        self.assertRegex(text, r"(?m)^  zero_stage: 3$")
        write(job, re.sub(r"(?m)^  zero_stage: 3$", "  zero_stage: 7", text))
        self.assertExit2Naming(report(run), "job.resolved.yaml", "zero_stage")
        write(job, text)

        self.assertExit2Naming(report(run, _Runs.a), "-o OUT_DIR")
        self.assertEqual(report().returncode, 2)

    def test_one_run_goes_to_its_report_folder_and_a_cut_line_is_a_note(self):
        run = self.copy_of_a()
        metrics = os.path.join(run, "metrics.jsonl")
        write(metrics, read(metrics) + "{\"step\": 12, \"lo")  # a run still writing its next line
        p = report(run)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertIn("is incomplete and was left out", p.stderr)
        page = read(os.path.join(run, "report", "report.html"))
        self.assertEqual(figures_of(page)["loss"][0]["data-points"], str(STEPS))
        self.assertTrue(os.path.exists(os.path.join(run, "report", "rank_0.json")), "the run reports stay")


class ProgressLines(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _Runs.make_runs()
        assert _Runs.proc_a.returncode == 0, ts.describe(_Runs.proc_a)
        cls.out = _Runs.proc_a.stdout

    def test_long_work_prints_a_start_and_an_end_line_each(self):
        self.assertNotIn("\r", self.out)
        weights = os.path.join(_Runs.a, "weights.safetensors")
        tasks = ["setup", "evaluation at step 4", "evaluation at step 8", "evaluation at step 12",
                 "checkpoint step_00000006", "checkpoint step_00000012", "weights export to " + weights]
        for what in tasks:
            with self.subTest(task=what):
                starts = [l for l in self.out.splitlines() if l.endswith("] " + what + " ...")]
                ends = [l for l in self.out.splitlines() if re.search(r"\] " + re.escape(what) + r" took \d+\.\d+ s", l)]
                self.assertEqual(len(starts), 1, self.out[-3000:])
                self.assertEqual(len(ends), 1, self.out[-3000:])
                self.assertTrue(starts[0].startswith("[rank 0] ") and ends[0].startswith("[rank 0] "))
        ckpt = [l for l in self.out.splitlines() if "checkpoint step_00000012 took" in l][0]
        self.assertRegex(ckpt, r"\(\d+ files?, [\d.]+ [KM]iB, ")
        self.assertNotIn("[rank 1] setup", self.out)


if __name__ == "__main__":
    unittest.main()
