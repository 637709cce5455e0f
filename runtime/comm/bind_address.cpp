#include "runtime/comm/bind_address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace accel::comm {

std::string local_address_toward(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(peer.c_str(), "9", &hints, &found) != 0) return "";  // the port is never used
  std::string address;
  for (addrinfo* a = found; a && address.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      address = text;
    close(fd);
  }
  freeaddrinfo(found);
  return address;
}

std::string gloo_bind_address(const std::string& main_process_ip) {
  if (main_process_ip.rfind("127.", 0) == 0 || main_process_ip == "localhost") return "127.0.0.1";
  if (std::string routed = local_address_toward(main_process_ip); !routed.empty()) return routed;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace accel::comm
