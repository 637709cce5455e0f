// The rendezvous port, bound by the launcher that runs rank 0 before any worker starts, and handed
// to rank 0 as an inherited listening socket (ACCEL_RENDEZVOUS_FD) for its c10d store to accept on.
// Why: a port that is only looked up (bind port 0, read it, close) is free when chosen, not
// reserved; another process can take it in the second it takes rank 0 to load torch and bind. A
// socket that stays bound from the launcher's start to its end leaves no such window, for port 0
// and for a fixed port alike, and a fixed port already in use fails at once, in the launcher.
// Invariants: the descriptor is O_CLOEXEC (only the spawner clears it, in rank 0's child); it
// listens on the job's address only (main_process_ip as it resolves on this machine: loopback for a
// one-machine job), never on every interface, so other machines' users cannot reach a one-machine
// job's store at all (SECURITY.md, docs/design/0033).
#pragma once

#include <string>

namespace accel::launch {

// Name of the variable that tells rank 0 which inherited descriptor is the listening socket.
inline constexpr const char* kRendezvousFdVariable = "ACCEL_RENDEZVOUS_FD";

// Whether a numeric address is a loopback one (127.0.0.0/8, ::1, IPv4-mapped 127.x).
bool is_loopback_address(const std::string& numeric);

class RendezvousListener {
 public:
  // Binds `port` (0: a port the kernel picks) on `host` (main_process_ip: a numeric address or a
  // name; the first of its addresses that binds) with SO_REUSEADDR and listens. Throws
  // std::runtime_error saying what failed and how to fix it (a port in use names the key).
  RendezvousListener(int port, const std::string& host);
  ~RendezvousListener();
  RendezvousListener(const RendezvousListener&) = delete;
  RendezvousListener& operator=(const RendezvousListener&) = delete;

  int fd() const { return fd_; }
  int port() const { return port_; }
  // The numeric address it listens on.
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
  int port_ = 0;
};

}  // namespace accel::launch
