"""An elastic job whose rendezvous lives in etcd (rdzv_backend etcd, docs/design/0034).

- EtcdAcrossNamespaces: a 3-member etcd cluster on the test's bridge and two machines in their own
  namespaces (netns_machines.py) running a `num_machines: 1:2` job (2 CPU ranks each, a checkpoint
  every 4 steps, node-local). Rank 2 (machine 1) freezes in step 6 (ACCEL_FAULT), so the latest
  checkpoint is step 4; then machine 0 loses power (launcher, which hosts the rounds, and workers:
  rank 0 holds the store). With the static rendezvous this ends the job (test_elastic_restart.py).
  Here machine 1's launcher stops its workers, waits for the host's lease to lapse in etcd, elects
  itself host, hosts the store and resumes from step 4 at world 2 with gradient_accumulation_steps 2
  (keep_global) within the lease TTL + 10 s, exits 0 and leaves nothing of the job in etcd; the
  result is bit for bit a job started by hand at world 2 from the same checkpoint.
- EtcdQuorumLost (loopback, no root needed): etcd loses its quorum while the job trains; every
  launcher stops the job, none elects itself.
- EtcdHostStillRenewed: machine 1's connection to the host breaks while machine 0 lives on and keeps
  its lease (a partition between the machines that healed): machine 1 goes back to machine 0 two
  TTLs later and is taken in for the next restart round; it elects nothing.
- EtcdHealedHostRejoins: machine 0, healed after losing power, finds the host elected in its place and
  joins it; the world grows back to 4 at the next restart round.

(A loopback twin of EtcdAcrossNamespaces, one shared output_dir, ran until the suite's time budget
asked for one of the two: the namespace case is the one issue 52 asks for and checks what it did.)

Run: ACCEL_BINARY=build/accel python -m unittest -v test_etcd_rendezvous (from tests/numerics).
"""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402
from etcd_cluster import EtcdCluster, skip_unless_etcd  # noqa: E402
from reserved_ports import reserve_port  # noqa: E402
from test_elastic_restart import Launcher, running, run_processes  # noqa: E402
from test_trainer_end_to_end import _Base  # noqa: E402
import netns_machines as nm  # noqa: E402
from test_netns_machines import _Base as NetnsBase, _Cut, small_job  # noqa: E402

STEPS = 10
CHECKPOINT_EVERY = 4
JOIN_WINDOW_S = 2
LEASE_TTL_S = 2  # rdzv_lease_s: etcd's shortest lease at its default election timeout (1 s x 1.5, rounded up)
# What a launcher says when its connection to the host breaks: etcd tells a dead host from a live one.
WAITS_FOR_THE_LEASE = (f"; waiting to see whether its lease in etcd lapses (then the survivors elect the next host, "
                       f"within {LEASE_TTL_S} s) or is still renewed after {2 * LEASE_TTL_S} s (then the host is alive "
                       f"and this machine goes back to it)")
FAULT = "2:hang_in_collective:6"  # rank 2, machine 1's first, freezes as step 6 starts: latest is step 4


