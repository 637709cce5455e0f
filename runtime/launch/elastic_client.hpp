// A launcher's connection to machine 0's elastic rendezvous (elastic_host.hpp, docs/design/0027).
// Invariants: the socket is close-on-exec (workers never inherit it, so the host sees this
// launcher's death as a closed connection); every wait also watches the launcher's SignalGuard, so
// SIGINT/SIGTERM ends it at once.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "runtime/common/job_secret.hpp"
#include "runtime/launch/elastic_messages.hpp"
#include "runtime/launch/signal_guard.hpp"

namespace accel::launch {

class ElasticClient {
 public:
  // Connects to addr:port, retrying until `timeout` passes (machine 0's launcher may start after
  // this one). Throws std::runtime_error naming the address and the fix when it never answers, and
  // returns unconnected (connected() false) when SIGINT/SIGTERM arrives meanwhile.
  // Then proves `secret` to the host and checks the host's proof (membership_auth.hpp); throws
  // std::runtime_error saying so when either fails.
  // `peer_timeout`: elastic_peer_timeout_s (enable_keepalive).
  ElasticClient(const std::string& addr, int port, std::chrono::milliseconds timeout, SignalGuard& guard,
                const secret::JobSecret& secret, std::chrono::seconds peer_timeout = std::chrono::seconds(15));
  ~ElasticClient();
  ElasticClient(const ElasticClient&) = delete;
  ElasticClient& operator=(const ElasticClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Readable when the host has sent something or closed: a worker group polls it to stop for a round.
  int fd() const { return fd_; }
  // False when the connection is gone.
  bool send(const ElasticMessage& message);
  // The next message from the host. nullopt: the connection closed (machine 0 is gone or sent
  // garbage), or a SIGINT/SIGTERM arrived (guard.interrupt_signal() says which).
  std::optional<ElasticMessage> next(SignalGuard& guard);
  // A whole message already received and not yet read by next(): fd() will not show it as readable.
  bool has_buffered_message() const { return pending_.find('\n') != std::string::npos; }
  // "127.0.0.1:29500", for messages.
  const std::string& address() const { return address_; }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kHandshakeTimeout{10};
  void authenticate(const secret::JobSecret& secret, SignalGuard& guard);
  // The next handshake line, or nullopt when the host closes, a SIGINT/SIGTERM arrives, the line
  // grows too long or `deadline` passes.
  std::optional<std::string> handshake_line(Clock::time_point deadline, SignalGuard& guard);

  int fd_ = -1;
  std::string address_;
  std::string pending_;  // received bytes of a line not yet complete
};

}  // namespace accel::launch
