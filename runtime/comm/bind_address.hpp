// The address a worker's Gloo device binds and advertises to its peers (docs/launching.md).
#pragma once

#include <string>

namespace accel::comm {

// The local address the kernel would send from toward `peer` (main_process_ip): a UDP socket
// connected there (no packet is sent) and its name read back. A host name may resolve to an
// address peers cannot reach (Debian's installer writes `127.0.1.1 <hostname>` into /etc/hosts),
// while the route to machine 0 leaves by an interface every machine can reach: on machine 0 it is
// main_process_ip itself. Empty when `peer` does not resolve or has no route.
std::string local_address_toward(const std::string& peer);

// What the worker binds: 127.0.0.1 when the rendezvous host is loopback (one machine, or several
// simulated on one host), else local_address_toward(main_process_ip), else this host's name.
std::string gloo_bind_address(const std::string& main_process_ip);

}  // namespace accel::comm