class EtcdQuorumLost(_Base):
    """etcd loses its quorum while the job runs (2 of 3 members stopped): no host can be elected and
    the host's lease can no longer be renewed, so the host ends the job on every machine (exit 1,
    the message saying why and what to do), within a few seconds, and nothing is left running. No
    launcher elects itself: the job stops, it never splits."""

    def setUp(self):
        super().setUp()
        skip_unless_etcd()

    def test_quorum_lost_stops_the_job_on_every_machine(self):
        d = self.tmpdir()
        tokens = ts.make_tokens(os.path.join(d, "tok.bin"))
        out = os.path.join(d, "elastic")
        with EtcdCluster(d, members=3) as etcd:
            job = ts.job(out, data_path=tokens, world=4, micro=2, accum=1, steps=100000, eval_every=0, max_restarts=1)
            job.update({"num_machines": "1:2", "main_process_ip": "127.0.0.1", "main_process_port": reserve_port(),
                        "elastic_join_window_s": JOIN_WINDOW_S, "shutdown_grace_s": 2,
                        "rdzv_backend": "etcd", "rdzv_endpoint": etcd.endpoints, "rdzv_lease_s": LEASE_TTL_S})
            job_path = ts.write_job(os.path.join(d, "elastic.yaml"), job)
            launchers = [Launcher(job_path, 0), Launcher(job_path, 1)]
            seen = set()
            try:
                metrics = os.path.join(out, "metrics.jsonl")
                deadline = time.monotonic() + ts.PROC_TIMEOUT_S
                while time.monotonic() < deadline and all(x.proc.poll() is None for x in launchers):
                    if os.path.exists(metrics):
                        with open(metrics) as f:
                            if f.read().count("\n") >= 2:
                                break
                    time.sleep(0.1)
                self.assertTrue(os.path.exists(metrics), "the job never trained:\n" + "".join(launchers[0].err)[-3000:])
                seen.update(run_processes(out))
                etcd.stop_member(1)
                etcd.stop_member(2)
                lost_at = time.monotonic()
                results = [x.finish(ts.PROC_TIMEOUT_S) for x in launchers]
            finally:
                for launcher in launchers:
                    if launcher.proc.poll() is None:
                        launcher.proc.kill()
                        launcher.finish(60)
        print("\n--- machine 1's launcher after etcd lost its quorum ---", file=sys.stderr)
        for line in results[1].stderr.splitlines():
            if line.startswith("[launcher]") or line.startswith("error:"):
                print(line, file=sys.stderr)
        print(f"machines exited {launchers[0].exited_at - lost_at:.2f} s and {launchers[1].exited_at - lost_at:.2f} s "
              f"after the quorum was lost", file=sys.stderr)
        for k, p in enumerate(results):
            self.assertLaunch(p, 1, f"machine {k} once etcd lost its quorum")
            self.assertRegex(p.stderr, r"error: the elastic job ended: the etcd rendezvous at 127\.0\.0\.1:\d+,"
                                       r"127\.0\.0\.1:\d+,127\.0\.0\.1:\d+ did not keep the host's lease: etcd "
                                       r"(did not renew this host's lease in time \(etcd unreachable or without quorum|"
                                       r"no longer knows)")
            self.assertIn("the job stops rather than risk two hosts. Rerun `accel launch` on every machine when etcd "
                          "is healthy: the job resumes from the last checkpoint", p.stderr)
            self.assertNotIn("hosts the job's rendezvous now", p.stderr, "no launcher may elect itself")
        self.assertEqual(run_processes(out), [], "processes of the run left behind")
        for pid in seen:
            self.assertFalse(running(pid), f"pid {pid} is still running")


class _EtcdMachines(NetnsBase):
    """Machines as namespaces with a 3-member etcd on the test's bridge; skipped (77) without etcd."""

    def setUp(self):
        super().setUp()
        skip_unless_etcd()

    def etcd(self, cluster):
        return EtcdCluster(self.dir, members=3, host=nm.HUB_ADDRESS, prefix=["ip", "netns", "exec", cluster.hub])

    @staticmethod
    def etcd_job(out, host, etcd, steps, max_restarts):
        """An elastic `num_machines: 1:2` job whose rendezvous is `etcd`, hosted first by `host`."""
        return small_job(out, host.address, steps=steps, num_machines="1:2", max_restarts=max_restarts,
                         elastic_join_window_s=JOIN_WINDOW_S, shutdown_grace_s=2, rdzv_backend="etcd",
                         rdzv_endpoint=etcd.endpoints, rdzv_lease_s=LEASE_TTL_S)


