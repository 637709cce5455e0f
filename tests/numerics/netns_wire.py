"""A delaying wire between machines' links, run in the hub namespace of netns_machines.py in place of
its bridge, because this kernel has no sch_netem (`tc qdisc add ... netem` says "Specified qdisc
kind is unknown") and no other qdisc here can hold a frame back for a fixed time.

    ip netns exec HUB python netns_wire.py --delay-ms 5 vm0 vm1

It reads every frame a machine sends (an AF_PACKET socket on the machine's port, vm<k>) and sends it
out of every other port after the delay, in arrival order; all traffic between machines, the
launchers' rendezvous, the store and Gloo's pairs, passes through it, and nothing inside a machine
does. The sockets carry the kernel's virtio-net header (PACKET_VNET_HDR), so a large segment the
sender left for the device to split and checksum (veth offloads) passes through as it is and is
finished by the receiving side, as a bridge would.

Commands on stdin, one per line: `partition K` (drop every frame to or from machine K's port),
`heal K`, `delay MS`, `stats` (prints `stats frames=N bytes=N dropped=N`). Prints `ready` once its
sockets are bound. Exits at end of input.
"""
import argparse
import heapq
import os
import select
import socket
import sys
import threading
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4  # a frame this host sent out of the port: the wire's own, not the machine's
MAX_FRAME = 65536 + 10 + 64


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("ports", nargs="+")
    args = parser.parse_args()
    ports = []
    for name in args.ports:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
        s.bind((name, 0))
        s.setblocking(False)
        ports.append(s)
    state = {"delay": args.delay_ms / 1000.0, "cut": set(), "frames": 0, "bytes": 0, "dropped": 0}
    lock = threading.Lock()
    # Frames in flight, in due order: (due time, sequence, output port index, frame).
    queue = []
    sequence = 0
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)

    def commands():
        for line in sys.stdin:
            words = line.split()
            with lock:
                if words[:1] == ["partition"]:
                    state["cut"].add(int(words[1]))
                elif words[:1] == ["heal"]:
                    state["cut"].discard(int(words[1]))
                elif words[:1] == ["delay"]:
                    state["delay"] = float(words[1]) / 1000.0
                elif words[:1] == ["stats"]:
                    print(f"stats frames={state['frames']} bytes={state['bytes']} dropped={state['dropped']}", flush=True)
            print("ok " + line.strip(), flush=True)
        os.write(wake_w, b"q")

    threading.Thread(target=commands, daemon=True).start()
    print("ready", flush=True)
    poller = select.poll()
    for s in ports:
        poller.register(s.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    by_fd = {s.fileno(): i for i, s in enumerate(ports)}
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, frame = heapq.heappop(queue)
            try:
                ports[out].send(frame)
            except OSError:
                with lock:
                    state["dropped"] += 1
        timeout = None if not queue else max(0, int((queue[0][0] - now) * 1000) + 1)
        events = poller.poll(timeout)
        for fd, _ in events:
            if fd == wake_r:
                return
            src = by_fd[fd]
            while True:
                try:
                    frame, address = ports[src].recvfrom(MAX_FRAME)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:
                    continue
                with lock:
                    cut, delay = state["cut"], state["delay"]
                    state["frames"] += 1
                    state["bytes"] += len(frame)
                    if src in cut:
                        state["dropped"] += 1
                        continue
                due = time.monotonic() + delay
                for out in range(len(ports)):
                    if out == src:
                        continue
                    if out in cut:
                        with lock:
                            state["dropped"] += 1
                        continue
                    sequence += 1
                    heapq.heappush(queue, (due, sequence, out, frame))


if __name__ == "__main__":
    main()
