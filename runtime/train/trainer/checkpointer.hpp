// Checkpoints of the built-in trainer's run (layout and guarantees: docs/design/0004): the
// trainer's state record (data, model, loop state) over the one checkpoint path both the trainer
// and the public API take (checkpoint/checkpoint_engine.hpp).
// Invariant: a checkpoint named step_N holds the state after N optimizer steps; loading it and
// continuing gives the same metrics as never stopping (batches depend only on the step).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/train/checkpoint/checkpoint_engine.hpp"
#include "runtime/train/checkpoint/node_local.hpp"
#include "runtime/train/data/dataset.hpp"
#include "runtime/train/trainer/fault_injection.hpp"

namespace accel::train {

class Checkpointer {
 public:
  // Collective. With several machines, probes whether they share output_dir (docs/design/0013)
  // through the rendezvous store; storage() then says which.
  Checkpointer(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous& rendezvous,
               backends::Backend& backend, const Dataset& data, const FaultInjector& faults);

  // Collective. training.resume: "never" -> none; "auto" -> the checkpoint `latest` names under
  // <output_dir>/checkpoints, if any (node-local storage: the oldest of the machines' latest,
  // which every machine has); anything else -> that directory (it must exist).
  std::optional<std::string> resume_dir() const { return engine_.resume_dir(); }
  const ckpt::StorageLayout& storage() const { return engine_.storage(); }

  // Verifies every file of `dir` (size and hash), checks it was written for the same data and
  // model, restores the backend's state and this rank's RNG, and returns the steps it holds.
  // Throws CheckpointError/RunError naming the file on any problem.
  int64_t load(const std::string& dir);
  // The training loop's own state saved with the checkpoint load() read (the fp16 loss scaler;
  // step_update.hpp): an empty object when it had none.
  const nlohmann::json& loaded_loop_state() const { return loaded_loop_state_; }

  // Collective: writes the state after `steps_done` steps to <output_dir>/checkpoints/step_N,
  // atomically, and moves `latest` to it, with `loop_state` (identical on every rank) in
  // trainer.json; on node-local storage every machine commits its own files and the manifest of
  // all. Returns the directory.
  std::string save(int64_t steps_done, const nlohmann::json& loop_state = nlohmann::json::object());

  std::string root() const { return engine_.root(); }

 private:
  const config::LoadedJob& job_;
  comm::Communicator& comm_;
  const Dataset& data_;
  const FaultInjector& faults_;
  CheckpointEngine engine_;
  nlohmann::json loaded_loop_state_ = nlohmann::json::object();
};

}  // namespace accel::train
