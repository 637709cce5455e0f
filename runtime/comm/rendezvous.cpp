#include "runtime/comm/rendezvous.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/comm/flight_registry.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/job_secret.hpp"
#include "runtime/common/log.hpp"
#include "runtime/common/sealed_value.hpp"
#include "runtime/launch/rendezvous_listener.hpp"

extern char** environ;

namespace accel::comm {
namespace {

int env_int(const std::map<std::string, std::string>& env, const std::string& name, std::optional<int> fallback) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) {
    if (fallback) return *fallback;
    throw RunError("worker environment: " + name + " is not set; workers are started by `accel launch`, which sets "
                   "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  try {
    size_t used = 0;
    int v = std::stoi(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw RunError("worker environment: " + name + "=" + it->second + " is not an integer");
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

// A host name another rank wrote into the store, fit for a message: the store takes writes from
// anyone who reaches it, so at most 255 characters of [A-Za-z0-9._-], anything else as '?'.
std::string printable_host(const std::vector<uint8_t>& value) {
  std::string host;
  for (size_t i = 0; i < value.size() && i < 255; ++i) {
    const char c = static_cast<char>(value[i]);
    host += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '?';
  }
  return host.empty() ? "?" : host;
}

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream out;
  out << t.count() / 1000.0 << " s";
  return out.str();
}

// A copy of the launcher's listening socket for this process's store, or nullopt when `fd` is not a
// listening socket on `port` (a worker started by hand with a stale variable binds the port itself).
// The inherited descriptor is made close-on-exec, so programs rank 0 starts do not hold the port.
std::optional<int> inherited_listener(int fd, int port) {
  if (fd < 0 || fcntl(fd, F_GETFD) < 0) return std::nullopt;
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  int listening = 0;
  socklen_t len = sizeof listening;
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof addr;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0)
    return std::nullopt;
  const int bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (bound != port) return std::nullopt;
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);  // the store closes what it is given; keep the original
  if (copy < 0) return std::nullopt;
  return copy;
}

}  // namespace

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

WorldInfo world_info_from_env(const std::map<std::string, std::string>& env) {
  WorldInfo w;
  w.rank = env_int(env, "RANK", std::nullopt);
  w.world_size = env_int(env, "WORLD_SIZE", std::nullopt);
  w.local_rank = env_int(env, "LOCAL_RANK", 0);
  w.local_world_size = env_int(env, "LOCAL_WORLD_SIZE", w.world_size);
  w.machine_rank = env_int(env, "GROUP_RANK", 0);
  w.master_port = env_int(env, "MASTER_PORT", std::nullopt);
  w.restart_count = env_int(env, "ACCEL_RESTART_COUNT", 0);
  w.rendezvous_fd = env_int(env, launch::kRendezvousFdVariable, -1);
  auto addr = env.find("MASTER_ADDR");
  if (addr != env.end() && !addr->second.empty()) w.master_addr = addr->second;
  if (w.world_size < 1 || w.rank < 0 || w.rank >= w.world_size)
    throw RunError("worker environment: RANK=" + std::to_string(w.rank) + " is not in [0, WORLD_SIZE=" +
                   std::to_string(w.world_size) + ")");
  return w;
}

std::string Rendezvous::prefix() const { return "accel/" + std::to_string(world_.restart_count) + "/"; }

