"""Fixed ports for jobs that span several launchers on loopback (port 0 works for one launcher only).

A port found by binding port 0 and closing comes from the kernel's ephemeral range: until the
launcher binds it, any connect() or port-0 bind in a parallel test (Gloo's pairs, another job) can
be given the same port. These ports come from just below the ephemeral range, which the kernel
never hands out on its own, and each is held by an exclusive lock on a file that every test process
shares (Python here, C++ in tests/support/reserved_port.hpp: same directory, same range), kept
until the process exits, so two tests never pick the same one."""
import fcntl
import os
import random
import socket
import tempfile

LOCK_DIR = os.path.join(tempfile.gettempdir(), "accel-test-ports")
SPAN = 8192  # ports below the ephemeral range to choose from

_held = []  # lock descriptors: closing one (process exit) releases its port


def port_range():
    """[low, high): the SPAN ports just below the kernel's ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default
    low = max(1024, ephemeral_low - SPAN)
    return low, ephemeral_low


def _bindable(port):
    """True when nothing listens on the port now (SO_REUSEADDR, as the launcher binds it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def reserve_port():
    """A port no other test process holds and nothing listens on, held until this process exits."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    low, high = port_range()
    start = random.SystemRandom().randrange(low, high)
    for i in range(high - low):
        port = low + (start - low + i) % (high - low)
        fd = os.open(os.path.join(LOCK_DIR, str(port)), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if not _bindable(port):
            os.close(fd)
            continue
        _held.append(fd)
        return port
    raise RuntimeError(f"no free port in {low}..{high - 1} ({LOCK_DIR} holds the test processes' locks)")
