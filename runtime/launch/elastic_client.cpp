#include "runtime/launch/elastic_client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <thread>

#include "runtime/launch/elastic_host.hpp"
#include "runtime/launch/membership_auth.hpp"

namespace accel::launch {
namespace {

constexpr std::chrono::milliseconds kRetry{200};  // between connection attempts while machine 0 starts

// One connection attempt to every address `addr` resolves to; -1 when none answers.
int try_connect(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc;
    do {
      rc = connect(fd, a->ai_addr, a->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

ElasticClient::ElasticClient(const std::string& addr, int port, std::chrono::milliseconds timeout, SignalGuard& guard,
                             const secret::JobSecret& secret, std::chrono::seconds peer_timeout)
    : address_(addr + ":" + std::to_string(port)) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (guard.interrupt_signal()) return;
    fd_ = try_connect(addr, port);
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline)
      throw std::runtime_error("cannot reach machine 0's rendezvous at " + address_ + " within rendezvous_timeout_s (" +
                               std::to_string(timeout.count() / 1000) +
                               " s): start `accel launch` on machine 0 with the same main_process_ip and "
                               "main_process_port, or check that this machine can reach it");
    pollfd p{guard.wake_fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(kRetry.count())) > 0) guard.drain();
  }
  enable_keepalive(fd_, peer_timeout);
  authenticate(secret, guard);
}

std::optional<std::string> ElasticClient::handshake_line(Clock::time_point deadline, SignalGuard& guard) {
  for (;;) {
    if (size_t eol = pending_.find('\n'); eol != std::string::npos) {
      std::string line = pending_.substr(0, eol);
      pending_.erase(0, eol + 1);
      return line;
    }
    if (pending_.size() > kMaxHandshakeLine || guard.interrupt_signal()) return std::nullopt;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {guard.wake_fd(), POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) continue;
    if (fds[1].revents) guard.drain();
    if (!fds[0].revents) continue;
    char buffer[1024];
    ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

void ElasticClient::authenticate(const secret::JobSecret& secret, SignalGuard& guard) {
  const auto deadline = Clock::now() + kHandshakeTimeout;
  auto refuse = [&](const std::string& why) {
    close(fd_);
    fd_ = -1;
    if (guard.interrupt_signal()) return;  // connected() is false: the caller reports the interrupt
    throw std::runtime_error("machine 0's rendezvous at " + address_ + " " + why +
                             ": every launcher of the job must be given the same secret file (" +
                             secret::kSecretFileVariable + ", SECURITY.md), and nothing else may listen on "
                             "main_process_port");
  };
  const auto hello = handshake_line(deadline, guard);
  const auto host_nonce = hello ? parse_hello(*hello) : std::nullopt;
  if (!host_nonce) return refuse("did not open the handshake of an accel elastic rendezvous");
  const std::string nonce = fresh_nonce();
  const std::string proof = launcher_proof_line(secret, *host_nonce, nonce);
  if (::send(fd_, proof.data(), proof.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(proof.size()))
    return refuse("closed the connection during the handshake");
  const auto answer = handshake_line(deadline, guard);
  if (!answer) return refuse("refused this launcher's proof of the job secret (or did not answer it)");
  if (!check_host_proof(secret, *host_nonce, nonce, *answer))
    return refuse("did not prove it holds this job's secret");
}

ElasticClient::~ElasticClient() {
  if (fd_ >= 0) close(fd_);
}

bool ElasticClient::send(const ElasticMessage& message) {
  if (fd_ < 0) return false;
  const std::string text = encode(message);
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::optional<ElasticMessage> ElasticClient::next(SignalGuard& guard) {
  for (;;) {
    if (size_t eol = pending_.find('\n'); eol != std::string::npos) {
      const std::string line = pending_.substr(0, eol);
      pending_.erase(0, eol + 1);
      return decode(line);  // garbage reads as a lost host
    }
    if (fd_ < 0 || guard.interrupt_signal()) return std::nullopt;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {guard.wake_fd(), POLLIN, 0}};
    const int ready = poll(fds, 2, 1000);
    if (ready < 0 && errno != EINTR) return std::nullopt;
    if (ready <= 0) continue;
    if (fds[1].revents) guard.drain();
    if (!fds[0].revents) continue;
    char buffer[4096];
    ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd_);
      fd_ = -1;
      return std::nullopt;
    }
    pending_.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace accel::launch
