"""The trackers (docs/design/0024) read back by their own tools: TensorBoard's EventAccumulator and
MLflow's MlflowClient over what rank 0 wrote with `tracking.log_with: [tensorboard, mlflow]`.

TrackersTrainer: the built-in trainer at world 2 on the CPU (fp16, so the loss scale is logged, and
an evaluation every 2 steps): every scalar of every metrics.jsonl record is in both trackers under
its tag at its step, and nothing else is; the resolved job is MLflow's params and TensorBoard's
`job` text. Then a resume from the step-3 checkpoint of that 6-step run, to 5 steps: both
trackers keep exactly metrics.jsonl's records (steps 0-2 of the first run, 3-4 of the second).
A flipped CRC byte is refused by TensorBoard's record reader.
TrackersApi: examples/minimal's acc.log() at world 2 goes to the same trackers, and its
acc.print_progress() prints the trainer's progress line for each step.

Tolerance: none for MLflow (values are written as %.17g, a float64 read back exactly); for
TensorBoard, the float32 rounding of Summary.Value.simple_value, its only scalar type: each value is
compared with the metrics.jsonl value rounded to float32 (round to nearest, as C++'s float() does),
for equality.
"""
import os
import shutil
import struct
import tempfile
import unittest

# MLflow 3.x opens a file store only when asked (design 0024); no telemetry from a test.
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"

import yaml  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.compat.tensorflow_stub import errors as tb_errors  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New  # noqa: E402

import trainer_test_support as ts  # noqa: E402
from api_test_support import ONE_THREAD, launch_program  # noqa: E402

EXAMPLE = os.environ.get("ACCEL_EXAMPLE_MINIMAL") or os.path.join(ts.ROOT, "build", "examples", "minimal",
                                                                  "accel_example_minimal")
EVENT_FILE = os.path.join("tensorboard", "events.out.tfevents.accel")
PROJECT = "trackers-test"
# metrics.jsonl field -> the trackers' name (design 0024, decision 2).
TRAINER_TAGS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
                "loss_scale": "train/loss_scale", "eval_loss": "eval/loss",
                "tokens_per_s": "perf/tokens_per_s", "step_time_s": "perf/step_time_s",
                "peak_mem_bytes": "perf/peak_mem_bytes", "comm_bytes": "perf/comm_bytes"}


def float32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def tensorboard_of(out):
    acc = EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def mlflow_run_of(out, project):
    client = MlflowClient(tracking_uri="file:" + os.path.join(out, "mlruns"))
    experiment = client.get_experiment_by_name(project)
    runs = client.search_runs([experiment.experiment_id])
    return client, runs


def flat_job(path):
    """job.resolved.yaml as {"section.key": value} (top-level keys bare), as YAML reads it."""
    with open(path) as f:
        job = yaml.safe_load(f)
    flat = {}
    for key, value in job.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


class _Checks(unittest.TestCase):
    def assertTrackersHold(self, out, records, tags, project):
        """Both trackers hold exactly the records' values under `tags`, at the records' steps."""
        tb = tensorboard_of(out)
        client, runs = mlflow_run_of(out, project)
        self.assertEqual(len(runs), 1, "one MLflow run per output_dir")
        run = runs[0]
        self.assertEqual(run.info.status, "FINISHED")
        self.assertEqual(run.info.run_name, os.path.basename(out))
        expected_tags = sorted(t for field, t in tags.items() if any(field in r for r in records))
        self.assertEqual(sorted(tb.Tags()["scalars"]), expected_tags)
        self.assertEqual(sorted(run.data.metrics), expected_tags)
        for field, tag in tags.items():
            want = [(r["step"], r[field]) for r in records if field in r]
            if not want:
                continue
            with self.subTest(tag=tag):
                got_tb = [(e.step, e.value) for e in tb.Scalars(tag)]
                self.assertEqual(got_tb, [(step, float32(v)) for step, v in want])
                got_ml = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag)]
                self.assertEqual(got_ml, [(step, float(v)) for step, v in want])
        return tb, run

    def assertJobRecorded(self, out, tb, run):
        """The resolved job: MLflow's params, one per key, and TensorBoard's `job` text."""
        resolved = os.path.join(out, "job.resolved.yaml")
        flat = flat_job(resolved)
        self.assertEqual(set(run.data.params), set(flat))
        for key, value in flat.items():
            self.assertEqual(yaml.safe_load(run.data.params[key]), value, key)
        texts = tb.Tensors("job")
        self.assertEqual(len(texts), 1)
        markdown = texts[0].tensor_proto.string_val[0].decode()
        with open(resolved) as f:
            dump = "".join(line for line in f if not line.startswith("#"))
        self.assertEqual("".join(line[4:] + "\n" for line in markdown.splitlines()), dump)


