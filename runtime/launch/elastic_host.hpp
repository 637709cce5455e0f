// Machine 0's side of an elastic job's rendezvous (docs/design/0027): a TCP server on
// main_process_port, run on a thread of machine 0's launcher, where every launcher (machine 0's own
// too, through loopback) joins the rounds MembershipRounds keeps.
// Why a thread: the launcher's main thread blocks in its worker group's poll loop (and must: it is
// the thread the workers' PR_SET_PDEATHSIG is tied to), while the rounds must go on being served.
// Invariants: no byte of a connection is read as a message before it has proved the job secret
// (membership_auth.hpp); the thread touches nothing but its own sockets and state, and blocks the signals
// SignalGuard routes (they reach the main thread); every socket is close-on-exec, so no worker
// holds a launcher's connection open after its launcher is gone; the destructor stops the thread
// and closes every connection.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/common/job_secret.hpp"

#include "runtime/launch/membership_rounds.hpp"
#include "runtime/launch/rendezvous_listener.hpp"

namespace accel::launch {

class ElasticHost {
 public:
  // Binds `port` on `address` (main_process_ip; throws std::runtime_error naming the port when it
  // cannot) and starts serving rounds with these limits. Every connection first proves `secret`
  // (membership_auth.hpp); one that does not is closed and named once on stderr.
  ElasticHost(int port, const std::string& address, const RoundLimits& limits, const secret::JobSecret& secret);
  ~ElasticHost();
  ElasticHost(const ElasticHost&) = delete;
  ElasticHost& operator=(const ElasticHost&) = delete;

  int port() const { return listener_.port(); }
  // Ends the job for every launcher with exit code 1 and `why` (safe from any thread): a host elected
  // in etcd whose lease may lapse stops serving before another can be elected (docs/design/0034).
  void abandon(const std::string& why);

 private:
  void serve();

  // One accepted connection: authenticated once its launcher proved the secret over `nonce`.
  struct Connection {
    std::string peer;     // numeric address:port
    std::string nonce;    // the host's challenge
    std::chrono::steady_clock::time_point accepted;
    bool authenticated = false;
    std::string pending;  // bytes of a line not yet complete
  };
  // How long a connection may take to prove the secret before it is closed.
  static constexpr std::chrono::seconds kHandshakeTimeout{10};

  RendezvousListener listener_;
  RoundLimits limits_;
  secret::JobSecret secret_;
  int wake_[2] = {-1, -1};  // a byte: kStop (the destructor) or kAbandon (abandon())
  std::mutex abandon_mutex_;
  std::string abandon_why_;
  std::thread thread_;
};

// TCP keepalive on a launcher connection: a machine that loses power (no FIN), or a network that
// stops carrying the connection, is noticed as a closed connection within about `peer_timeout`
// (elastic_peer_timeout_s).
void enable_keepalive(int fd, std::chrono::seconds peer_timeout);

}  // namespace accel::launch