Rendezvous::Rendezvous(const WorldInfo& world, std::chrono::milliseconds timeout) : world_(world), timeout_(timeout) {
  secret::worker_secret();  // read (and close) the launcher's memfd before any thread starts
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = world.rank == 0;
  options.waitWorkers = false;  // arrival is checked below, with a message naming who is missing
  options.timeout = timeout;
  if (world.rank == 0) options.masterListenFd = inherited_listener(world.rendezvous_fd, world.master_port);
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
  } catch (const std::exception& e) {
    std::string where = world.master_addr + ":" + std::to_string(world.master_port);
    if (world.rank == 0)
      throw RunError("rank 0 could not host the rendezvous store on " + where + ": " + e.what() +
                     " (is the port in use? set main_process_port, or 0 to pick a free one)");
    throw RunError("rank " + std::to_string(world.rank) + " could not reach the rendezvous store of rank 0 (machine 0) "
                   "at " + where + " within " + seconds(timeout) + ": rank 0 did not arrive. Start `accel launch` "
                   "on machine 0 with the same main_process_ip and main_process_port, or raise rendezvous_timeout_s.");
  }

  std::vector<std::string> keys;
  for (int r = 0; r < world.world_size; ++r) keys.push_back(prefix() + "arrived/" + std::to_string(r));
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  // Sealed like every value accel reads back (runtime/common/sealed_value.hpp): a host another
  // process wrote is never used to name a rank's host in a diagnosis (see below).
  const std::string sealed_host = secret::seal(keys[world.rank], host);
  store_->set(keys[world.rank], std::vector<uint8_t>(sealed_host.begin(), sealed_host.end()));
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception& wait_error) {
    auto arrived = [&](int r) {
      try {
        return store_->check({keys[r]});
      } catch (const std::exception&) {  // rank 0 (the store's host) is gone
        throw RunError("rank " + std::to_string(world.rank) + " lost the rendezvous store while waiting for every "
                       "rank to arrive: rank 0, which hosts it, has exited (see rank 0's error)");
      }
    };
    std::vector<int> missing;
    std::vector<int> machines;
    for (int r = 0; r < world.world_size; ++r)
      if (!arrived(r)) {
        missing.push_back(r);
        int m = world.machine_of(r);
        if (std::find(machines.begin(), machines.end(), m) == machines.end()) machines.push_back(m);
      }
    if (missing.empty())  // everyone arrived just after the timeout: report the store's own error
      throw RunError("rendezvous on rank " + std::to_string(world.rank) + " failed: " + wait_error.what());
    throw RunError("rendezvous timed out after " + seconds(timeout) + " on rank " + std::to_string(world.rank) + ": " +
                   std::to_string(missing.size()) + " of " + std::to_string(world.world_size) +
                   " ranks did not arrive: rank" + (missing.size() > 1 ? "s " : " ") + ranks_text(missing) +
                   " (machine" + (machines.size() > 1 ? "s " : " ") + ranks_text(machines) +
                   "). Start `accel launch` on every machine with its machine_rank, or raise rendezvous_timeout_s.");
  }
  // Every rank's host, for the flight records: a launcher that cannot read another machine's
  // records still names the host of the ranks it has none from. One request for all of them.
  std::vector<std::string> hosts;
  const std::vector<std::vector<uint8_t>> values = store_->multiGet(keys);
  for (size_t r = 0; r < values.size(); ++r) {
    // The host only labels diagnoses, and every rank has arrived: a forged one is dropped with a
    // warning naming the key and the job goes on. Ending the job here would let rank 0 (the store's
    // host) exit while the others still read from its store (PyTorch's raw error and stack trace).
    try {
      const std::string host = secret::unseal(keys[r], std::string(values[r].begin(), values[r].end()));
      hosts.push_back(printable_host(std::vector<uint8_t>(host.begin(), host.end())));
    } catch (const RunError&) {
      logging::warn("the rendezvous store's key " + keys[r] + " does not carry this job's MAC: a process outside "
                    "the job wrote it (the store accepts writes from anyone who reaches its port; SECURITY.md). "
                    "Diagnoses show rank " + std::to_string(r) + "'s host as '?'");
      hosts.push_back("?");
    }
  }
  set_flight_world_hosts(std::move(hosts));
}

void Rendezvous::finish() {
  if (finished_ || !store_) return;
  finished_ = true;
  // Each rank's "done" is a key of its own whose value is a MAC of the key under the job secret:
  // rank 0 keeps the store up until every rank's is there, and a value someone else wrote (the store
  // takes writes from anyone who reaches it) ends rank 0 at once, naming the key.
  auto key_of = [&](int r) { return prefix() + "done/" + std::to_string(r); };
  const secret::JobSecret& secret = secret::worker_secret();
  const std::string mine = key_of(world_.rank);
  const std::string mac = secret.mac(mine);
  store_->set(mine, std::vector<uint8_t>(mac.begin(), mac.end()));
  if (world_.rank != 0) return;
  std::vector<std::string> keys;
  for (int r = 0; r < world_.world_size; ++r) keys.push_back(key_of(r));
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (!store_->check(keys) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (const std::string& key : keys) {
    if (!store_->check({key})) continue;  // that rank ended without saying so: its own error is the story
    const std::vector<uint8_t> value = store_->get(key);
    if (!secret.verify(key, std::string(value.begin(), value.end())))
      throw RunError("the rendezvous store's key " + key + " does not carry this job's MAC: a process outside the "
                     "job wrote it (the store accepts writes from anyone who reaches its port; SECURITY.md)");
  }
}

Rendezvous::~Rendezvous() = default;

}  // namespace accel::comm
