// The one checkpoint path of accel (layout and guarantees: docs/design/0004, 0006, 0013), shared by
// the public API (Accelerator::save_state, which the built-in trainer calls too; state_io.hpp):
// stage a step_N directory on every rank's storage, let the backend write its (sharded) state and
// each rank its CPU generator, write the state record (trainer.json) and seal it with a manifest,
// then move `latest`; on load, verify every file against the manifest before reading any, and
// restore the backend (at any world size or backend: canonical form) and the generators.
// The caller owns what its state record says beyond the engine's keys, and any extra files.
// Invariant: a checkpoint named step_N holds the state after N optimizer steps.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/node_local.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::api {

// The state record's name in every checkpoint (accel merge-weights reads its backend_state).
inline constexpr const char* kStateRecordFile = "trainer.json";

class CheckpointEngine {
 public:
  // Collective. `root` is the checkpoints root (<output_dir>/checkpoints for the job's own).
  // `rendezvous` may be null (a world of one process, run without the launcher); with several
  // machines it probes whether they share output_dir (docs/design/0013).
  CheckpointEngine(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous,
                   engine::Backend& backend, std::string root);

  const std::string& root() const { return root_; }
  const checkpoint::StorageLayout& storage() const { return storage_; }
  // Whether this rank writes the files every rank holds alike (the first rank of its storage).
  bool writes_shared_files() const { return writer_; }

  // Collective. The checkpoint `latest` names under root(), if any (node-local storage: the
  // oldest of the machines' latest, which every machine has).
  std::optional<std::string> latest() const;
  // Collective. training.resume: "never" -> none; "auto" -> latest(); anything else -> that
  // directory (it must exist).
  std::optional<std::string> resume_dir() const;

  // What a save writes beside the backend's files: `record` (identical on every rank; the engine
  // adds steps_done, backend, backend_state, world_size) and, on every rank into the staging
  // directory, the caller's files (`write_files`, may be empty). `after_files` runs once every
  // rank's files are written and before the commit (fault injection).
  struct SaveRequest {
    int64_t steps_done = 0;
    nlohmann::json record = nlohmann::json::object();
    std::function<void(const std::string& staging)> write_files;
    std::function<void()> after_files;
  };
  // Collective: writes root()/step_N atomically and moves `latest` to it. Returns the directory.
  // A write failure is a CheckpointError saying which checkpoint is still `latest` and the fix.
  std::string save(const SaveRequest& request);

  // Verifies every file of `dir` (size and hash), reads its state record, lets `check` refuse it
  // (before anything is restored), restores the backend's state and the CPU generators, and
  // returns the record. Generators: rank r's own at the same world size; at another, the saved
  // state when every rank saved the same one, else each rank's is left as it is (a warning).
  // Throws CheckpointError/RunError naming the file on any problem.
  nlohmann::json load(const std::string& dir, const std::function<void(const nlohmann::json& record)>& check = {});

 private:
  std::string commit(int64_t steps_done, const nlohmann::json& extra);
  nlohmann::json load_verified(const std::string& dir, const checkpoint::Manifest& manifest,
                               const std::function<void(const nlohmann::json&)>& check);
  void restore_generator(const std::string& dir, const checkpoint::Manifest& manifest, int saved_world);
  checkpoint::CheckpointError write_failure(int64_t steps_done, const std::string& what, const std::string& staging) const;
  std::optional<std::string> agree_on_latest(const std::optional<std::string>& mine) const;
  int machine_count() const { return world_.world_size / std::max(1, world_.local_world_size); }

  const config::LoadedJob& job_;
  comm::Communicator& comm_;
  comm::WorldInfo world_;
  std::optional<checkpoint::KeyValueExchange> kv_;  // the rendezvous store (several machines)
  std::string key_prefix_;
  checkpoint::StorageLayout storage_;
  engine::CheckpointStorage rank_storage_;  // storage_ per rank, for the backend
  engine::Backend& backend_;
  std::string root_;
  bool writer_ = false;  // the first rank of this rank's storage group: stages and commits there
  uint64_t last_save_bytes_ = 0;  // what this rank's last save wrote: the next one's expected size
};

}  // namespace accel::api