class EtcdAcrossNamespaces(_EtcdMachines):
    """The same loss of machine 0 with every machine in its own network, mount and PID namespaces
    (netns_machines.py) and the 3 etcd members on the test's bridge (the hub namespace, 10.77.0.254):
    nothing passes between the machines but the network, each keeps its checkpoints on its own disk
    (fsdp HYBRID_SHARD: each machine holds a whole replica), and machine 0 loses power (its PID
    namespace ended: launcher and workers at once). Machine 1, at 10.77.0.2, is elected host,
    serves the store on its own address and resumes from its own step-4 files at world 2, bit for bit
    a world-2 job resumed by hand from that checkpoint. Needs root (else 77)."""

    def test_machine_0_loses_power_the_other_machine_hosts_and_resumes(self):
        cluster = self.cluster()
        m0, m1 = cluster.machines
        with self.etcd(cluster) as etcd:
            job = self.etcd_job("/mnt/out", m0, etcd, steps=STEPS, max_restarts=1)
            self.put_job(cluster, job)
            env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret"})
            fired = cluster.launch_until_fault(ts.ACCEL, env, FAULT, faulty=1, timeout=ts.PROC_TIMEOUT_S)
            self.assertTrue(fired, "the fault never fired:\n" + "".join(m1.err)[-3000:])
            keys = etcd.get_prefix(b"/accel/")
            self.assertEqual(sorted(k.rsplit(b"/", 1)[1] for k in keys), [b"host", b"round"],
                             f"the job's keys in etcd while it runs: {keys}")
            cluster.kill(0)  # machine 0 loses power: its launcher (the host) and its workers (rank 0: the store)
            killed_at = time.monotonic()
            p = cluster.wait(1, ts.PROC_TIMEOUT_S)
            left_in_etcd = etcd.get_prefix(b"/accel/")
        self.assertEqual(p.returncode, 0, ts.describe(p))
        self.assertEqual(left_in_etcd, {}, "the job's keys left in etcd after it ended")
        lines = [line for line in p.stderr.splitlines() if line.startswith("[launcher]")]
        print("\n--- machine 1's launcher (host-b, 10.77.0.2) ---\n" + "\n".join(lines), file=sys.stderr)
        restarted_at = next((t for t, line in zip(m1.times, m1.err) if "[launcher] elastic restart" in line), None)
        self.assertIsNotNone(restarted_at, ts.describe(p))
        print(f"restart line {restarted_at - killed_at:.2f} s after machine 0 lost power", file=sys.stderr)
        self.assertLess(restarted_at - killed_at, LEASE_TTL_S + 10, "the survivor went on in time")
        self.assertIn(f"[launcher] machine 1: lost the job's rendezvous host, machine 0 at {m0.address}:", "\n".join(lines))
        self.assertIn(f"[launcher] machine 1 ({m1.host}) hosts the job's rendezvous now, elected in etcd", lines)
        self.assertIn("[launcher] elastic round 0: machines 0 and 1 of 2 joined, world 4 (ranks 2-3 here)", lines)
        self.assertTrue(any(line.endswith(WAITS_FOR_THE_LEASE) for line in lines), "\n".join(lines))
        restart = [line for line in lines if line.startswith("[launcher] elastic restart")]
        self.assertEqual(len(restart), 1, "\n".join(lines))
        self.assertRegex(restart[0], r"^\[launcher\] elastic restart 1 of 1: machine 0, which hosted the rendezvous, was "
                                     r"lost: its launcher's connection closed and its lease in etcd expired; machine 0 "
                                     r"left the job; continuing on machine 1 \(1 of 2\), world 4 -> 2 \(ranks 0-1 here\), "
                                     r"gradient_accumulation_steps 1 -> 2 \(global batch of 8 rows kept\), resuming "
                                     r"from checkpoint step 4 \(/mnt/out/checkpoints/step_00000004\)$")
        # From round 1 on machine 1's rank 0 writes the metrics on its own disk.
        elastic = ts.read_metrics(m1.path("/mnt/out"))
        self.assertEqual([r["step"] for r in elastic], list(range(4, STEPS)))

        # By hand: a world-2 job (one machine, here) resumed from machine 1's step-4 checkpoint.
        ref_out = os.path.join(self.dir, "world2")
        ref = small_job(ref_out, "127.0.0.1", steps=STEPS, num_processes=2, num_machines=1, main_process_port=0)
        ref["training"].update({"gradient_accumulation_steps": 2,
                                "resume": m1.path("/mnt/out/checkpoints/step_00000004")})
        r = ts.launch(ts.write_job(os.path.join(self.dir, "world2.yaml"), ref), env_extra={"OMP_NUM_THREADS": "1"})
        self.assertEqual(r.returncode, 0, ts.describe(r))
        resumed = ts.read_metrics(ref_out)
        self.assertEqual([x["step"] for x in resumed], list(range(4, STEPS)))
        for a, b in zip(elastic, resumed):
            print(f"step {a['step']}: elastic loss {a['loss']!r}, world-2 job loss {b['loss']!r}", file=sys.stderr)
        self.assertEqual(ts.without_timing(elastic), ts.without_timing(resumed), "metrics records differ")


