// `rdzv_endpoint: host:port[,host:port...]`, the etcd cluster an elastic job's rendezvous lives in
// (rdzv_backend etcd, docs/design/0034; torchrun's name and form). Invariant: a text either parses
// into at least one endpoint with a non-empty host and a port 1..65535, or yields one line saying
// what is wrong with it; nothing is looked up here (a name resolves when the launcher connects).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct RdzvEndpoint {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without its brackets
  int port = 0;

  // "host:port", "[v6]:port": the form the user wrote, for URLs and messages.
  std::string text() const;
};

// Parses "host:port[,host:port...]" (spaces around items allowed; an IPv6 host in brackets). On a bad
// text returns nullopt and sets *problem to what is wrong (one line).
std::optional<std::vector<RdzvEndpoint>> parse_rdzv_endpoints(const std::string& text, std::string* problem);

}  // namespace accel::config
