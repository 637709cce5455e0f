// Worker-side rendezvous over c10d's TCPStore (hosted by rank 0 on MASTER_ADDR:MASTER_PORT).
// Invariant: rendezvous() returns only when every rank of the world has arrived; otherwise it
// throws RunError after the timeout, naming the ranks (and machines) that did not arrive, or
// saying that rank 0's store could not be reached. finish() keeps rank 0's store alive until
// every rank is done with it.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace accel::comm {

// The launch environment contract (docs/design/0002-runtime-contracts.md), as a worker sees it.
struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int machine_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  int rendezvous_fd = -1;  // rank 0: the launcher's listening socket for the store (ACCEL_RENDEZVOUS_FD)

  // Machine of a rank when every machine runs local_world_size workers.
  int machine_of(int some_rank) const { return some_rank / std::max(1, local_world_size); }
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// ACCEL_RESTART_COUNT and ACCEL_RENDEZVOUS_FD from `env`. Missing or malformed variables throw RunError naming them.
WorldInfo world_info_from_env(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> process_environment();

class Rendezvous {
 public:
  // Connects (rank 0: hosts) the store and waits for every rank, up to `timeout`.
  Rendezvous(const WorldInfo& world, std::chrono::milliseconds timeout);
  ~Rendezvous();

  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  const WorldInfo& world() const { return world_; }
  // Key prefix unique to this launch attempt, for anything else built on the store.
  std::string prefix() const;

  // Announces this rank is done; rank 0 waits (up to the timeout) for all ranks before its store
  // goes away, so no rank loses the store mid-use.
  void finish();

 private:
  WorldInfo world_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  bool finished_ = false;
};

}  // namespace accel::comm