class EtcdHealedHostRejoins(_EtcdMachines):
    """Machine 0, the host, loses power; machine 1 is elected host and goes on at world 2; then machine
    0, healed, is started again with the same job file, as an operator would. It must find the host
    elected in its place in etcd (not campaign, not wait for a machine 0 that is itself), join it while
    its round runs, and be taken in at the next restart round (here: one of machine 1's workers
    killed), where the world grows back to 4 with the elected host's machine as rank 0. The output_dir
    is on a file system both machines share (/mnt/shared: what docs/design/0034 asks of an elastic
    job that may lose machine 0), so the grown world resumes from the newest checkpoint, whichever
    round wrote it; its steps are bit for bit a world-4 job (two launchers of two) resumed by hand from
    that checkpoint. Needs root (else 77)."""

    def test_a_healed_machine_0_joins_the_host_elected_in_its_place(self):
        cluster = self.cluster(shared=True)
        m0, m1 = cluster.machines
        out = "/mnt/shared/out"
        with self.etcd(cluster) as etcd:
            job = self.etcd_job(out, m0, etcd, steps=STEPS, max_restarts=2)
            self.put_job(cluster, job)
            env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret"})
            fired = cluster.launch_until_fault(ts.ACCEL, env, FAULT, faulty=1, timeout=ts.PROC_TIMEOUT_S)
            self.assertTrue(fired, "the fault never fired:\n" + "".join(m1.err)[-3000:] + "\n" + "".join(m0.err)[-3000:])
            cluster.kill(0)  # machine 0 loses power: its launcher (the host) and its workers (rank 0: the store)

            def said(m, text):
                return next((t for t, line in zip(list(m.times), list(m.err)) if text in line), None)

            def wait_for(what, timeout=ts.PROC_TIMEOUT_S):
                """Until what() holds, `timeout` passes or machine 1's launcher ends; what() then."""
                deadline = time.monotonic() + timeout
                while not what() and time.monotonic() < deadline and m1.proc.poll() is None:
                    time.sleep(0.05)
                return what()

            self.assertTrue(wait_for(lambda: said(m1, "[launcher] elastic restart 1 of 2")),
                            "machine 1 did not go on:\n" + "".join(m1.err)[-3000:])
            # Round 1's workers frozen, so that it is still running when machine 0 comes back.
            self.assertTrue(wait_for(lambda: len(cluster.pids(1, "accel-worker")) == 2, 60), "round 1's workers")
            workers = cluster.pids(1, "accel-worker")
            for pid in workers:
                os.kill(pid, signal.SIGSTOP)
            cluster.start(0, [ts.ACCEL, "launch", "/mnt/job.yaml", "--set", "machine_rank=0"], env)  # healed
            joined = lambda: said(m0, "joins the job at the next restart round")  # noqa: E731
            self.assertTrue(wait_for(joined, 60), "machine 0 did not join:\n" + "".join(m0.err)[-3000:])
            os.kill(workers[0], signal.SIGKILL)  # ends round 1: the next restart round takes machine 0 in
            os.kill(workers[1], signal.SIGCONT)
            p1, p0 = cluster.wait(1, ts.PROC_TIMEOUT_S), cluster.wait(0, ts.PROC_TIMEOUT_S)
            left_in_etcd = etcd.get_prefix(b"/accel/")
        lines0 = [line for line in p0.stderr.splitlines() if line.startswith("[launcher]")]
        lines1 = [line for line in p1.stderr.splitlines() if line.startswith("[launcher]")]
        print(f"\n--- {m1.host} (machine 1) ---\n" + "\n".join(lines1) +
              f"\n--- {m0.host} (machine 0, started again) ---\n" + "\n".join(lines0), file=sys.stderr)
        self.assertEqual(p1.returncode, 0, ts.describe(p1))
        self.assertEqual(p0.returncode, 0, ts.describe(p0))
        self.assertEqual(left_in_etcd, {}, "the job's keys left in etcd after it ended")
        self.assertIn(f"[launcher] machine 1 ({m1.host}) hosts the job's rendezvous now, elected in etcd", lines1)
        self.assertNotIn("hosts the job's rendezvous now", p0.stderr, "the healed machine 0 must join, not host")
        self.assertIn("[launcher] machine 0 joined while round 1 runs without it: it joins the job at the next "
                      "restart round", lines0)
        # The elected host decides on restarts, and says so (not machine 0).
        self.assertRegex("\n".join(lines1), r"(?m)^\[launcher\] machine 1: rank [01] \(pid \d+\) was killed by signal 9 "
                                            r"\(SIGKILL\); machine 1 decides on a restart round$")
        # The host's machine is rank 0, so the round lists it first.
        grown = r"elastic restart 2 of 2: .*; continuing on machines 1 and 0 \(2 of 2\), world "
        self.assertRegex("\n".join(lines1), r"(?m)^\[launcher\] " + grown.replace("; continuing", "; machine 0 joined; "
                                                                                    "continuing") +
                         r"2 -> 4 \(ranks 0-1 here\)")
        self.assertRegex("\n".join(lines0), r"(?m)^\[launcher\] " + grown + r"4 \(ranks 2-3 here\)")
        # Shared storage: the newest checkpoint every machine holds is the latest there is.
        resumed = re.search(r"(?m)^\[launcher\] elastic restart 2 of 2: .*, resuming from the newest checkpoint every "
                            r"machine holds \(this machine's latest is checkpoint step (\d+) \(/mnt/shared/out/"
                            r"checkpoints/step_\d{8}\)\)$", "\n".join(lines1))
        self.assertIsNotNone(resumed, "\n".join(lines1))
        step = int(resumed.group(1))
        print(f"the grown world resumed from step {step}", file=sys.stderr)
        elastic = [r for r in ts.read_metrics(os.path.join(cluster.shared, "out")) if r["step"] >= step]
        self.assertEqual([r["step"] for r in elastic], list(range(step, STEPS)))

        # By hand: the same job at world 4 (two launchers of two, loopback), resumed from that checkpoint.
        ref_out = os.path.join(self.dir, "world4")
        ref = small_job(ref_out, "127.0.0.1", steps=STEPS)
        ref["training"]["resume"] = os.path.join(cluster.shared, "out", "checkpoints", f"step_{step:08d}")
        procs = ts.launch_machines(ts.write_job(os.path.join(self.dir, "world4.yaml"), ref), 2,
                                   env_extra={"OMP_NUM_THREADS": "1"})
        for k, r in enumerate(procs):
            self.assertEqual(r.returncode, 0, f"world-4 job by hand, machine {k}: " + ts.describe(r))
        resumed_by_hand = ts.read_metrics(ref_out)
        for a, b in zip(elastic, resumed_by_hand):
            print(f"step {a['step']}: elastic loss {a['loss']!r}, world-4 job loss {b['loss']!r}", file=sys.stderr)
        self.assertEqual(ts.without_timing(elastic), ts.without_timing(resumed_by_hand), "metrics records differ")


