#include "runtime/launch/elastic_host.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/launch/line_relay.hpp"
#include "runtime/launch/membership_auth.hpp"

namespace accel::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kMaxWait{1000};  // re-check the rounds' clock at least this often
constexpr size_t kMaxLine = 64 * 1024;                // a launcher's line longer than this is garbage

// "10.0.0.7:41234": who connected, for the refusal's line.
std::string peer_name(const sockaddr_storage& peer, socklen_t len) {
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<const sockaddr*>(&peer), len, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

bool send_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void enable_keepalive(int fd, std::chrono::seconds peer_timeout) {
  // An idle connection is probed after a third of the timeout, then every sixth (15 s: 5 s, then 2 s).
  const int timeout_s = static_cast<int>(peer_timeout.count());
  int on = 1, idle = std::max(1, timeout_s / 3), interval = std::max(1, timeout_s / 6), count = 5;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  // Keepalive probes only an idle connection: one with a message in flight to a peer that went
  // silent (a partition, a machine that lost power) would otherwise wait for TCP's own give-up,
  // about 15 minutes. TCP_USER_TIMEOUT bounds both (it also ends the keepalive probes' wait).
  int user_timeout_ms = timeout_s * 1000;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

ElasticHost::ElasticHost(int port, const std::string& address, const RoundLimits& limits, const secret::JobSecret& secret)
    : listener_(port, address), limits_(limits), secret_(secret) {
  if (pipe2(wake_, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("cannot start the elastic rendezvous: pipe2() failed: ") + std::strerror(errno));
  // The thread inherits the mask of its creator: block what SignalGuard handles, so those signals
  // go to the launcher's main thread, then restore this thread's mask.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGUSR2}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  try {
    thread_ = std::thread([this] { serve(); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close(wake_[0]);
    close(wake_[1]);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

constexpr char kStop = 1, kAbandon = 2;

void ElasticHost::abandon(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abandon_mutex_);
    abandon_why_ = why;
  }
  char byte = kAbandon;
  while (write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
  }
}

ElasticHost::~ElasticHost() {
  char byte = kStop;
  while (write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(wake_[0]);
  close(wake_[1]);
}

void ElasticHost::serve() {
  MembershipRounds rounds(limits_, Clock::now());
  std::map<int, Connection> connections;
  auto drop = [&](int fd) {
    if (connections[fd].authenticated) rounds.closed(fd, Clock::now());
    connections.erase(fd);
    close(fd);
  };
  // A peer that does not prove the job secret is closed and named once; the job goes on.
  auto refuse = [&](int fd, const std::string& why) {
    write_all(STDERR_FILENO, "[launcher] refused a connection to the elastic rendezvous from " + connections[fd].peer +
                                 ": " + why + " (SECURITY.md)\n");
    drop(fd);
  };
  for (;;) {
    // What the rounds decided goes out first; a refused launcher's connection closes after its message.
    for (const auto& out : rounds.take_outgoing()) {
      if (!connections.count(out.client)) continue;
      const bool ok = send_all(out.client, encode(out.message));
      if (!ok || out.close_after) drop(out.client);
    }
    int wait_ms = static_cast<int>(kMaxWait.count());
    if (auto deadline = rounds.deadline()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      wait_ms = static_cast<int>(std::clamp<long long>(left, 0, wait_ms));
    }
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    for (const auto& [fd, _] : connections) fds.push_back({fd, POLLIN, 0});
    const int ready = poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents) {
      char byte = kStop;
      if (read(wake_[0], &byte, 1) == 1 && byte == kAbandon) {
        std::lock_guard<std::mutex> lock(abandon_mutex_);
        rounds.end_job(1, abandon_why_);
        continue;  // the end goes out at the top of the loop
      }
      break;  // the launcher is done with the rendezvous
    }
    if (ready > 0 && fds[1].revents & POLLIN) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof peer;
      int fd = accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
      if (fd >= 0) {
        enable_keepalive(fd, limits_.peer_timeout);
        Connection& c = connections[fd];
        c.peer = peer_name(peer, peer_len);
        c.nonce = fresh_nonce();
        c.accepted = Clock::now();
        if (!send_all(fd, hello_line(c.nonce))) drop(fd);
      }
    }
    // Every ready connection is read before any is acted on, and the closed ones are dropped first:
    // a lost machine explains the failures its peers report in the same moment (their collectives
    // broke with it), so the restart it causes names the lost machine, whatever the fds' order.
    std::vector<int> with_data;
    for (size_t i = 2; ready > 0 && i < fds.size(); ++i) {
      if (!fds[i].revents || !connections.count(fds[i].fd)) continue;
      const int fd = fds[i].fd;
      char buffer[4096];
      ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (connections[fd].authenticated) drop(fd);
        else refuse(fd, "it closed the connection before proving it holds this job's secret");
        continue;
      }
      connections[fd].pending.append(buffer, static_cast<size_t>(n));
      with_data.push_back(fd);
    }
    for (const int fd : with_data) {
      if (!connections.count(fd)) continue;
      Connection& c = connections[fd];
      // Nothing a peer sends is read as a message before it has proved the secret.
      if (!c.authenticated) {
        const size_t eol = c.pending.find('\n');
        if (eol == std::string::npos) {
          if (c.pending.size() > kMaxHandshakeLine) refuse(fd, "it sent a line that is not a proof of this job's secret");
          continue;
        }
        const auto launcher_nonce = check_launcher_proof(secret_, c.nonce, c.pending.substr(0, eol));
        if (!launcher_nonce) {
          refuse(fd, "it did not prove it holds this job's secret");
          continue;
        }
        c.pending.erase(0, eol + 1);
        c.authenticated = true;
        if (!send_all(fd, host_proof_line(secret_, c.nonce, *launcher_nonce))) {
          drop(fd);
          continue;
        }
      }
      for (size_t eol; connections.count(fd) && (eol = c.pending.find('\n')) != std::string::npos;) {
        const std::string line = c.pending.substr(0, eol);
        c.pending.erase(0, eol + 1);
        if (auto message = decode(line)) rounds.received(fd, *message, Clock::now());
      }
      if (connections.count(fd) && c.pending.size() > kMaxLine) drop(fd);  // not a launcher of this job
    }
    // A connection that has not proved the secret within the handshake's time holds nothing of the job.
    std::vector<int> stale;
    for (const auto& [fd, c] : connections)
      if (!c.authenticated && Clock::now() - c.accepted > kHandshakeTimeout) stale.push_back(fd);
    for (const int fd : stale) refuse(fd, "it did not prove it holds this job's secret in time");
    rounds.tick(Clock::now());
  }
  for (const auto& [fd, _] : connections) close(fd);
}

}  // namespace accel::launch
