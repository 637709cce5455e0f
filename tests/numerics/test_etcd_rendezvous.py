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

(A loopback twin of EtcdAcrossNamespaces, one shared output_dir, ran until the suite's time budget
asked for one of the two: the namespace case is the one issue 52 asks for and checks what it did.)

Run: ACCEL_BINARY=build/accel python -m unittest -v test_etcd_rendezvous (from tests/numerics).
"""
import os
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
LEASE_TTL_S = 5  # HostLease::kTtlSeconds
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
                        "rdzv_backend": "etcd", "rdzv_endpoint": etcd.endpoints})
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


class EtcdAcrossNamespaces(NetnsBase):
    """The same loss of machine 0 with every machine in its own network, mount and PID namespaces
    (netns_machines.py) and the 3 etcd members on the test's bridge (the hub namespace, 10.77.0.254):
    nothing passes between the machines but the network, each keeps its checkpoints on its own disk
    (fsdp HYBRID_SHARD: each machine holds a whole replica), and machine 0 loses power (its PID
    namespace ended: launcher and workers at once). Machine 1, at 10.77.0.2, is elected host,
    serves the store on its own address and resumes from its own step-4 files at world 2, bit for bit
    a world-2 job resumed by hand from that checkpoint. Needs root (else 77)."""

    def setUp(self):
        super().setUp()
        skip_unless_etcd()

    def test_machine_0_loses_power_the_other_machine_hosts_and_resumes(self):
        cluster = self.cluster()
        m0, m1 = cluster.machines
        with EtcdCluster(self.dir, members=3, host=nm.HUB_ADDRESS, prefix=["ip", "netns", "exec", cluster.hub]) as etcd:
            job = small_job("/mnt/out", m0.address, steps=STEPS, num_machines="1:2", max_restarts=1,
                            elastic_join_window_s=JOIN_WINDOW_S, shutdown_grace_s=2, rdzv_backend="etcd",
                            rdzv_endpoint=etcd.endpoints)
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
        self.assertTrue(any("electing the next host in etcd" in line for line in lines), "\n".join(lines))
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


class EtcdHostStillRenewed(NetnsBase):
    """Machine 1 loses its connection to the host, machine 0, which stays alive and keeps renewing its
    lease in etcd: what a partition between the two machines that healed looks like to machine 1.
    The connection is ended at once by destroying machine 1's socket (`ss -K`, which resets it on
    both sides) rather than by a cut that TCP takes 15 s to give up on. Machine 0 goes on at world 2;
    machine 1 must neither elect itself (the key exists) nor wait rendezvous_timeout_s (60 s) for a
    key that never lapses: two TTLs after the loss it connects to machine 0 again, which takes it in
    for the next restart round (a healed machine joining it trains at world 4 again: Partition in
    test_netns_machines.py). Needs root (else 77)."""

    def setUp(self):
        super().setUp()
        skip_unless_etcd()

    def test_a_survivor_goes_back_to_a_host_whose_lease_is_still_renewed(self):
        cluster = self.cluster()
        m0, m1 = cluster.machines
        with EtcdCluster(self.dir, members=3, host=nm.HUB_ADDRESS, prefix=["ip", "netns", "exec", cluster.hub]) as etcd:
            job = small_job("/mnt/out", m0.address, steps=100000, num_machines="1:2", max_restarts=2,
                            elastic_join_window_s=JOIN_WINDOW_S, shutdown_grace_s=2, rdzv_backend="etcd",
                            rdzv_endpoint=etcd.endpoints)
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
            self.assertTrue(_Cut.wait_for(cluster, joined, 4 * LEASE_TTL_S), "machine 1 did not go back to machine 0:\n"
                            + "".join(line for line in m1.err if line.startswith("[launcher]") or "error" in line))
            back = joined() - broken
            for m in (m0, m1):
                cluster.kill(m.k)  # machine 1 is back in the job, waiting for its next round: what was to be shown
        text0 = "".join(line for line in m0.err if line.startswith("[launcher]"))
        text1 = "".join(line for line in m1.err if line.startswith("[launcher]"))
        print(f"\n--- host-a (machine 0) ---\n{text0}--- host-b (machine 1) ---\n{text1}"
              f"machine 1 back {back:.2f} s after its connection broke", file=sys.stderr)
        self.assertIn(f"[launcher] machine 1: lost the job's rendezvous host, machine 0 at {m0.address}:", text1)
        self.assertNotIn("hosts the job's rendezvous now", text1 + text0, "no launcher may be elected: the host lives")
        self.assertRegex(text0, r"elastic restart 1 of 2: machine 1 \(host-b\) was lost: .*; machine 1 left the job; "
                                r"continuing on machine 0 \(1 of 2\), world 4 -> 2 ")


if __name__ == "__main__":
    unittest.main()