class EtcdHostStillRenewed(_EtcdMachines):
    """Machine 1 loses its connection to the host, machine 0, which stays alive and keeps renewing its
    lease in etcd: what a partition between the two machines that healed looks like to machine 1.
    The connection is ended at once by destroying machine 1's socket (`ss -K`, which resets it on
    both sides) rather than by a cut that TCP takes 15 s to give up on. Machine 0 goes on at world 2;
    machine 1 must neither elect itself (the key exists) nor wait rendezvous_timeout_s (60 s) for a
    key that never lapses: two TTLs after the loss it connects to machine 0 again, which takes it in
    for the next restart round (a healed machine joining it trains at world 4 again: Partition in
    test_netns_machines.py). Needs root (else 77)."""

    def test_a_survivor_goes_back_to_a_host_whose_lease_is_still_renewed(self):
        cluster = self.cluster()
        m0, m1 = cluster.machines
        with self.etcd(cluster) as etcd:
            job = self.etcd_job("/mnt/out", m0, etcd, steps=100000, max_restarts=2)
            self.put_job(cluster, job)
            env = ts.clean_env({"OMP_NUM_THREADS": "1", "ACCEL_SECRET_FILE": "/mnt/secret"})
            for m in (m1, m0):
                cluster.start(m.k, [ts.ACCEL, "launch", "/mnt/job.yaml", "--set", f"machine_rank={m.k}"], env)

            def said(m, text):
                return next((t for t, line in zip(list(m.times), list(m.err)) if text in line), None)

            self.assertTrue(_Cut.wait_for(cluster, lambda: _Cut.steps_done(m0) >= 2, 120),
                            "round 0 never trained:\n" + "".join(m0.err)[-3000:])
            host = next(v for k, v in etcd.get_prefix(b"/accel/").items() if k.endswith(b"/host"))
            machine, address, port = host.split(b"\t")[:3]
            self.assertEqual((machine, address), (b"0", m0.address.encode()), f"the host record: {host}")
            killed = subprocess.run(["ip", "netns", "exec", m1.netns, "ss", "-K", "-t", "dst", address.decode(),
                                     "dport", "=", ":" + port.decode()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, timeout=30)
            broken = time.monotonic()
            self.assertIn(f"{address.decode()}:{port.decode()}", killed.stdout, f"ss -K destroyed nothing: {killed.stdout}")
            joined = lambda: said(m1, "joins the job at the next restart round")  # noqa: E731
            self.assertTrue(_Cut.wait_for(cluster, joined, 2 * LEASE_TTL_S + 10), "machine 1 did not go back to machine 0:\n"
                            + "".join(line for line in m1.err if line.startswith("[launcher]") or "error" in line))
            back = joined() - broken
            for m in (m0, m1):
                cluster.kill(m.k)  # machine 1 is back in the job, waiting for its next round: what was to be shown
        text0 = "".join(line for line in m0.err if line.startswith("[launcher]"))
        text1 = "".join(line for line in m1.err if line.startswith("[launcher]"))
        print(f"\n--- host-a (machine 0) ---\n{text0}--- host-b (machine 1) ---\n{text1}"
              f"machine 1 back {back:.2f} s after its connection broke", file=sys.stderr)
        self.assertIn(f"[launcher] machine 1: lost the job's rendezvous host, machine 0 at {m0.address}:", text1)
        self.assertIn(WAITS_FOR_THE_LEASE, text1)
        self.assertIn(f"[launcher] machine 1: machine 0's lease in etcd is still renewed {2 * LEASE_TTL_S} s after the "
                      "connection broke: the host is alive (the network between the machines broke, not the host); "
                      "going back to it, no host is elected", text1)
        self.assertNotIn("hosts the job's rendezvous now", text1 + text0, "no launcher may be elected: the host lives")
        self.assertRegex(text0, r"elastic restart 1 of 2: machine 1 \(host-b\) was lost: .*; machine 1 left the job; "
                                r"continuing on machine 0 \(1 of 2\), world 4 -> 2 ")


if __name__ == "__main__":
    unittest.main()
