#include "runtime/launch/etcd_rendezvous.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace accel::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> fields(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, '\t')) out.push_back(item);
  return out;
}

std::optional<int> whole(const std::string& s, int lo, int hi) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const int v = std::stoi(s);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::vector<config::RdzvEndpoint> parsed(const std::string& endpoints) {
  std::string problem;
  auto list = config::parse_rdzv_endpoints(endpoints, &problem);
  if (!list) throw std::runtime_error("rdzv_endpoint " + endpoints + ": " + problem);  // checked at validation
  return *list;
}

}  // namespace

std::string etcd_job_prefix(const secret::JobSecret& secret, int port) {
  return "/accel/" + secret.mac("accel etcd rendezvous").substr(0, 16) + "-" + std::to_string(port) + "/";
}

std::chrono::milliseconds etcd_request_timeout(int lease_s) {
  return std::min(std::chrono::milliseconds(1500), std::chrono::milliseconds(lease_s * 1000 / 3));
}

HostLease::HostLease(EtcdClient& etcd, int ttl_s, std::function<void(const std::string&)> on_lost)
    : etcd_(etcd), ttl_s_(ttl_s), on_lost_(std::move(on_lost)) {
  int64_t granted = ttl_s;
  id_ = etcd_.grant(ttl_s, &granted);
  // etcd raises a TTL below its minimum (1.5 of its election timeouts, rounded up). The survivors
  // time their wait for a lost host by rdzv_lease_s: a longer lease would read as a live host.
  if (granted != ttl_s) {
    try {
      etcd_.revoke(id_);
    } catch (const EtcdError&) {  // it lapses by itself
    }
    throw std::runtime_error("rdzv_lease_s: etcd at " + etcd_.endpoints_text() + " granted a lease of " +
                             std::to_string(granted) + " s where rdzv_lease_s asks for " + std::to_string(ttl_s) +
                             " s (etcd's shortest lease is 1.5 of its election timeouts, rounded up); set "
                             "rdzv_lease_s: " + std::to_string(granted) + " or more, or lower etcd's "
                             "--election-timeout");
  }
  // Signals SignalGuard routes go to the launcher's main thread, not this one (as ElasticHost does).
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGUSR2}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  thread_ = std::thread([this] { renew(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

HostLease::~HostLease() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  try {
    etcd_.revoke(id_);
  } catch (const EtcdError&) {  // etcd gone: the lease lapses by itself within its TTL
  }
}

void HostLease::renew() {
  const auto ttl = std::chrono::seconds(ttl_s_);
  const auto period = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  const auto request_timeout = etcd_request_timeout(ttl_s_);
  // etcd counts the TTL from when it handled the last renewal, which is after it was sent: a renewal
  // sent at t0 and acknowledged keeps the lease until at least t0 + TTL.
  Clock::time_point safe_until = Clock::now() + ttl;
  std::string last_error;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (wake_.wait_for(lock, period, [this] { return stopping_; })) return;
    lock.unlock();
    const auto sent = Clock::now();
    std::string why;
    try {
      const int64_t left = etcd_.keepalive(id_);
      if (left > 0) safe_until = sent + ttl;
      else why = "etcd no longer knows this host's lease (it expired)";
    } catch (const EtcdError& e) {
      last_error = e.what();
    }
    // Another renewal may not come back before the lease could lapse: give up the host's role now.
    if (why.empty() && Clock::now() + period + request_timeout >= safe_until)
      why = "etcd did not renew this host's lease in time (etcd unreachable or without quorum: " + last_error + ")";
    lock.lock();
    if (!why.empty()) {
      if (!stopping_) {
        lock.unlock();
        on_lost_(why);
        lock.lock();
      }
      wake_.wait(lock, [this] { return stopping_; });
      return;
    }
  }
}

EtcdRendezvous::EtcdRendezvous(const std::string& endpoints, const secret::JobSecret& secret, int port, int lease_s)
    : etcd_(parsed(endpoints), etcd_request_timeout(lease_s)), secret_(secret), prefix_(etcd_job_prefix(secret, port)) {}

std::string EtcdRendezvous::seal(const HostRecord& r) const {
  const std::string value = std::to_string(r.machine) + "\t" + r.address + "\t" + std::to_string(r.rendezvous_port) +
                            "\t" + std::to_string(r.store_port);
  return value + "\t" + secret_.mac(prefix_ + "host\n" + value);
}

std::optional<HostRecord> EtcdRendezvous::unseal(const std::string& stored) const {
  const size_t tab = stored.rfind('\t');
  if (tab == std::string::npos) return std::nullopt;
  const std::string value = stored.substr(0, tab);
  if (!secret_.verify(prefix_ + "host\n" + value, std::string_view(stored).substr(tab + 1))) return std::nullopt;
  const auto f = fields(value);
  if (f.size() != 4) return std::nullopt;
  const auto machine = whole(f[0], 0, 1023), rdzv = whole(f[2], 1, 65535), store = whole(f[3], 1, 65535);
  if (!machine || !rdzv || !store || f[1].empty()) return std::nullopt;
  return HostRecord{*machine, f[1], *rdzv, *store};
}

std::optional<HostRecord> EtcdRendezvous::host() {
  const auto stored = etcd_.get(prefix_ + "host");
  if (!stored) return std::nullopt;
  auto record = unseal(stored->value);
  if (!record)
    throw std::runtime_error("etcd's key " + prefix_ + "host does not carry this job's MAC: a process outside the "
                             "job wrote it (anyone who can write to the etcd cluster at rdzv_endpoint can; "
                             "SECURITY.md). It was not used; the launcher stops rather than join an address it "
                             "cannot trust");
  return record;
}

void EtcdRendezvous::record_round(int round, const std::vector<int>& machines, int64_t lease) {
  std::string value = std::to_string(round) + "\t";
  for (size_t i = 0; i < machines.size(); ++i) value += (i ? "," : "") + std::to_string(machines[i]);
  etcd_.put(prefix_ + "round", value + "\t" + secret_.mac(prefix_ + "round\n" + value), lease);
}

bool EtcdRendezvous::claim(const HostRecord& record, int64_t lease) {
  return etcd_.create(prefix_ + "host", seal(record), lease, nullptr);
}

}  // namespace accel::launch
