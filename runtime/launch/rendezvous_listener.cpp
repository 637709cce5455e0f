// Binds and holds the rendezvous port; see rendezvous_listener.hpp.
#include "runtime/launch/rendezvous_listener.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace accel::launch {
namespace {

// A bound, listening socket on `address`, or -1 with errno set by the failing call and `step`
// naming it.
int listen_on(const addrinfo& address, const char*& step) {
  int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) {
    step = "socket";
    return -1;
  }
  int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a previous run's TIME_WAIT must not block it
  step = "bind";
  int rc = bind(fd, address.ai_addr, address.ai_addrlen);
  if (rc == 0) {
    step = "listen";
    rc = listen(fd, SOMAXCONN);
  }
  if (rc != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string numeric_host(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  getnameinfo(addr, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  return host;
}

}  // namespace

bool is_loopback_address(const std::string& numeric) {
  return numeric.rfind("127.", 0) == 0 || numeric == "::1" || numeric.rfind("::ffff:127.", 0) == 0;
}

RendezvousListener::RendezvousListener(int port, const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = "cannot host the rendezvous on " + host + ":" + std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(where + ": main_process_ip " + host + " does not resolve here (" + gai_strerror(rc) +
                             "); set main_process_ip to an address of machine 0");
  const char* step = "";
  int err = 0;
  for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
    fd_ = listen_on(*a, step);
    if (fd_ < 0) err = errno;
    else address_ = numeric_host(a->ai_addr, a->ai_addrlen);
  }
  freeaddrinfo(found);
  if (fd_ < 0) {
    std::string what = where + ": " + step + "() failed: " + std::strerror(err);
    if (err == EADDRINUSE)
      what += ". Another program uses main_process_port " + std::to_string(port) +
              "; set main_process_port to a free port (or 0 to pick one, single machine only).";
    if (err == EADDRNOTAVAIL)
      what += ". main_process_ip must be an address of machine 0 (the launcher with machine_rank 0 listens there "
              "only, not on every interface; SECURITY.md)";
    throw std::runtime_error(what);
  }
  port_ = bound_port(fd_);
  if (port_ <= 0) {
    err = errno;
    close(fd_);
    throw std::runtime_error(std::string("cannot read the rendezvous port: getsockname() failed: ") + std::strerror(err));
  }
}

RendezvousListener::~RendezvousListener() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch
