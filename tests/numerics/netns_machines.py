"""Machines as namespaces: each machine of a job in its own network, mount, PID and UTS namespaces,
so nothing passes between machines but the network (issue 52; docs/development.md#machines-as-namespaces).

    with Cluster(2) as cluster:                       # a hub namespace with a bridge, 2 machines
        p0 = cluster.start(0, [ACCEL, "launch", "/mnt/job.yaml", "--set", "machine_rank=0"])
        ...
        results = cluster.wait_all(timeout)

Layout (all names carry the test's pid, so parallel tests never meet and a dead test's leftovers
are recognised and swept by the next one):
- hub namespace `accnm<pid>h`: bridge `br0` at 10.77.0.254/24, one veth end `vm<k>` per machine;
- machine namespace `accnm<pid>m<k>`: `eth0` at 10.77.0.<k+1>/24 and `lo`; hostname `host-<letter>`
  (a UTS namespace); its own /etc/hosts names the other machines by address and itself on
  127.0.1.1, as Debian's installer does;
- every process of machine k runs under `ip netns exec <ns> unshare --mount --pid --fork --mount-proc
  --uts`: a private /dev/shm and /tmp (empty tmpfs), /proc showing its own processes only, and its
  root directory `<tmp>/machine<k>` bind-mounted at /mnt (job file, data, output_dir): the test reads
  it afterwards from the host, no machine sees another's. With `Cluster(n, dir, shared=True)` one
  more directory, `<tmp>/shared`, is bind-mounted at /mnt/shared on every machine: a shared file
  system (an output_dir every machine reads and writes).

Teardown (close(), also on a failed test or an exception): every machine's PID namespace is ended
by killing its init (the kernel kills every process in it), the namespaces are deleted, and
assert_clean() checks that no process is left in any of the machines' PID or network namespaces, no
namespace name and no link of the test's remains. A test killed outright (ctest's timeout) still
leaves no process: the machine's unshare dies with the test (PR_SET_PDEATHSIG) and takes its init
with it (--kill-child); the names it left are swept by the next Cluster.

Needs root, iproute2 (ip netns, veth, bridge) and util-linux's unshare; where any is missing or
refused, skip_reason() says why (the tests skip with 77).
"""
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

SUBNET = "10.77.0"
HUB_ADDRESS = SUBNET + ".254"
PREFIX = "accnm"
PR_SET_PDEATHSIG = 1


def machine_address(k):
    return f"{SUBNET}.{k + 1}"


def machine_host(k):
    return "host-" + "abcdefghijklmnopqrstuvwxyz"[k]


def _run(*cmd, check=True):
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def _netns_names():
    p = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies (survives exec of ip and unshare)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _namespace_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def processes_in(namespace_kind, inodes):
    """Pids of live processes whose `namespace_kind` (net, pid) namespace is one of `inodes`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        ino = _namespace_inode(f"/proc/{pid}/ns/{namespace_kind}")
        if ino is not None and ino in inodes:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue  # a zombie holds nothing but its pid until its parent reaps it
            except OSError:
                continue
            found.append(int(pid))
    return found


def sweep_stale():
    """Deletes namespaces a Cluster of a process that no longer exists left behind (a test killed
    outright). Their processes died with the test (see the module's docstring)."""
    for name in _netns_names():
        if not name.startswith(PREFIX):
            continue
        rest = name[len(PREFIX):]
        digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]  # the creating test's pid
        if digits.isdigit() and not os.path.exists(f"/proc/{digits}"):
            _run("ip", "netns", "del", name, check=False)


