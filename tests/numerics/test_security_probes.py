"""Issue 48's probes, as a hostile local user would try them, through the real launcher (SECURITY.md,
docs/design/0033). Each asserts that the attack fails and that the job either goes on unharmed or
ends at once with a message naming what was wrong (never a hang, a silent fallback or a stack trace).

- ListenersBound: a one-machine job's rendezvous store listens on loopback only, not every interface.
- StoreForgery: another process writes the keys accel reads back from PyTorch's store (which takes
  writes from anyone who reaches it): a shared-memory descriptor pointing at a segment another uid
  made (mode 0666) is never attached; forged "done" flags end the job naming the key, no stack trace.
- ElasticSlotHijack: a fake "machine 1" without the job secret connects to the elastic membership
  listener first; it is refused and named once, its terminal escapes are never printed raw, and the
  real machine 1 joins and the job trains at world 4.
- PlantedLogLink: a link planted at a rank log's name is an exit-2 error naming it; the victim
  file is untouched.
- SegmentLeak: a signal to rank 0 or the launcher while rank 0 is inside the window between creating
  its shared-memory segment and unlinking it (5 kinds) leaves nothing in /dev/shm.
- SecretNeverShown: the job secret (raw or hex) is in no argv, environment, file of the run or byte
  sent over loopback (the store's keys and values) during a 2-process job.
The store forgeries also write garbage under the segment descriptor's key (issue 48's silent TCP
fallback) and a non-numeric "done" (its stack trace).
The cross-user part (the attacker's segment) needs a second uid: it runs through `setpriv
--reuid=nobody` where the test runs as root, and skips (exit 77) otherwise.

Run: ACCEL_BINARY=build/accel ACCEL_PYTHON=... python -m unittest -v test_security_probes (from tests/numerics).
"""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_test_support as ts  # noqa: E402
from reserved_ports import reserve_port  # noqa: E402
from test_elastic_restart import Launcher  # noqa: E402
from test_trainer_end_to_end import _Base  # noqa: E402

SEGMENT_KEY = "accel/0/gloo/shm/segment"  # runtime/comm/gloo_communicator.cpp: <rendezvous prefix>gloo/shm/segment
SLOT_BYTES = 4 << 20  # ShmCollectives::kSlotBytes
HEADER_BYTES = 4096  # ShmCollectives::header_bytes(2): the header and 2 arrival counters, one page
SHM_MAGIC = 0x616363656C73686D  # "accelshm"
FORGED_TOKEN = 12345


def listening_addresses(port):
    """The local addresses of the sockets listening on TCP `port` (from /proc/net/tcp and tcp6)."""
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, hexport = fields[1].split(":")
            if fields[3] != "0A" or int(hexport, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # /proc prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, raw))
    return found


def is_loopback(address):
    return address.startswith("127.") or address == "::1" or address.startswith("::ffff:127.")


def second_uid(cmd):
    """`cmd` run as uid nobody (the other user of the probes); skips unless this test runs as root."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root to run the attacker as a second uid (setpriv --reuid=nobody)")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd]


# The attacker's segment, made by uid nobody with mode 0666 and a header that passes every check the
# old attach() made (magic, token, world, slot size): what the hijack of issue 48 used.
MAKE_SEGMENT = r"""
import os, struct, sys
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o666)
os.fchmod(fd, 0o666)
os.ftruncate(fd, int(sys.argv[2]))
os.pwrite(fd, struct.pack("<QQQQ", int(sys.argv[3]), int(sys.argv[4]), 2, int(sys.argv[5])), 0)
os.close(fd)
"""

# Writes `key = value` pairs into the job's store over and over, from the moment its port accepts
# until the job ends: PyTorch's store authenticates nobody. One forger process serves the whole test
# module: it imports torch once (about 1.7 s of CPU, more than the job it attacks costs), then forges
# into one job's store per session. A session: the test writes [port, [[key, value], ...]] as a JSON
# line and waits for "ready", runs the job, writes "stop" when the job has ended, and reads up to
# "forged N writes". The forger exits when its stdin closes.
FORGE_KEYS = r"""
import datetime, json, queue, socket, sys, threading, time
from torch.distributed import TCPStore
lines = queue.Queue()
threading.Thread(target=lambda: [lines.put(l.strip()) for l in iter(sys.stdin.readline, "")] + [lines.put(None)],
                 daemon=True).start()
while True:
    line = lines.get()
    if not line:
        break
    port, pairs = json.loads(line)
    print("ready", flush=True)
    done = threading.Event()

    def wait_for_stop():  # the "stop" line, or the end of stdin (kept for the main loop)
        if lines.get() is None:
            lines.put(None)
        done.set()
    threading.Thread(target=wait_for_stop, daemon=True).start()
    while not done.is_set():  # until the launcher listens (a refused connect makes TCPStore back off 2 s)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.005)
    store = None
    if not done.is_set():
        try:
            store = TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                             timeout=datetime.timedelta(seconds=60))
        except Exception:
            pass
    writes = 0
    while store is not None and not done.is_set():
        try:
            for key, value in pairs:
                store.set(key, value.encode())
                writes += 1
        except Exception:
            break
        time.sleep(0.002)
    done.wait()
    del store
    print(f"forged {writes} writes", flush=True)
"""
_forger = None


def forger():
    """The module's forger process (FORGE_KEYS), started at the first use."""
    global _forger
    if _forger is None or _forger.poll() is not None:
        _forger = subprocess.Popen([ts.PY, "-c", FORGE_KEYS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
    return _forger


def tearDownModule():
    if _forger is not None and _forger.poll() is None:
        _forger.stdin.close()
        try:
            _forger.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _forger.kill()
            _forger.wait()


class _ProbeBase(_Base):
    def small_job(self, d, port, world=2, steps=4, training=None, **extra):
        tokens = ts.make_tokens(os.path.join(d, "tok.bin"))
        job = ts.job(os.path.join(d, "run"), data_path=tokens, world=world, micro=2, accum=1, steps=steps,
                     eval_every=0, **(training or {}))
        job.update({"main_process_ip": "127.0.0.1", "main_process_port": port, "collective_timeout_s": 30})
        job.update(extra)
        return ts.write_job(os.path.join(d, "job.yaml"), job)

    def assertNoStackTrace(self, proc):
        for marker in ("Exception raised from", "frame #", "Did the remote server shutdown"):
            self.assertNotIn(marker, proc.stderr, f"a stack trace or the store's raw error\n{ts.describe(proc)}")

    def launch_with_forger(self, job_path, port, pairs):
        """`accel launch` while the forger (FORGE_KEYS) writes `pairs` into its store; the completed
        launch, its seconds and the forger's count of writes."""
        f = forger()
        f.stdin.write(json.dumps([port, [list(p) for p in pairs]]) + "\n")
        f.stdin.flush()
        out = self.read_forger_until(f, "ready")
        self.assertTrue(out.endswith("ready\n"), f"the forger did not start:\n{out[-2000:]}")
        try:
            started = time.monotonic()
            proc = ts.launch(job_path)
            took = time.monotonic() - started
        finally:
            f.stdin.write("stop\n")
            f.stdin.flush()
            out = self.read_forger_until(f, "forged ")
        writes = re.search(r"forged (\d+) writes", out)
        self.assertTrue(writes and int(writes.group(1)) > 0, f"the forger never reached the store:\n{out[-2000:]}")
        return proc, took, writes.group(0)

    @staticmethod
    def read_forger_until(f, prefix):
        """The forger's output lines up to and including the first that starts with `prefix` (or
        up to its end, if it died)."""
        out = ""
        for line in iter(f.stdout.readline, ""):
            out += line
            if line.startswith(prefix):
                break
        return out


class ListenersBound(_ProbeBase):
    def test_one_machine_store_listens_on_loopback_only(self):
        d = self.tmpdir()
        port = reserve_port()
        job_path = self.small_job(d, port, steps=8)
        proc = subprocess.Popen([ts.ACCEL, "launch", job_path], cwd=d, env=ts.clean_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        seen = set()
        while proc.poll() is None:
            seen.update(listening_addresses(port))
            time.sleep(0.02)
        out, err = proc.communicate()
        self.assertEqual(proc.returncode, 0, err[-3000:])
        self.assertTrue(seen, f"nothing was seen listening on port {port}")
        self.assertTrue(all(is_loopback(a) for a in seen),
                        f"the rendezvous store listens on {sorted(seen)}: reachable from other machines")


class StoreForgery(_ProbeBase):
    def test_forged_segment_of_another_uid_is_never_attached(self):
        d = self.tmpdir()
        name = f"/accel-shm-evil-{os.getpid()}-{time.monotonic_ns()}"
        path = "/dev/shm" + name
        size = HEADER_BYTES + 2 * SLOT_BYTES
        made = subprocess.run(second_uid(["/usr/bin/python3", "-c", MAKE_SEGMENT, path, str(size), str(SHM_MAGIC),
                                          str(FORGED_TOKEN), str(SLOT_BYTES)]), capture_output=True, text=True)
        self.assertEqual(made.returncode, 0, made.stderr)
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        self.assertEqual(os.stat(path).st_uid, 65534)

        port = reserve_port()
        job_path = self.small_job(d, port, steps=20)
        proc, took, forged = self.launch_with_forger(job_path, port, [(SEGMENT_KEY, f"{name} {FORGED_TOKEN} 2")])
        print(f"\nforged segment: exit {proc.returncode} after {took:.1f} s; {forged}", file=sys.stderr)
        with open(path, "rb") as f:
            f.seek(HEADER_BYTES)
            written = any(f.read(2 * SLOT_BYTES))
        self.assertFalse(written, "a rank wrote its gradients into the attacker's segment")
        self.assertNoStackTrace(proc)
        if proc.returncode != 0:  # the forged value was read: the job ends at once, naming the key
            self.assertLaunch(proc, 1, "a job whose segment descriptor was forged")
            self.assertIn(f"the rendezvous store's key {SEGMENT_KEY} does not carry this job's MAC", proc.stderr)
            self.assertLess(took, 30, "the job must end at once, not at the collective timeout")
        else:  # rank 0's own value won every read: the job trained as usual
            self.assertNotIn("timed out", proc.stderr)

    def test_bogus_segment_descriptor_never_falls_back_to_tcp_silently(self):
        # Issue 48: garbage under the descriptor's key made the job fall back to TCP without a word.
        d = self.tmpdir()
        port = reserve_port()
        job_path = self.small_job(d, port, steps=20)
        proc, took, forged = self.launch_with_forger(job_path, port, [(SEGMENT_KEY, "bogus")])
        print(f"\nbogus segment descriptor: exit {proc.returncode} after {took:.1f} s; {forged}", file=sys.stderr)
        self.assertNoStackTrace(proc)
        if proc.returncode != 0:
            self.assertLaunch(proc, 1, "a job whose segment descriptor was garbage")
            self.assertIn(f"the rendezvous store's key {SEGMENT_KEY} does not carry this job's MAC", proc.stderr)
            self.assertLess(took, 30, "the job must end at once, not at the collective timeout")
        else:  # rank 0's own value won every read: the job went on over shared memory, not TCP
            self.assertIn("collectives over gloo (shared memory)", proc.stdout + proc.stderr)

    def test_forged_done_flags_end_the_job_naming_the_key(self):
        d = self.tmpdir()
        port = reserve_port()
        job_path = self.small_job(d, port, steps=20)
        proc, took, forged = self.launch_with_forger(job_path, port, [("accel/0/done", "x"), ("accel/0/done/1", "x")])
        print(f"\nforged done: exit {proc.returncode} after {took:.1f} s; {forged}", file=sys.stderr)
        self.assertNoStackTrace(proc)
        if proc.returncode != 0:
            self.assertLaunch(proc, 1, "a job whose done flags were forged")
            self.assertIn("the rendezvous store's key accel/0/done/1 does not carry this job's MAC", proc.stderr)


    def test_forged_arrivals_are_named_and_never_shown_as_a_host(self):
        # Each rank's arrival carries its host, which only labels diagnoses (the flight recorder): a
        # forged one would blame a host that is not the rank's. It is dropped with a warning naming
        # the key, and the job goes on. Both ranks' are forged, but a rank's own write can land after
        # the forger's last one before the read (a race the attacker does not control either), so the
        # attack is repeated until a forged value is read: every launch must train and name no forged
        # host, and at least one of them must have read (and named) a forged key.
        attempts = 6
        for attempt in range(1, attempts + 1):
            d = self.tmpdir()
            port = reserve_port()
            job_path = self.small_job(d, port, steps=4)
            arrivals = [(f"accel/0/arrived/{r}", "blamed-host") for r in range(2)]
            proc, took, forged = self.launch_with_forger(job_path, port, arrivals)
            print(f"\nforged arrivals, attempt {attempt}: exit {proc.returncode} after {took:.1f} s; {forged}",
                  file=sys.stderr)
            self.assertNoStackTrace(proc)
            self.assertLaunch(proc, 0, "a job whose arrivals were forged")
            self.assertNotIn("blamed-host", proc.stderr + proc.stdout)
            if re.search(r"the rendezvous store's key accel/0/arrived/[01] does not carry this job's MAC",
                         proc.stdout + proc.stderr):
                return
        self.fail(f"no launch of {attempts} read a forged arrival: the forger never won the race, or a forged "
                  f"host was used without a word")

    def test_forged_commit_votes_end_the_job_naming_the_key(self):
        # The asynchronous checkpoint's votes (api/checkpoint_engine_async.cpp): rank 1's vote on the
        # first two saves, forged; committing on a forged "ok" would record a checkpoint not written.
        d = self.tmpdir()
        port = reserve_port()
        job_path = self.small_job(d, port, steps=8, training={"checkpoint_every": 2, "async_checkpoint": True})
        votes = [(f"accel/0/async_checkpoint/{n}/rank/1", "ok") for n in range(2)]
        proc, took, forged = self.launch_with_forger(job_path, port, votes)
        print(f"\nforged commit votes: exit {proc.returncode} after {took:.1f} s; {forged}", file=sys.stderr)
        self.assertNoStackTrace(proc)
        if proc.returncode != 0:
            self.assertLaunch(proc, 1, "a job whose checkpoint votes were forged")
            self.assertRegex(proc.stderr, r"the rendezvous store's key accel/0/async_checkpoint/[01]/rank/1 does not "
                                          r"carry this job's MAC")
            self.assertLess(took, 30, "the job must end at once, not at the collective timeout")


class ElasticSlotHijack(_ProbeBase):
    def test_fake_machine_without_the_secret_is_refused_and_the_job_goes_on(self):
        d = self.tmpdir()
        secret = os.path.join(d, "secret")
        fd = os.open(secret, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.write(fd, os.urandom(32))
        os.close(fd)
        port = reserve_port()
        job_path = self.small_job(d, port, world=4, num_machines="1:2", elastic_join_window_s=30,
                                  max_restarts=1, shutdown_grace_s=2)
        env = {"ACCEL_SECRET_FILE": secret}
        machine0 = Launcher(job_path, 0, env)
        fake = None
        machine1 = None
        try:
            deadline = time.monotonic() + 60
            while not listening_addresses(port) and time.monotonic() < deadline and machine0.proc.poll() is None:
                time.sleep(0.02)
            self.assertTrue(listening_addresses(port), "machine 0 never listened:\n" + "".join(machine0.err)[-3000:])
            self.assertTrue(all(is_loopback(a) for a in listening_addresses(port)),
                            f"the membership listener listens on {listening_addresses(port)}, not main_process_ip")
            fake = socket.create_connection(("127.0.0.1", port), timeout=10)
            fake.sendall(b"join\t1\t\x1b[2Jfake-host\nfailed\t0\t\x1b[2Jboom\n")
            time.sleep(1)  # the fake had its chance to join first
            machine1 = Launcher(job_path, 1, env)
            p1 = machine1.finish(ts.PROC_TIMEOUT_S)
            p0 = machine0.finish(ts.PROC_TIMEOUT_S)
        finally:
            if fake:
                fake.close()
            for launcher in (machine0, machine1):
                if launcher and launcher.proc.poll() is None:
                    launcher.proc.kill()
                    launcher.finish(60)
        self.assertLaunch(p0, 0, "machine 0")
        self.assertLaunch(p1, 0, "machine 1")
        refusals = [line for line in p0.stderr.splitlines() if "refused a connection to the elastic rendezvous" in line]
        self.assertEqual(len(refusals), 1, f"the fake peer is named once\n{ts.describe(p0)}")
        self.assertIn("from 127.0.0.1:", refusals[0])
        self.assertIn("did not prove it holds this job's secret", refusals[0])
        for p in (p0, p1):
            self.assertNotIn("\x1b", p.stderr + p.stdout, "a peer's control bytes were printed raw")
        self.assertIn("machines 0 and 1 of 2 joined, world 4", p0.stderr)
        self.assertNotIn("elastic restart", p0.stderr, "the fake's failure report used up a restart")


def child_with_rank(launcher, rank):
    """The pid of `launcher`'s child whose environment says RANK=`rank`, or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return None


def segments_of(launcher):
    """The names in /dev/shm of the segments of `launcher`'s workers (runtime/launch/shm_sweep.hpp)."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"accel-shm-{launcher}-")]


class SegmentLeak(_ProbeBase):
    """Issue 48: a signal in the milliseconds between rank 0 creating its segment and unlinking it left
    8 MiB in /dev/shm, 5 times of 5. Here rank 0 is frozen (SIGSTOP) inside that window, the signal is
    sent, and once the launcher has exited no segment of it is left. A SIGKILLed launcher can remove
    nothing itself (its workers die with it): the next launch on the host removes what it left."""

    def launch_into_window(self, job_path, tries=20):
        """Starts `accel launch` and freezes rank 0 while its segment is still named in /dev/shm; the
        launcher, rank 0's pid and the segment's name. Retries a launch that slipped past the window."""
        for attempt in range(1, tries + 1):
            proc = subprocess.Popen([ts.ACCEL, "launch", job_path], cwd=os.path.dirname(job_path), env=ts.clean_env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            seen, rank0 = [], None
            deadline = time.monotonic() + 120
            # Rank 0's pid first (a scan of /proc, slow under load), then only /dev/shm is polled:
            # the window lasts as long as rank 1 takes to attach, milliseconds on a quiet machine.
            while proc.poll() is None and time.monotonic() < deadline and not rank0:
                rank0 = child_with_rank(proc.pid, 0)
            while rank0 and proc.poll() is None and time.monotonic() < deadline and not seen:
                seen = segments_of(proc.pid)
            if seen:
                os.kill(rank0, signal.SIGSTOP)
                # Rank 0 cannot unlink it now, and the launcher removes it only once the group ended.
                if segments_of(proc.pid) == seen:
                    print(f"\ncaught in the window at launch {attempt}", file=sys.stderr)
                    return proc, rank0, seen[0]
                os.kill(rank0, signal.SIGCONT)
            proc.kill()
            _, err = proc.communicate()
        self.fail(f"no launch of {tries} was caught between creating and unlinking its segment; the last "
                  f"launch's exit {proc.returncode}, its stderr:\n{err[-2000:]}")

    def test_signals_inside_the_create_unlink_window_leave_no_segment(self):
        d = self.tmpdir()
        # resume never: a launch that slipped past the window trained to the end, and the next ones
        # would find nothing to train (no segment, no window) if they resumed its checkpoint.
        job_path = self.small_job(d, 0, steps=4, training={"resume": "never"}, shutdown_grace_s=1)
        kinds = [("rank 0", signal.SIGKILL), ("rank 0", signal.SIGTERM), ("launcher", signal.SIGTERM),
                 ("launcher", signal.SIGINT), ("launcher", signal.SIGKILL)]
        left = []
        for who, sig in kinds:
            proc, rank0, name = self.launch_into_window(job_path)
            os.kill(rank0 if who == "rank 0" else proc.pid, sig)
            if who == "rank 0" and sig != signal.SIGKILL:
                os.kill(rank0, signal.SIGCONT)  # a stopped process takes SIGTERM only once it runs
            _, err = proc.communicate(timeout=120)
            if who == "launcher" and sig == signal.SIGKILL:
                # Nothing of the job can act any more (its workers got SIGKILL with it): the next launch
                # of this user on the host removes segments of launchers that are gone.
                self.assertEqual(proc.returncode, -signal.SIGKILL)
                deadline = time.monotonic() + 10
                while os.path.exists(f"/proc/{rank0}") and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.assertLaunch(ts.launch(job_path), 0, "the launch after a SIGKILLed one")
            else:
                self.assertNotEqual(proc.returncode, 0, f"{who} {sig.name}: the job should have ended\n{err[-2000:]}")
            print(f"\n{who} {sig.name} inside the window of {name}: launcher exit {proc.returncode}, "
                  f"left {os.path.exists('/dev/shm/' + name)}", file=sys.stderr)
            if os.path.exists("/dev/shm/" + name):
                left.append(f"{who} {sig.name}")
                os.unlink("/dev/shm/" + name)
        self.assertEqual(left, [], "segments left in /dev/shm by a signal inside the create-unlink window")


class LoopbackCapture:
    """Every TCP payload on the loopback interface while it runs (a raw AF_PACKET socket: root only)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.payloads, self.stopped = [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped.is_set():
            try:
                frame = self.sock.recv(1 << 17)
            except socket.timeout:
                continue
            ip = frame[14:]  # the loopback device's frames carry a zeroed Ethernet header
            if len(ip) < 20:
                continue
            if ip[0] >> 4 == 4 and ip[9] == 6:
                tcp = ip[(ip[0] & 15) * 4:]
            elif ip[0] >> 4 == 6 and ip[6] == 6:
                tcp = ip[40:]
            else:
                continue
            if len(tcp) >= 20:
                self.payloads.append(tcp[(tcp[12] >> 4) * 4:])

    def stop(self):
        self.stopped.set()
        self.thread.join()
        self.sock.close()
        return b"".join(self.payloads)


def launcher_secret(launcher):
    """The job secret, read as root from the sealed memfd `launcher` hands its workers."""
    for fd in os.listdir(f"/proc/{launcher}/fd"):
        try:
            if os.readlink(f"/proc/{launcher}/fd/{fd}").startswith("/memfd:accel-job-secret"):
                with open(f"/proc/{launcher}/fd/{fd}", "rb") as f:
                    return f.read()
        except OSError:
            continue
    return None


class SecretNeverShown(_ProbeBase):
    def test_the_secret_is_in_no_argv_environment_log_or_store_traffic(self):
        """Issue 48 item 2: a one-machine job's generated secret, raw or as hex, is in no process's argv
        or environment while the job runs, in no log or output line, and in nothing sent over loopback
        (the rendezvous store's keys and values, Gloo's pairs)."""
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to capture loopback traffic and read the launcher's memfd")
        d = self.tmpdir()
        port = reserve_port()
        job_path = self.small_job(d, port, steps=12, training={"checkpoint_every": 4})
        capture = LoopbackCapture()
        proc = subprocess.Popen([ts.ACCEL, "launch", job_path], cwd=d, env=ts.clean_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        secret, argv_env = None, []
        try:
            while proc.poll() is None:
                secret = secret or launcher_secret(proc.pid)
                for entry in os.listdir("/proc"):
                    for what in ("cmdline", "environ"):
                        try:
                            with open(f"/proc/{entry}/{what}", "rb") as f:
                                argv_env.append(f.read())
                        except OSError:
                            pass
                time.sleep(0.05)
            out, err = proc.communicate()
        finally:
            traffic = capture.stop()
        self.assertEqual(proc.returncode, 0, err[-3000:])
        self.assertIsNotNone(secret, "the launcher's secret memfd was never seen")
        self.assertEqual(len(secret), 32)
        self.assertIn(b"accel/0/", traffic, "the capture saw none of the store's traffic")
        files = {os.path.join(root, n) for root, _, names in os.walk(os.path.join(d, "run")) for n in names}
        self.assertIn(os.path.join(d, "run", "logs", "rank_1.log"), files)
        written = b"".join(open(f, "rb").read() for f in sorted(files))
        places = {"argv or environment": b"".join(argv_env), "files of the run (logs, checkpoints)": written,
                  "launcher output": (out + err).encode(), "loopback traffic": traffic}
        forms = {"raw": secret, "hex": secret.hex().encode(), "HEX": secret.hex().upper().encode()}
        for place, text in places.items():
            for form, needle in forms.items():
                self.assertFalse(needle in text, f"the job secret ({form}) is in the {place}")


class PlantedLogLink(_ProbeBase):
    def test_link_at_a_rank_log_is_refused_and_the_victim_untouched(self):
        d = self.tmpdir()
        victim = os.path.join(d, "victim.txt")
        with open(victim, "w") as f:
            f.write("precious\n")
        job_path = self.small_job(d, 0)
        os.makedirs(os.path.join(d, "run", "logs"))
        link = os.path.join(d, "run", "logs", "rank_0.log")
        os.symlink(victim, link)
        proc = ts.launch(job_path)
        self.assertLaunch(proc, 2, "a launch with a link planted at rank 0's log")
        self.assertIn(link, proc.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")


if __name__ == "__main__":
    unittest.main()
