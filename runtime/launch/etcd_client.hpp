// A small client of etcd v3's JSON gateway (docs/design/0034): the calls the etcd rendezvous needs
// (lease grant, keepalive, revoke; range, put, delete; a create-if-absent transaction), over HTTP
// with libcurl, JSON with nlohmann. Keys and values are bytes (base64 on the wire).
// Why the gateway and not gRPC: the launcher links no protobuf/gRPC stack (docs/design/0021).
// Invariants: every request has a deadline (request_timeout); a response is read only up to
// kMaxResponse bytes and parsed before use, anything else is an EtcdError; endpoints are tried in
// turn from the last one that answered, so one member down does not stop the client. Calls are
// safe from several threads at once (each uses its own libcurl handle).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/config/rdzv_endpoint.hpp"

namespace accel::launch {

// etcd could not be reached on any endpoint, or answered with an error: what(), one line, names the
// call, the endpoints tried and etcd's or libcurl's own words.
class EtcdError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EtcdValue {
  std::string value;
  int64_t create_revision = 0;
  int64_t lease = 0;  // 0: none
};

class EtcdClient {
 public:
  static constexpr size_t kMaxResponse = 1 << 20;

  EtcdClient(std::vector<config::RdzvEndpoint> endpoints, std::chrono::milliseconds request_timeout);

  // A lease of `ttl_s` seconds (etcd raises a TTL below its minimum); its id, and in *granted_ttl_s
  // (when given) the TTL etcd granted.
  int64_t grant(int ttl_s, int64_t* granted_ttl_s = nullptr);
  // Renews `lease`; its remaining TTL in seconds, 0 when etcd no longer knows it (expired, revoked).
  int64_t keepalive(int64_t lease);
  void revoke(int64_t lease);

  std::optional<EtcdValue> get(const std::string& key);
  void put(const std::string& key, const std::string& value, int64_t lease = 0);
  void remove(const std::string& key);
  // Writes `key` = `value` under `lease` only when the key does not exist (compare create_revision
  // == 0, one transaction: of clients racing, exactly one succeeds). True when this call created it;
  // false when it existed, and then *existing (when given) holds what is there.
  bool create(const std::string& key, const std::string& value, int64_t lease, std::optional<EtcdValue>* existing);

  // The local address of the last connection that reached etcd: an address of this machine that
  // routes to the etcd cluster (the etcd rendezvous advertises it to the other launchers).
  std::string local_address() const;
  // "10.0.0.5:2379,10.0.0.6:2379", for messages.
  std::string endpoints_text() const;

 private:
  // POSTs `body` to `path` on the endpoints in turn; the parsed JSON text of the first answer.
  std::string call(const std::string& what, const std::string& path, const std::string& body);

  std::vector<config::RdzvEndpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;  // guards the two fields below
  size_t preferred_ = 0;      // the endpoint that answered last
  std::string local_address_;
};

}  // namespace accel::launch
