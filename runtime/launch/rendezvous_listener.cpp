// Binds and holds the rendezvous port; see rendezvous_listener.hpp.
#include "runtime/launch/rendezvous_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace accel::launch {
namespace {

// A bound, listening socket on every interface, or -1 with errno set by the failing call and
// `step` naming it.
int listen_on(int family, int port, const char*& step) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    step = "socket";
    return -1;
  }
  int on = 1, off = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a previous run's TIME_WAIT must not block it
  int rc;
  if (family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);  // IPv4 clients too (127.0.0.1)
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  step = "bind";
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

}  // namespace

RendezvousListener::RendezvousListener(int port) {
  const char* step = "";
  fd_ = listen_on(AF_INET6, port, step);
  if (fd_ < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL) && std::strcmp(step, "listen") != 0)
    fd_ = listen_on(AF_INET, port, step);  // no IPv6 on this machine
  if (fd_ < 0) {
    int err = errno;
    std::string what = "cannot host the rendezvous on port " + std::to_string(port) + ": " + step + "() failed: " +
                       std::strerror(err);
    if (err == EADDRINUSE)
      what += ". Another program uses main_process_port " + std::to_string(port) +
              "; set main_process_port to a free port (or 0 to pick one, single machine only).";
    throw std::runtime_error(what);
  }
  port_ = bound_port(fd_);
  if (port_ <= 0) {
    int err = errno;
    close(fd_);
    throw std::runtime_error(std::string("cannot read the rendezvous port: getsockname() failed: ") + std::strerror(err));
  }
}

RendezvousListener::~RendezvousListener() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch
