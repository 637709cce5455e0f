// An elastic job's host election in etcd (rdzv_backend etcd, docs/design/0034): which launcher hosts
// the membership rounds and rank 0's store, kept under that launcher's lease so that when it dies
// the survivors elect another.
// Keys under the job's prefix /accel/<16 hex of HMAC(secret, "accel etcd rendezvous")>-<port>/:
//   host  = sealed "machine_rank \t address \t rendezvous_port \t store_port" (the host's lease);
//   round = sealed "round \t machine_rank,..." the host's last closed round (the host's lease).
// Invariants: a host record is acted on only when its MAC verifies under the job secret; at most one
// launcher holds the host key at a time (created by a create_revision == 0 transaction); a launcher
// whose lease may have lapsed (no keepalive acknowledged within the TTL of sending it) says so
// through lost() before etcd can hand the key to another, so two hosts never serve at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/common/job_secret.hpp"
#include "runtime/launch/etcd_client.hpp"
#include "runtime/launch/signal_guard.hpp"

namespace accel::launch {

struct HostRecord {
  int machine = -1;  // the host's machine_rank in the job file
  std::string address;
  int rendezvous_port = 0;
  int store_port = 0;

  bool operator==(const HostRecord&) const = default;
  std::string rendezvous() const { return address + ":" + std::to_string(rendezvous_port); }
};

// How long one etcd request may take with a lease of `lease_s` (rdzv_lease_s): under a third of it,
// so that a renewal's answer comes in time or never (1.5 s at most).
std::chrono::milliseconds etcd_request_timeout(int lease_s);

// The lease the host holds its key under, renewed every TTL/3 by a thread of its own.
class HostLease {
 public:
  // Grants a lease of `ttl_s` seconds (rdzv_lease_s; throws EtcdError, and std::runtime_error naming
  // the key when etcd grants a longer one: the survivors count on the TTL the job file says).
  // `on_lost(why)` is called once, from the lease's thread, when a renewal fails or etcd no longer
  // knows the lease, before the lease can have lapsed at etcd.
  HostLease(EtcdClient& etcd, int ttl_s, std::function<void(const std::string&)> on_lost);
  ~HostLease();  // stops renewing and revokes the lease (its keys go at once)
  HostLease(const HostLease&) = delete;
  HostLease& operator=(const HostLease&) = delete;

  int64_t id() const { return id_; }

 private:
  void renew();
  EtcdClient& etcd_;
  int ttl_s_;
  std::function<void(const std::string&)> on_lost_;
  int64_t id_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

class EtcdRendezvous {
 public:
  // `endpoints`: rdzv_endpoint; `port`: main_process_port (part of the job's prefix); `lease_s`:
  // rdzv_lease_s (bounds each request's time, etcd_request_timeout).
  EtcdRendezvous(const std::string& endpoints, const secret::JobSecret& secret, int port, int lease_s);

  EtcdClient& etcd() { return etcd_; }
  const std::string& prefix() const { return prefix_; }

  // The current host, when the key exists and verifies. Throws EtcdError (etcd unreachable) and
  // std::runtime_error (a record that does not carry the job's MAC: someone else wrote it).
  std::optional<HostRecord> host();
  // Writes `record` as the host under `lease` when no host exists; true when this call did.
  bool claim(const HostRecord& record, int64_t lease);

  // The host records the round it closed (round \t machines, sealed) under its lease, for operators
  // (`etcdctl get --prefix /accel/`). Throws EtcdError.
  void record_round(int round, const std::vector<int>& machines, int64_t lease);

  std::string seal(const HostRecord& record) const;
  std::optional<HostRecord> unseal(const std::string& stored) const;  // nullopt: no valid MAC or form

 private:
  EtcdClient etcd_;
  secret::JobSecret secret_;
  std::string prefix_;
};

// The job's prefix in etcd (see the top of this file).
std::string etcd_job_prefix(const secret::JobSecret& secret, int port);

}  // namespace accel::launch
