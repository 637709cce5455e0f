// The rendezvous port, bound by the launcher that runs rank 0 before any worker starts, and handed
// to rank 0 as an inherited listening socket (ACCEL_RENDEZVOUS_FD) for its c10d store to accept on.
// Why: a port that is only looked up (bind port 0, read it, close) is free when chosen, not
// reserved; another process can take it in the second it takes rank 0 to load torch and bind. A
// socket that stays bound from the launcher's start to its end leaves no such window, for port 0
// and for a fixed port alike, and a fixed port already in use fails at once, in the launcher.
// Invariants: the descriptor is O_CLOEXEC (only the spawner clears it, in rank 0's child); it
// listens on every interface (IPv6 dual-stack, or IPv4 where IPv6 is unavailable), like the store.
#pragma once

#include <string>

namespace accel::launch {

// Name of the variable that tells rank 0 which inherited descriptor is the listening socket.
inline constexpr const char* kRendezvousFdVariable = "ACCEL_RENDEZVOUS_FD";

class RendezvousListener {
 public:
  // Binds `port` (0: a port the kernel picks) with SO_REUSEADDR and listens. Throws
  // std::runtime_error saying what failed and how to fix it (a port in use names the key).
  explicit RendezvousListener(int port);
  ~RendezvousListener();
  RendezvousListener(const RendezvousListener&) = delete;
  RendezvousListener& operator=(const RendezvousListener&) = delete;

  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace accel::launch
