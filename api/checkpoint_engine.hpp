// The one checkpoint path of accel (layout and guarantees: docs/design/0004, 0006, 0013), shared by
// the public API (Accelerator::save_state, which the built-in trainer calls too; state_io.hpp):
// stage a step_N directory on every rank's storage, let the backend write its (sharded) state and
// each rank its CPU generator, write the state record (trainer.json) and seal it with a manifest,
// then move `latest`; on load, verify every file against the manifest before reading any, and
// restore the backend (at any world size or backend: canonical form) and the generators.
// The caller owns what its state record says beyond the engine's keys, and any extra files.
// With training.async_checkpoint (docs/design/0028) save() stages this rank's state in host memory
// and returns; a background thread writes, hashes and commits it (checkpoint_engine_async.cpp).
// Invariant: a checkpoint named step_N holds the state after N optimizer steps; `latest` names a
// checkpoint only once every rank's files of it are written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/background_save.hpp"
#include "api/checkpoint_staging.hpp"
#include "engine/backend.hpp"
#include "runtime/checkpoint/commit_exchange.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/node_local.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::api {

// The state record's name in every checkpoint (accel merge-weights reads its backend_state).
inline constexpr const char* kStateRecordFile = "trainer.json";
// The job that wrote a checkpoint (rank 0 copies it in).
inline constexpr const char* kJobRecordFile = "job.resolved.yaml";

class CheckpointEngine {
 public:
  // Collective. `root` is the checkpoints root (<output_dir>/checkpoints for the job's own).
  // `rendezvous` may be null (a world of one process, run without the launcher); with several
  // machines and `probe_storage` it probes whether they share output_dir (docs/design/0013);
  // without, the root is taken to be one storage every machine shares. RunError when
  // training.async_checkpoint is on for several ranks without a rendezvous store.
  CheckpointEngine(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous,
                   engine::Backend& backend, std::string root, bool probe_storage = true);
  // Waits for a save in flight (its failure is logged: a destructor cannot throw it), or abandons
  // it, uncommitted, while an exception unwinds.
  ~CheckpointEngine();
  CheckpointEngine(const CheckpointEngine&) = delete;
  CheckpointEngine& operator=(const CheckpointEngine&) = delete;

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
  // adds steps_done, backend, backend_state, world_size) and, on every rank, the caller's files
  // (`write_files`, may be empty: into `files`, which writes them into the staging directory or
  // stages them for the background write). `after_files(in_background)` runs once this rank's
  // files are written and before the commit (fault injection): on the training thread, or on the
  // background thread of an asynchronous save; it must not refer to the caller's locals.
  struct SaveRequest {
    int64_t steps_done = 0;
    nlohmann::json record = nlohmann::json::object();
    std::function<void(const std::string& staging, engine::TensorFileSink& files)> write_files;
    std::function<void(bool in_background)> after_files;
  };
  // Collective: writes root()/step_N atomically and moves `latest` to it. Returns the directory.
  // A write failure is a CheckpointError saying which checkpoint is still `latest` and the fix.
  // Asynchronous (async()): waits for the previous save first (its failure is thrown here), stages
  // this rank's state and returns; the directory appears and `latest` moves once the background
  // write is committed on every rank.
  std::string save(const SaveRequest& request);
  bool async() const { return async_; }
  // Waits until the save in flight (if any) is committed; its failure is thrown here, once.
  void wait();
  // Call before anything changes the state a save took (an optimizer step, a load): returns once
  // the save in flight no longer reads it, and throws its failure if it is already known.
  void before_state_changes();
  // Where asynchronous saves spent time, summed over the saves finished so far: the training
  // thread's waits in before_state_changes(), and the background threads' wall and CPU time.
  struct AsyncTimes {
    int saves = 0;
    double fence_wait_s = 0, background_s = 0, background_cpu_s = 0;
    std::vector<double> fence_waits;  // per save started: the waits until the next save
  };
  const AsyncTimes& async_times() const { return async_times_; }

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
  checkpoint::CheckpointError write_failure(int64_t steps_done, const std::string& what, const std::string& staging,
                                     int machine) const;
  // Asynchronous saves (checkpoint_engine_async.cpp).
  std::string start_background_save(int64_t steps_done, const std::string& staging, std::string record_text,
                                    std::function<void(bool)> after_files);
  void write_in_background(api::BackgroundSave& self, int64_t steps_done, const std::string& staging,
                           const std::string& record_text, const std::function<void(bool)>& after_files,
                           const std::optional<checkpoint::CommitExchange>& exchange);
  checkpoint::CommitExchange commit_exchange(int64_t save_number);
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
  comm::Rendezvous* rendezvous_ = nullptr;
  bool async_ = false;                                 // training.async_checkpoint
  std::unique_ptr<api::CheckpointStaging> staging_;    // host staging, reused from save to save
  c10::intrusive_ptr<c10d::Store> background_store_;   // the background thread's own store client
  std::unique_ptr<api::BackgroundSave> in_flight_;     // the save being written, if any
  AsyncTimes async_times_;
  AsyncTimes in_flight_times_;  // written by the background thread, added once it is joined
  std::optional<checkpoint::CommitExchange> previous_exchange_;  // its store keys go at the next save
};

}  // namespace accel::api
