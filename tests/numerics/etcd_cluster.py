"""A real etcd cluster for a test (Debian's etcd-server; docs/design/0034): `members` etcd processes
on loopback, each with its own client and peer port (reserved_ports) and data directory, started
together as one cluster and stopped (SIGTERM, then SIGKILL) when the `with` block ends. Each dies
with the test process (PR_SET_PDEATHSIG), so a test killed outright leaves none behind.

    with EtcdCluster(tmpdir, members=3) as etcd:
        job["rdzv_endpoint"] = etcd.endpoints      # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        etcd.stop_member(2)                         # one member down: the cluster keeps its quorum
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import unittest
import urllib.request

from reserved_ports import reserve_port

PR_SET_PDEATHSIG = 1


def skip_unless_etcd():
    if shutil.which("etcd") is None:
        raise unittest.SkipTest("etcd is not installed (Debian etcd-server; scripts/setup.sh --tests installs it)")


def _die_with_parent():
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class EtcdCluster:
    def __init__(self, directory, members=3, host="127.0.0.1", prefix=()):
        """`host`: the address every member listens on; `prefix`: what runs them (e.g. `ip netns exec NS`
        for members in another network namespace: then only etcdctl run the same way reaches them)."""
        self.directory = directory
        self.host = host
        self.prefix = list(prefix)
        self.names = [f"m{i}" for i in range(members)]
        self.client_ports = [reserve_port() for _ in self.names]
        self.peer_ports = [reserve_port() for _ in self.names]
        self.procs = [None] * members
        self.endpoints = ",".join(f"{host}:{p}" for p in self.client_ports)

    def __enter__(self):
        cluster = ",".join(f"{n}=http://{self.host}:{p}" for n, p in zip(self.names, self.peer_ports))
        token = f"accel-test-{os.getpid()}-{self.client_ports[0]}"
        for i, name in enumerate(self.names):
            client, peer = f"http://{self.host}:{self.client_ports[i]}", f"http://{self.host}:{self.peer_ports[i]}"
            log = open(os.path.join(self.directory, f"etcd-{name}.log"), "w")
            self.procs[i] = subprocess.Popen(
                self.prefix + ["etcd", "--name", name, "--data-dir", os.path.join(self.directory, f"etcd-{name}"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", cluster, "--initial-cluster-token", token,
                 "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            log.close()
        deadline = time.monotonic() + 30
        while not self.healthy():
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("the etcd cluster did not become healthy within 30 s; logs in " + self.directory)
            time.sleep(0.2)
        return self

    def healthy(self):
        """True when every running member answers a linearizable read (the cluster has a leader)."""
        if self.prefix:
            live = [f"http://{self.host}:{self.client_ports[i]}" for i, p in enumerate(self.procs)
                    if p is not None and p.poll() is None]
            r = subprocess.run(self.prefix + ["etcdctl", "--endpoints", ",".join(live), "--command-timeout=2s",
                                              "endpoint", "health"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env={**os.environ, "ETCDCTL_API": "3"})
            return r.returncode == 0
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{self.client_ports[i]}/v3/kv/range",
                                             data=json.dumps({"key": "aGVhbHRo"}).encode(), method="POST")
                with urllib.request.urlopen(req, timeout=2) as r:
                    json.load(r)
            except OSError:
                return False
        return True

    def get_prefix(self, prefix):
        """{key: value} of every key under `prefix` (bytes), read through the first live member."""
        import base64
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        for i, p in enumerate(self.procs):
            if p is None or p.poll() is not None:
                continue
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.client_ports[i]}/v3/kv/range",
                data=json.dumps({"key": base64.b64encode(prefix).decode(),
                                 "range_end": base64.b64encode(end).decode()}).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=5) as r:
                kvs = json.load(r).get("kvs", [])
            return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in kvs}
        return {}

    def stop_member(self, i):
        p = self.procs[i]
        if p is None:
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        self.procs[i] = None

    def __exit__(self, *exc):
        for i in range(len(self.procs)):
            self.stop_member(i)
        return False