class TrackersTrainer(_Checks):
    def test_trainer_run_resume_and_a_damaged_record(self):
        with tempfile.TemporaryDirectory() as tmp:
            ts.make_tokens(os.path.join(tmp, "tok.bin"), n=20000)
            out = os.path.join(tmp, "run")
            job = ts.job(out, steps=6, micro=2, eval_every=2, checkpoint_every=3, warmup=1)
            job["mixed_precision"] = "fp16"
            job["tracking"] = {"log_with": ["tensorboard", "mlflow"], "project_name": PROJECT}
            path = ts.write_job(os.path.join(tmp, "job.yaml"), job)
            proc = ts.launch(path, env_extra=ts.QUIET_IDLE_THREADS)
            self.assertEqual(proc.returncode, 0, ts.describe(proc))
            first = ts.read_metrics(out)
            self.assertEqual([r["step"] for r in first], list(range(6)))
            self.assertTrue(all(set(TRAINER_TAGS) - {"eval_loss"} <= set(r) for r in first))
            self.assertEqual([r["step"] for r in first if "eval_loss" in r], [1, 3, 5])
            tb, run = self.assertTrackersHold(out, first, TRAINER_TAGS, PROJECT)
            self.assertJobRecorded(out, tb, run)
            run_id = run.info.run_id

            # A damaged record: TensorBoard's reader refuses it, and its loader stops before it.
            damaged_dir = os.path.join(tmp, "damaged", "tensorboard")
            os.makedirs(damaged_dir)
            damaged = os.path.join(damaged_dir, os.path.basename(EVENT_FILE))
            shutil.copy(os.path.join(out, EVENT_FILE), damaged)
            with open(damaged, "r+b") as f:
                data = f.read()
                offset = 0
                for _ in range(4):  # file_version, job text, steps 0 and 1: step 2's record next
                    offset += 8 + 4 + struct.unpack("<Q", data[offset:offset + 8])[0] + 4
                end = offset + 12 + struct.unpack("<Q", data[offset:offset + 8])[0] + 4
                f.seek(end - 1)  # the last byte of step 2's payload CRC
                f.write(bytes([data[end - 1] ^ 0x01]))
            reader = PyRecordReader_New(damaged)
            for _ in range(4):
                reader.GetNext()
            with self.assertRaisesRegex(tb_errors.DataLossError, "failed event crc32 check"):
                reader.GetNext()
            self.assertEqual([e.step for e in tensorboard_of(os.path.dirname(damaged_dir)).Scalars("train/loss")],
                             [0, 1])

            # Resume from the step-3 checkpoint to 5 steps: steps 3-5 of the first run go from all three.
            proc = ts.launch(path, sets=[f"training.resume={ts.ckpt_dir(out, 3)}", "training.max_steps=5"],
                             env_extra=ts.QUIET_IDLE_THREADS)
            self.assertEqual(proc.returncode, 0, ts.describe(proc))
            resumed = ts.read_metrics(out)
            self.assertEqual([r["step"] for r in resumed], list(range(5)))
            self.assertEqual(resumed[:3], first[:3])
            tb, run = self.assertTrackersHold(out, resumed, TRAINER_TAGS, PROJECT)
            self.assertEqual(run.info.run_id, run_id, "the resumed run is the same MLflow run")
            self.assertJobRecorded(out, tb, run)
            self.assertEqual(run.data.params["training.max_steps"], "5")


class TrackersApi(_Checks):
    def test_acc_log_goes_to_the_trackers(self):
        self.assertTrue(os.access(EXAMPLE, os.X_OK), f"{EXAMPLE} is not built")
        with tempfile.TemporaryDirectory() as tmp:
            strategy = {"backend": "ddp", "tracking": {"log_with": ["all"]}}
            proc, out = launch_program(tmp, "api", EXAMPLE, 2, 4, 1, 4, strategy, env_extra=ONE_THREAD)
            self.assertEqual(proc.returncode, 0, ts.describe(proc))
            records = ts.read_metrics(out)
            self.assertEqual([r["step"] for r in records], [1, 2, 3, 4])  # the example logs step() + 1
            tb, run = self.assertTrackersHold(out, records, {"loss": "loss", "grad_norm": "grad_norm"}, "accel")
            self.assertJobRecorded(out, tb, run)
            # acc.print_progress(): rank 0 prints the trainer's line for every step (log_every 1).
            for r in records:
                self.assertIn(f"[rank 0] step {r['step']}/4 | loss {r['loss']:.4f} | lr 3.00e-03 | "
                              f"grad_norm {r['grad_norm']:.3f} | ", proc.stdout)


if __name__ == "__main__":
    unittest.main()
