"""Several machines for real: each machine of a job in its own network, mount, PID and UTS namespaces
(netns_machines.py), so nothing passes between machines but the network: no /dev/shm, /tmp or
output_dir in common, each its own hostname, 10.77.0.x addresses on a bridge in the test's own
namespace.

- TwoMachines: fsdp HYBRID_SHARD, 2 machines x 2 processes, checkpoints every 4 of 8 steps, each
  machine's output_dir its own. It trains bit for bit (metrics, final weights) what the same job
  trains with both launchers on one host. HYBRID_SHARD's groups all have 2 ranks (a two-term sum is
  the same in either order), so the transports may differ and the numbers may not: on one host
  every group meets in shared memory; across the namespaces the rank logs say the world and the
  replica groups (one rank per machine) run over TCP while each machine's shard group stays in
  shared memory. The workers find the output_dir node-local; after machine 1 loses its last
  checkpoint, a relaunch resumes every machine from step 4 from its own files and ends as the
  uninterrupted run did. Then the same job again with every frame between the machines held 5 ms
  (netns_wire.py in place of the bridge) and 1% of the frames each machine receives dropped (a
  classic BPF filter on its port): this kernel has no sch_netem, whose `delay 5ms loss 1%` it
  stands for. The same numbers, bit for bit (TCP retransmits what was lost).
- ElasticHostNames: an elastic job (num_machines 1:2); machine 1's namespace is ended (its launcher
  and workers die at once, as on a power loss) while its rank hangs in step 6; machine 0's launcher
  names it by its host (`machine 1 (host-b) was lost`) and goes on at world 2 to the end.
Each test asserts that nothing of its machines is left: no process, namespace or link.

Skipped (77) where namespaces cannot be made (not root, no iproute2/unshare, refused by the kernel).
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import netns_machines as nm  # noqa: E402
import trainer_test_support as ts  # noqa: E402

STEPS, AT = 8, 4
DELAY_MS = 5  # each way between machines (netns_wire.py)
PORT = 29500  # each machine has a network of its own: no other test can hold it
SECRET = b"accel netns test: 32 bytes at least, the same on every machine\n"


def small_job(out, ip, steps=STEPS, **extra):
    job = {"backend": "fsdp", "fsdp": {"sharding_strategy": "HYBRID_SHARD"}, "num_processes": 4, "num_machines": 2,
           "device": "cpu", "main_process_ip": ip, "main_process_port": PORT, "collective_timeout_s": 60,
           "rendezvous_timeout_s": 60,
           "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 64, "block_size": 16},
           "data": {"kind": "synthetic", "val_fraction": 0.0},
           "optimizer": {"name": "adamw", "lr": 1e-3},
           "scheduler": {"name": "cosine", "warmup_steps": 2},
           "training": {"max_steps": steps, "micro_batch_size": 2, "seq_len": 16, "output_dir": out,
                        "checkpoint_every": AT, "log_every": 1, "eval_every": 0}}
    job.update(extra)
    return job


def log_lines(path, text):
    with open(path) as f:
        return [line.strip() for line in f if text in line]



def flight_dumps_seen(machine):
    """The flight dumps left in a machine's directories, each with its size and groups: printed when a
    diagnosis is missing (the launcher prints none when no dump holds a group)."""
    found = []
    for folder, _, files in os.walk(machine.root):
        for name in sorted(files):
            if not (name.startswith("rank") and name.endswith(".json")) or "flight" not in folder:
                continue
            path = os.path.join(folder, name)
            try:
                with open(path) as f:
                    groups = len(json.load(f).get("groups", []))
            except (OSError, ValueError) as e:
                groups = f"unreadable ({e})"
            found.append(f"{path}: {os.path.getsize(path)} bytes, groups {groups}")
    return "\nflight dumps on this machine: " + ("; ".join(found) or "none")

class _Base(unittest.TestCase):
    def setUp(self):
        reason = nm.skip_reason()
        if reason:
            self.skipTest(reason)
        self.dir = tempfile.mkdtemp(prefix="accel_netns_")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def cluster(self, n=2, shared=False):
        cluster = nm.Cluster(n, os.path.join(self.dir, "machines"), shared=shared)
        cluster.__enter__()

        def torn_down():
            cluster.close()
            self.assertEqual(cluster.leftovers(), [], "the machines left something behind")
        self.addCleanup(torn_down)
        return cluster

    def put_job(self, cluster, job):
        """The same job file and secret on every machine, as a user copies them to each."""
        for m in cluster.machines:
            ts.write_job(os.path.join(m.root, "job.yaml"), job)
            path = os.path.join(m.root, "secret")
            with open(path, "wb") as f:
                f.write(SECRET)
            os.chmod(path, 0o600)

    def launch_all(self, cluster, env_extra=None, timeout=ts.PROC_TIMEOUT_S):
        env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret", **(env_extra or {})})
        for m in cluster.machines:
            cluster.start(m.k, [ts.ACCEL, "launch", "/mnt/job.yaml", "--set", f"machine_rank={m.k}"], env)
        return cluster.wait_all(timeout)

    def assertLaunched(self, procs, label):
        for k, p in enumerate(procs):
            self.assertEqual(p.returncode, 0, f"{label}: machine {k}\n{ts.describe(p)}")


class TwoMachines(_Base):
    def test_namespaces_train_the_single_host_run_and_resume_from_node_local_checkpoints(self):
        # The single-host run: the same job, both launchers here on loopback, one output_dir.
        single = os.path.join(self.dir, "single")
        secret = os.path.join(self.dir, "secret")
        with open(secret, "wb") as f:
            f.write(SECRET)
        os.chmod(secret, 0o600)
        job = ts.write_job(os.path.join(self.dir, "single.yaml"), small_job(single, "127.0.0.1"))
        started = time.monotonic()
        procs = ts.launch_machines(job, 2, env_extra={"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": secret})
        self.assertLaunched(procs, "single host")
        print(f"\n[single host] 2 launchers on loopback: {time.monotonic() - started:.1f} s")
        for rank in range(4):
            for line in log_lines(os.path.join(single, "logs", f"rank_{rank}.log"), "collectives over"):
                self.assertTrue(line.endswith("gloo (shared memory)"), f"one host, rank {rank}: {line}")

        cluster = self.cluster()
        m0, m1 = cluster.machines
        self.put_job(cluster, small_job("/mnt/out", m0.address))
        started = time.monotonic()
        procs = self.launch_all(cluster)
        self.assertLaunched(procs, "namespaces")
        print(f"[namespaces] 2 machines x 2 processes: {time.monotonic() - started:.1f} s")
        out0, out1 = m0.path("/mnt/out"), m1.path("/mnt/out")
        self.assertSameRun(single, out0, range(STEPS), "2 namespaces vs one host")

        # Which transport each pair of ranks used, from the rank logs of each machine.
        logs = {r: os.path.join(out0 if r < 2 else out1, "logs", f"rank_{r}.log") for r in range(4)}
        lines = {r: log_lines(logs[r], "collectives over") for r in range(4)}
        for r in range(4):
            print(f"  rank {r} ({m0.host if r < 2 else m1.host}): " + " | ".join(lines[r]))
        self.assertEqual(lines[0][0], "accel: collectives over gloo (tcp)", "the world spans 2 machines")
        expected = {0: ["(ranks 0, 1) collectives over gloo (shared memory)", "(ranks 0, 2) collectives over gloo (tcp)"],
                    1: ["(ranks 1, 3) collectives over gloo (tcp)"],
                    2: ["(ranks 2, 3) collectives over gloo (shared memory)"]}
        for r, wanted in expected.items():
            for text in wanted:
                self.assertTrue(any(line.endswith(text) for line in lines[r]), f"rank {r}: {text}\n{lines[r]}")
        self.assertEqual(lines[3], [], "rank 3 is first in no group")

        # Node-local checkpoints: every machine its own ranks' files, under one manifest.
        launcher0 = procs[0].stdout + procs[0].stderr
        self.assertIn("checkpoint storage: output_dir is node-local (2 separate storages: machine 0; machine 1)",
                      launcher0)
        ck0, ck1 = ts.ckpt_dir(out0, STEPS), ts.ckpt_dir(out1, STEPS)
        self.assertEqual(sorted(n for n in os.listdir(ck0) if n.startswith("rng_")),
                         ["rng_rank_00000.safetensors", "rng_rank_00001.safetensors"])
        self.assertEqual(sorted(n for n in os.listdir(ck1) if n.startswith("rng_")),
                         ["rng_rank_00002.safetensors", "rng_rank_00003.safetensors"])
        self.assertEqual(ts.read_bytes(os.path.join(ck0, "manifest.json")), ts.read_bytes(os.path.join(ck1, "manifest.json")))

        # Machine 1 loses its step 8: the relaunch resumes both machines from step 4, each from its own files.
        uninterrupted = os.path.join(self.dir, "uninterrupted")
        shutil.copytree(out0, uninterrupted, ignore=shutil.ignore_patterns("checkpoints"))
        shutil.rmtree(ck1)
        with open(os.path.join(out1, "checkpoints", "latest"), "w") as f:
            f.write(f"step_{AT:08d}\n")
        started = time.monotonic()
        procs = self.launch_all(cluster)
        self.assertLaunched(procs, "resume")
        print(f"[namespaces] resumed from step {AT}: {time.monotonic() - started:.1f} s")
        launcher0 = procs[0].stdout + procs[0].stderr
        self.assertIn(f"latest checkpoints differ (steps {AT} to {STEPS}", launcher0)
        self.assertIn(f"resumed from /mnt/out/checkpoints/step_{AT:08d} ({AT} steps done)", launcher0)
        self.assertSameRun(uninterrupted, out0, range(AT, STEPS), "resumed in the namespaces vs uninterrupted")

        # 5 ms more each way between the machines and 1% of the frames dropped: the same numbers.
        clean_ms = cluster.round_trip_ms(1, 0)
        cluster.wire(DELAY_MS)
        for m in cluster.machines:
            cluster.drop_frames(m.k, 1.0)
        shaped_ms = cluster.round_trip_ms(1, 0)
        print(f"[namespaces] round trip between the machines {clean_ms:.2f} ms, through the wire {shaped_ms:.2f} ms")
        self.assertGreaterEqual(shaped_ms, 2 * DELAY_MS, "the wire did not delay the frames")
        for m in cluster.machines:
            shutil.rmtree(m.path("/mnt/out"))
        started = time.monotonic()
        procs = self.launch_all(cluster)
        self.assertLaunched(procs, "5 ms and 1% loss")
        dropped = [cluster.frames_dropped(m.k) for m in cluster.machines]
        print(f"[namespaces, {DELAY_MS} ms each way, 1% of frames dropped] {time.monotonic() - started:.1f} s, frames "
              f"dropped toward machine 0 and 1: {dropped}")
        self.assertSameRun(single, out0, range(STEPS), f"2 namespaces with {DELAY_MS} ms and 1% loss vs one host")
        self.assertGreater(sum(dropped), 0, "the filter dropped nothing: the lossy case was not lossy")

    def assertSameRun(self, a, b, steps, label):
        steps = list(steps)
        ma = {r["step"]: r for r in ts.without_timing(ts.read_metrics(a))}
        mb = {r["step"]: r for r in ts.without_timing(ts.read_metrics(b))}
        self.assertEqual([ma.get(s) for s in steps], [mb.get(s) for s in steps], f"{label}: metrics differ")
        self.assertEqual(ts.read_bytes(os.path.join(a, "weights.safetensors")),
                         ts.read_bytes(os.path.join(b, "weights.safetensors")), f"{label}: weights differ")
        print(f"  {label}: steps {steps[0]}..{steps[-1]} and the final weights equal bit for bit")


class ElasticHostNames(_Base):
    def test_lost_machine_is_named_by_its_host(self):
        cluster = self.cluster()
        m0, m1 = cluster.machines
        job = small_job("/mnt/out", m0.address, steps=10, num_machines="1:2", max_restarts=1,
                        elastic_join_window_s=2, shutdown_grace_s=2)
        job["training"].update({"checkpoint_every": 4})
        self.put_job(cluster, job)
        env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret"})
        fired = cluster.launch_until_fault(ts.ACCEL, env, "2:hang_in_collective:6", faulty=1, timeout=ts.PROC_TIMEOUT_S)
        self.assertTrue(fired, "the fault never fired:\n" + "".join(m1.err)[-3000:])
        cluster.kill(1)  # machine 1 loses power: its launcher and workers at once
        p = cluster.wait(0, ts.PROC_TIMEOUT_S)
        self.assertEqual(p.returncode, 0, ts.describe(p))
        rounds = [line for line in p.stderr.splitlines() if line.startswith("[launcher] elastic")]
        print("\n" + "\n".join(rounds))
        self.assertEqual(len(rounds), 2, ts.describe(p))
        self.assertRegex(rounds[1], rf"^\[launcher\] elastic restart 1 of 1: (machine 1 \({m1.host}\) was lost: .*|"
                                    rf"machine 0 \({m0.host}\): rank [01] .*); machine 1 left the job; continuing on "
                                    r"machine 0 \(1 of 2\), world 4 -> 2 .* resuming from checkpoint step 4 ")
        self.assertIn(f"({m1.host})", "\n".join(rounds + p.stderr.splitlines()), "no message names machine 1's host")
        self.assertEqual([r["step"] for r in ts.read_metrics(m0.path("/mnt/out"))], list(range(10)))


class _Cut(_Base):
    """An elastic job (num_machines 1:2) on 2 machines joined by netns_wire.py, so that one can be cut
    off. collective_timeout_s 3: the ranks see a cut 3 s in. rendezvous_timeout_s 7: how long a restart
    round waits for a member of the last one (silent behind the cut) before it goes on without it."""

    def start_cut_job(self, steps, max_restarts, before_cut=25, **extra):
        """Starts the job (`extra`: more job keys) and returns (cluster, wire) once machine 0 recorded
        `before_cut` steps (a checkpoint every 20: step 20 is on both machines' disks)."""
        cluster = self.cluster()
        m0, m1 = cluster.machines
        wire = cluster.wire(0)
        job = small_job("/mnt/out", m0.address, steps=steps, num_machines="1:2", max_restarts=max_restarts,
                        elastic_join_window_s=2, shutdown_grace_s=2, collective_timeout_s=3, rendezvous_timeout_s=7,
                        **extra)
        job["training"].update({"checkpoint_every": 20})
        self.put_job(cluster, job)
        env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret"})
        for m in (m1, m0):
            cluster.start(m.k, [ts.ACCEL, "launch", "/mnt/job.yaml", "--set", f"machine_rank={m.k}"], env)
        self.assertTrue(self.wait_for(cluster, lambda: self.steps_done(m0) >= before_cut, 120),
                        f"round 0 never reached step {before_cut}\n" + "\n".join(
                            f"--- machine {m.k} (exit {m.proc.poll()}) ---\n" + "".join(m.err)[-3000:] for m in (m0, m1)))
        return cluster, wire

    @staticmethod
    def steps_done(m):
        """Steps rank 0 recorded on machine m's disk."""
        try:
            with open(m.path("/mnt/out/metrics.jsonl")) as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    @staticmethod
    def wait_for(cluster, what, timeout):
        """Until what() holds, `timeout` passes or a machine's launcher ends; what() at that moment."""
        deadline = time.monotonic() + timeout
        while (not what() and time.monotonic() < deadline
               and all(m.proc.poll() is None for m in cluster.machines)):
            time.sleep(0.05)
        return what()


class Partition(_Cut):
    """15 s without machine 1 in an elastic job: diagnosed, the job goes on, the machine comes back."""
    CUT_S = 15

    @staticmethod
    def launcher_lines(*machines):
        return "\n".join(f"--- {m.host} ---\n" + "".join(line for line in list(m.err)
                                                          if not line.startswith("[rank") or "error" in line or "[flight]" in line)[-4000:]
                         for m in machines)

    def test_fifteen_second_partition_of_one_machine(self):
        # The run is long; the test ends it in round 2.
        cluster, wire = self.start_cut_job(steps=100000, max_restarts=2)
        m0, m1 = cluster.machines

        def wait_for(what, timeout):
            return self.wait_for(cluster, what, timeout)

        def steps_done():
            return self.steps_done(m0)

        def said(m, text, after=0.0):
            return next((t for t, line in zip(list(m.times), list(m.err)) if text in line and t >= after), None)

        wire.partition(1)
        cut = time.monotonic()
        wait_for(lambda: time.monotonic() >= cut + self.CUT_S, self.CUT_S + 1)
        wire.heal(1)
        healed = time.monotonic()
        # The healed machine's launcher hears of the restart it missed and waits for the next round;
        # a worker of machine 0 killed then ends round 1, and round 2 takes both machines.
        joined = lambda: said(m1, "joins the job at the next restart round")  # noqa: E731
        self.assertTrue(wait_for(joined, 60), "machine 1 never came back:\n" + "".join(m1.err)[-3000:])
        workers = cluster.pids(0, "accel-worker")
        self.assertEqual(len(workers), 2, f"machine 0's workers of round 1: {workers}")
        os.kill(workers[0], 9)
        round2 = lambda: said(m0, "[launcher] elastic restart 2 of 2")  # noqa: E731
        self.assertTrue(wait_for(round2, 60), "round 2 never started:\n" + "".join(m0.err)[-3000:])
        # Rank 0 records the steps; at world 4 each step is collectives with machine 1's ranks. Round 2
        # resumes from step 20 (asserted below), which cuts machine 0's metrics.jsonl back to 20
        # records (machine 0 trained hundreds at world 2 through the cut): 3 steps of round 2 are
        # records 21-23 once the file was cut back (counting from before the cut waited for round 2 to
        # retrain all of them: up to 680 steps, 15 s and 20 s of CPU).
        before, resumed_at = steps_done(), 20
        cut_back = [before <= resumed_at + 3]

        def round2_trained():
            n = steps_done()
            cut_back[0] = cut_back[0] or n < before
            return cut_back[0] and n >= resumed_at + 3
        self.assertTrue(wait_for(round2_trained, 60), "round 2 never trained:\n" + self.launcher_lines(m0, m1))
        resumed = [line.strip() for m in (m0, m1) for line in list(m.out) if "resum" in line or "differ" in line]
        print("\n".join(resumed))
        for m in (m0, m1):
            cluster.kill(m.k)  # the run is long: round 2 training on both machines is what was to be shown
        lines = {m.k: [(t - cut, line.rstrip()) for t, line in zip(m.times, m.err)
                       if "[launcher]" in line or "[flight]" in line] for m in (m0, m1)}
        for m in (m0, m1):
            print(f"\n--- {m.host} (machine {m.k}), seconds after the cut ---")
            for t, line in lines[m.k]:
                print(f"{t:6.2f} {line}")
        print(f"healed at {healed - cut:.2f} s")
        text0 = "\n".join(line for _, line in lines[0])
        text1 = "\n".join(line for _, line in lines[1])
        # The flight recorder on each side names an op and its sequence number, and the other
        # machine's host: which op the cut caught depends on the moment (the loss all-reduce of the
        # world, or a replica group's all_reduce, with the shard group's partner behind it).
        # (Searched in the whole stderr: a worker's unfinished line may precede the launcher's.)
        for m, other in ((m0, m1.host), (m1, m0.host)):
            self.assertRegex("".join(m.err), r"\[flight\] diagnosis: .*seq \d+ of group \S+, (all_reduce|"
                                             rf"reduce_scatter|all_gather|broadcast|barrier)\b.* on {other}\b",
                             self.launcher_lines(m) + flight_dumps_seen(m))
        # Machine 0 goes on at world 2 while machine 1 is still cut off.
        restart1 = [(t, line) for t, line in lines[0] if "elastic restart 1 of 2" in line]
        self.assertEqual(len(restart1), 1, text0)
        self.assertLess(restart1[0][0], self.CUT_S, "machine 0 waited for the partition to heal")
        self.assertRegex(restart1[0][1], r"machine 1 left the job; continuing on machine 0 \(1 of 2\), world 4 -> 2 ")
        # Healed, machine 1 waits for the next restart and joins it: world 4 again.
        self.assertIn("[launcher] machine 1 joined while round 1 runs without it: it joins the job at the next restart "
                      "round", text1)
        self.assertRegex(text0, r"elastic restart 2 of 2: .*; machine 1 joined; continuing on machines 0 and 1 "
                                r"\(2 of 2\), world 2 -> 4 \(ranks 0-1 here\)")
        self.assertRegex(text1, r"elastic restart 2 of 2: .*; continuing on machines 0 and 1 \(2 of 2\), world 4 "
                                r"\(ranks 2-3 here\)")
        # Node-local checkpoints: machine 1 missed those of round 1, so round 2 resumes from the newest
        # step both machines hold (20), which each launcher's line says, naming its own latest.
        self.assertRegex(text0, r"(?m)elastic restart 2 of 2: .*, resuming from the newest checkpoint every machine holds "
                                r"\(this machine's latest is checkpoint step \d+ \(/mnt/out/checkpoints/step_\d{8}\)\)$")
        self.assertRegex(text1, r"(?m)elastic restart 2 of 2: .*, resuming from the newest checkpoint every machine holds "
                                r"\(this machine's latest is checkpoint step 20 \(/mnt/out/checkpoints/step_00000020\)\)$")
        self.assertIn("resumed from /mnt/out/checkpoints/step_00000020 (20 steps done)", "".join(m0.out + m0.err))


class PermanentPartition(_Cut):
    """Machine 1 cut off for good from an elastic job: machine 0 finishes at world 2, and machine 1's
    launcher, whose last message to machine 0 is never acknowledged, gives up on its own
    elastic_peer_timeout_s (here 5 s: Partition's default 15 s rides out its 15 s cut) after it."""
    GIVE_UP_S = 60  # how long the test waits; before TCP_USER_TIMEOUT (elastic_host.cpp) machine 1
    # waited for TCP's own ~15 minutes.
    PEER_TIMEOUT_S = 5

    def test_a_machine_cut_off_for_good_gives_up_and_the_job_ends_without_it(self):
        cluster, wire = self.start_cut_job(steps=120, max_restarts=1, elastic_peer_timeout_s=self.PEER_TIMEOUT_S)
        m0, m1 = cluster.machines
        wire.partition(1)
        cut = time.monotonic()
        p0 = cluster.wait(0, ts.PROC_TIMEOUT_S)
        p1 = cluster.wait(1, self.GIVE_UP_S)
        gave_up = m1.proc.returncode is not None and time.monotonic() - cut
        print(f"\nmachine 0 exited {p0.returncode}; machine 1 exited {p1.returncode}, {gave_up:.1f} s after the cut")
        self.assertEqual(p0.returncode, 0, ts.describe(p0))
        self.assertRegex(p0.stderr, r"elastic restart 1 of 1: .*; machine 1 left the job; continuing on machine 0 "
                                    r"\(1 of 2\), world 4 -> 2 ")
        self.assertEqual([r["step"] for r in ts.read_metrics(m0.path("/mnt/out"))][-1], 119)
        self.assertEqual(p1.returncode, 1, "machine 1 did not give up by itself:\n" + ts.describe(p1))
        self.assertIn(f"error: machine 1: lost machine 0's rendezvous at {m0.address}:{PORT}", p1.stderr)


if __name__ == "__main__":
    unittest.main()