def skip_reason():
    """Why machines cannot be made here, or None."""
    if os.geteuid() != 0:
        return "machines as namespaces need root (ip netns, unshare --pid)"
    for tool in ("ip", "unshare", "mount", "hostname"):
        if not shutil.which(tool):
            return f"{tool} is not installed (Debian: iproute2, util-linux, mount, hostname)"
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        p = _run("ip", "netns", "add", probe, check=False)
        if p.returncode != 0:
            return "ip netns add is refused here: " + p.stderr.strip()
        p = _run("ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1", check=False)
        if p.returncode != 0:
            return "veth pairs are refused here: " + p.stderr.strip()
        p = _run("ip", "-n", probe, "link", "add", "b0", "type", "bridge", check=False)
        if p.returncode != 0:
            return "bridges are refused here: " + p.stderr.strip()
        p = _run("ip", "netns", "exec", probe, "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--uts",
                 "sh", "-c", "hostname probe && mount -t tmpfs none /dev/shm", check=False)
        if p.returncode != 0:
            return "unshare --mount --pid --uts with a tmpfs is refused here: " + p.stderr.strip()
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def host_tmp_paths():
    """The paths under the host's /tmp that a machine's commands need: this checkout (the accel binary,
    the tests), the accel binary named by ACCEL_BINARY, and the Python environment (libtorch)."""
    needed = {os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..")), os.path.realpath(sys.prefix)}
    if os.environ.get("ACCEL_BINARY"):
        needed.add(os.path.dirname(os.path.realpath(os.environ["ACCEL_BINARY"])))
    under_tmp = sorted(p for p in needed if p.startswith("/tmp/") and ":" not in p)
    return [p for p in under_tmp if not any(p.startswith(q + "/") for q in under_tmp)]  # outermost only


# What each machine's init runs: its own /mnt, /tmp, /dev/shm, /etc/hosts and hostname, then the
# command (not exec'd: sh stays the namespace's init and reaps what is orphaned). What the command
# reads from the host's /tmp (a clone, a build or the Python environment placed there) is bound back
# into the machine's empty /tmp, and nothing else of it.
MACHINE_SCRIPT = r"""
set -e
root="$1"; host="$2"; shared="$3"; keep="$4"; shift 4
mount --bind "$root" /mnt
if [ "$shared" != - ]; then mount --bind "$shared" /mnt/shared; fi
if [ "$keep" != - ]; then mkdir -p /mnt/.host-tmp; mount --bind /tmp /mnt/.host-tmp; fi
mount -t tmpfs -o mode=1777,size=512m machine-tmp /tmp
if [ "$keep" != - ]; then
  IFS=:
  for p in $keep; do mkdir -p "$p"; mount --bind "/mnt/.host-tmp/${p#/tmp/}" "$p"; done
  unset IFS
  umount -l /mnt/.host-tmp; rmdir /mnt/.host-tmp
fi
mount -t tmpfs -o mode=1777,size=512m machine-shm /dev/shm
mount --bind /mnt/.hosts /etc/hosts
hostname "$host"
readlink /proc/self/ns/pid > /mnt/.pid-namespace
cd /mnt
set +e
"$@"
"""


class Machine:
    """One machine: its namespace, address, hostname and root directory (on the host)."""

    def __init__(self, cluster, k):
        self.k = k
        self.netns = f"{cluster.tag}m{k}"
        self.address = machine_address(k)
        self.host = machine_host(k)
        self.root = os.path.join(cluster.dir, f"machine{k}")
        self.proc = None
        self.out, self.err = [], []
        self._readers = []
        self.pid_namespace = None

    def path(self, inside):
        """The host path of `inside`, a path under the machine's /mnt."""
        rel = os.path.relpath(inside, "/mnt")
        if rel.startswith(".."):
            raise ValueError(f"{inside} is not under the machine's /mnt")
        return os.path.join(self.root, rel)


class Cluster:
    """`n` machines on one bridge in a hub namespace of the test's own (see the module's docstring)."""

    def __init__(self, n, workdir, shared=False):
        sweep_stale()
        self.shared = os.path.join(workdir, "shared") if shared else None
        self.tag = f"{PREFIX}{os.getpid()}"
        if any(name.startswith(self.tag) for name in _netns_names()):
            raise RuntimeError(f"namespaces {self.tag}* exist already: one Cluster per process at a time")
        self.hub = self.tag + "h"
        self.dir = workdir
        self.machines = [Machine(self, k) for k in range(n)]
        self.net_inodes = set()
        self.pid_inodes = set()
        # Descriptors that keep this cluster's namespaces from being freed until the process ends: the
        # kernel gives a freed namespace's inode number to the next namespace made, which may be another
        # test's machine (two namespace tests side by side: one's teardown, killing what was left in its
        # machines' PID namespaces by inode, killed the other's machine 3-5 s into its run).
        self._pinned = []
        self.closed = False

    # --- building -------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _build(self):
        _run("ip", "netns", "add", self.hub)
        self.net_inodes.add(self._pin(f"/run/netns/{self.hub}"))
        _run("ip", "-n", self.hub, "link", "set", "lo", "up")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for m in self.machines:
            _run("ip", "netns", "add", m.netns)
            self.net_inodes.add(self._pin(f"/run/netns/{m.netns}"))
            _run("ip", "-n", self.hub, "link", "add", f"vm{m.k}", "type", "veth", "peer", "name", "eth0",
                 "netns", m.netns)
            _run("ip", "-n", self.hub, "link", "set", f"vm{m.k}", "master", "br0")
            _run("ip", "-n", self.hub, "link", "set", f"vm{m.k}", "up")
            _run("ip", "-n", m.netns, "link", "set", "lo", "up")
            _run("ip", "-n", m.netns, "addr", "add", f"{m.address}/24", "dev", "eth0")
            _run("ip", "-n", m.netns, "link", "set", "eth0", "up")
            os.makedirs(m.root, exist_ok=True)
            if self.shared:
                os.makedirs(self.shared, exist_ok=True)
                os.makedirs(os.path.join(m.root, "shared"), exist_ok=True)  # its mount point
            # As Debian's installer writes it: the machine's own name on 127.0.1.1, so nothing may
            # take the address peers reach from what the host name resolves to (bind_address.hpp).
            with open(os.path.join(m.root, ".hosts"), "w") as f:
                f.write(f"127.0.0.1 localhost\n127.0.1.1 {m.host}\n" +
                        "".join(f"{o.address} {o.host}\n" for o in self.machines if o is not m))

    # --- running --------------------------------------------------------------------------------
    def start(self, k, command, env):
        """Runs `command` on machine k (its cwd /mnt), stdout and stderr read live. One at a time per machine."""
        m = self.machines[k]
        if m.proc is not None and m.proc.poll() is None:
            raise RuntimeError(f"machine {k} is still running {m.proc.args}")
        if m.proc is not None:  # started again (a machine that lost power, healed): its last run's pipes
            for t in m._readers:
                t.join(10)
            m.proc.stdout.close()
            m.proc.stderr.close()
        m.out, m.err, m.times = [], [], []
        cmd = ["ip", "netns", "exec", m.netns, "unshare", "--mount", "--pid", "--fork", "--mount-proc", "--uts",
               "--propagation", "private", "--kill-child=SIGKILL", "sh", "-c", MACHINE_SCRIPT, "machine",
               m.root, m.host, self.shared or "-", ":".join(host_tmp_paths()) or "-", *command]
        m.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=_die_with_parent)
        m.started = time.monotonic()

        def read(stream, sink, stamp):
            for line in stream:
                if stamp:
                    m.times.append(time.monotonic())
                sink.append(line)

        m._readers = [threading.Thread(target=read, args=(m.proc.stdout, m.out, False), daemon=True),
                      threading.Thread(target=read, args=(m.proc.stderr, m.err, True), daemon=True)]
        for t in m._readers:
            t.start()
        return m

    def launch_until_fault(self, accel, env, fault, faulty, timeout):
        """`accel launch /mnt/job.yaml` on every machine, machine `faulty` with ACCEL_FAULT=`fault`
        (machine 0 last, as an operator would start the host); returns once that machine printed its
        ACCEL_FAULT line (True), or ended or `timeout` passed without it (False)."""
        for k in reversed(range(len(self.machines))):
            self.start(k, [accel, "launch", "/mnt/job.yaml", "--set", f"machine_rank={k}"],
                       {**env, "ACCEL_FAULT": fault} if k == faulty else env)
        m = self.machines[faulty]
        deadline = time.monotonic() + timeout
        fired = lambda: any("ACCEL_FAULT:" in line for line in list(m.err))  # noqa: E731
        while not fired() and m.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return fired()

    def _pin(self, path):
        """The inode of the namespace at `path`, which stays this cluster's (see _pinned)."""
        fd = os.open(path, os.O_RDONLY)
        self._pinned.append(fd)
        return os.fstat(fd).st_ino

    def _record_pid_namespace(self, m):
        """Machine m's PID namespace, while its unshare runs: the one its init wrote into
        /mnt/.pid-namespace and unshare's children live in, pinned. A machine that has ended is not
        recorded then (its number may be another's by now; the kernel killed what was in it)."""
        if m.proc is None or m.proc.poll() is not None:
            return
        try:
            with open(os.path.join(m.root, ".pid-namespace")) as f:
                written = int(f.read().strip().split("[", 1)[1].rstrip("]"))  # pid:[4026532xxx]
            fd = os.open(f"/proc/{m.proc.pid}/ns/pid_for_children", os.O_RDONLY)
        except (OSError, IndexError, ValueError):
            return
        if os.fstat(fd).st_ino != written or written in self.pid_inodes:  # not started yet, or known
            os.close(fd)
            if written in self.pid_inodes:
                m.pid_namespace = written
            return
        m.pid_namespace = written
        self.pid_inodes.add(written)
        self._pinned.append(fd)

    def wait(self, k, timeout):
        """Machine k's command to its end; a CompletedProcess (stdout, stderr as text)."""
        m = self.machines[k]
        self._record_pid_namespace(m)
        try:
            m.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(k)
        for t in m._readers:
            t.join(10)
        self._record_pid_namespace(m)
        m.proc.stdout.close()
        m.proc.stderr.close()
        return subprocess.CompletedProcess(m.proc.args, m.proc.returncode, "".join(m.out), "".join(m.err))

    def wait_all(self, timeout):
        deadline = time.monotonic() + timeout
        return [self.wait(m.k, max(1.0, deadline - time.monotonic())) for m in self.machines]

    def kill(self, k):
        """Machine k loses power: its unshare is killed, which kills its init, and the kernel every
        process of its PID namespace."""
        m = self.machines[k]
        if m.proc is not None and m.proc.poll() is None:
            self._record_pid_namespace(m)
            m.proc.kill()
            m.proc.wait()

    def pids(self, k, needle):
        """Host pids of machine k's live processes whose command line contains `needle`."""
        m = self.machines[k]
        self._record_pid_namespace(m)
        found = []
        for pid in processes_in("pid", self.pid_inodes):
            if _namespace_inode(f"/proc/{pid}/ns/pid") != m.pid_namespace:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle.encode() in f.read().replace(b"\0", b" "):
                        found.append(pid)
            except OSError:
                continue
        return found

    # --- shaping the links ------------------------------------------------------------------------
    def tc(self, *args):
        """tc in the hub namespace, where machine k's link is the bridge port vm<k>."""
        return _run("ip", "netns", "exec", self.hub, "tc", *args)

    def drop_frames(self, k, percent):
        """Drops `percent` % of the frames sent to machine k, at random: a classic BPF filter on the
        egress of its bridge port (direct action: TC_ACT_SHOT, 2, when the kernel's per-packet
        random number is below the threshold, else TC_ACT_OK, 0). This kernel has no sch_netem
        ("Specified qdisc kind is unknown"), which would do it with `netem loss`. The threshold must
        stay below 2^31: the kernel turns the classic jump into a 64-bit compare of a sign-extended
        immediate, so a larger one reads as negative and everything is dropped."""
        threshold = int(percent / 100 * 2 ** 32)
        if not 0 < threshold < 2 ** 31:
            raise ValueError(f"drop_frames: {percent} % is outside (0, 50)")
        self.tc("qdisc", "add", "dev", f"vm{k}", "clsact")
        self.tc("filter", "add", "dev", f"vm{k}", "egress", "bpf", "da", "bytecode",
                f"4,32 0 0 4294963256,53 0 1 {threshold},6 0 0 0,6 0 0 2")

    def frames_dropped(self, k):
        """How many frames toward machine k the filter dropped so far (its action's statistics)."""
        text = self.tc("-s", "qdisc", "show", "dev", f"vm{k}").stdout
        found = [int(x) for x in re.findall(r"dropped (\d+)", text)]
        return max(found) if found else 0

    def wire(self, delay_ms):
        """Takes the machines' ports off the bridge and joins them with netns_wire.py instead: every
        frame between machines held `delay_ms`, and partition()/heal() of one machine. Returns the
        Wire; close() of the cluster ends it."""
        for m in self.machines:
            _run("ip", "-n", self.hub, "link", "set", f"vm{m.k}", "nomaster")
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_wire.py")
        proc = subprocess.Popen(["ip", "netns", "exec", self.hub, sys.executable, script, "--delay-ms", str(delay_ms),
                                 *[f"vm{m.k}" for m in self.machines]],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
        self._wire = Wire(proc)
        return self._wire

    def round_trip_ms(self, a, b, port=5999, count=20):
        """The median time of a one-byte TCP exchange from machine a to machine b (network only)."""
        server = (f"import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
                  f"s.bind(('{self.machines[b].address}',{port}));s.listen();print('up',flush=True)\n"
                  f"c,_=s.accept();c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)\n"
                  f"for _ in range({count}): c.sendall(c.recv(1))\n")
        client = (f"import socket,time\nc=socket.create_connection(('{self.machines[b].address}',{port}))\n"
                  f"c.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1);t=[]\n"
                  f"for _ in range({count}):\n a=time.monotonic();c.sendall(b'x');c.recv(1);t.append(time.monotonic()-a)\n"
                  f"print(sorted(t)[len(t)//2]*1000)\n")
        srv = subprocess.Popen(["ip", "netns", "exec", self.machines[b].netns, sys.executable, "-c", server],
                               stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
        try:
            srv.stdout.readline()
            out = _run("ip", "netns", "exec", self.machines[a].netns, sys.executable, "-c", client).stdout
        finally:
            srv.wait(30)
            srv.stdout.close()
        return float(out)

    # --- teardown -------------------------------------------------------------------------------
    def close(self):
        if self.closed:
            return
        self.closed = True
        if getattr(self, "_wire", None) is not None:
            self._wire.close()
        for m in self.machines:
            self.kill(m.k)
            self._record_pid_namespace(m)
            if m.proc is not None:
                for t in m._readers:
                    t.join(10)
                m.proc.stdout.close()
                m.proc.stderr.close()
        # The kernel's kills of a namespace's processes are asynchronous, and slow on a loaded
        # machine: what is still there is killed again, by pid, for up to 30 s.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = processes_in("pid", self.pid_inodes)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for name in [m.netns for m in self.machines] + [self.hub]:
            _run("ip", "netns", "del", name, check=False)

    def leftovers(self):
        """What of this cluster still exists after close(): a list of descriptions (empty: clean)."""
        left = []
        left += [f"process {p} in a machine's PID namespace" for p in processes_in("pid", self.pid_inodes)]
        left += [f"process {p} in the cluster's network namespaces" for p in processes_in("net", self.net_inodes)]
        left += [f"namespace {n}" for n in _netns_names() if n.startswith(self.tag)]
        links = _run("ip", "-o", "link", "show", check=False).stdout
        left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
                 if line.split(":")[1].strip().split("@")[0] in {f"vm{m.k}" for m in self.machines}]
        return left


class Wire:
    """netns_wire.py running in the hub namespace, driven by its stdin (see that file)."""

    def __init__(self, proc):
        self.proc = proc
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            raise RuntimeError(f"netns_wire.py did not start: {line!r}")

    def command(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        answer = ""
        while not answer.startswith("ok "):
            answer = self.proc.stdout.readline()
            if not answer:
                raise RuntimeError(f"netns_wire.py ended before answering {text!r}")
            if answer.startswith("stats "):
                result = dict(kv.split("=") for kv in answer.split()[1:])
        return {k: int(v) for k, v in result.items()} if text == "stats" else None

    def partition(self, k):
        self.command(f"partition {k}")

    def heal(self, k):
        self.command(f"heal {k}")

    def stats(self):
        return self.command("stats")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
