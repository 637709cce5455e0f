// The address a worker's Gloo device binds (runtime/comm/bind_address.hpp): the local end of the
// route toward main_process_ip, whatever this host's name resolves to. The machines-as-namespaces
// test (tests/numerics/test_netns_machines.py) runs it where a machine's own name is on 127.0.1.1.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include "runtime/comm/bind_address.hpp"

using accel::comm::gloo_bind_address;
using accel::comm::local_address_toward;

namespace {

// An IPv4 address of an interface of this host other than loopback, or "" when it has none.
std::string non_loopback_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
      continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

TEST_CASE("bind address: loopback rendezvous binds loopback; a peer's route gives the local end") {
  CHECK(gloo_bind_address("127.0.0.1") == "127.0.0.1");
  CHECK(gloo_bind_address("127.0.0.5") == "127.0.0.1");
  CHECK(gloo_bind_address("localhost") == "127.0.0.1");
  CHECK(local_address_toward("127.0.0.1") == "127.0.0.1");
  CHECK(local_address_toward("no-such-host.invalid").empty());
}

TEST_CASE("bind address: toward an address of this host it is that address, not what the host name resolves to") {
  const std::string own = non_loopback_address();
  if (own.empty()) {
    WARN("no non-loopback IPv4 interface here: nothing to route toward");
    return;
  }
  CHECK(local_address_toward(own) == own);
  CHECK(gloo_bind_address(own) == own);
}
