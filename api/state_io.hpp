// Accelerator::save_state / load_state (docs/design/0015 "save_state and load_state"): a prepared
// module's checkpoint through the one checkpoint path the trainer takes (CheckpointEngine), plus
// what only a user's program has: the module's buffers and frozen parameters, its registered
// objects, and the checks that a checkpoint fits the prepared module before anything is restored.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/checkpoint_engine.hpp"
#include "engine/backend.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::api {

// The state record's "writer" for checkpoints of a prepared module.
inline constexpr const char* kApiWriter = "accel::Accelerator";
// Files a prepared module's checkpoint holds beside the engine's.
inline constexpr const char* kModuleExtrasFile = "module_extras.safetensors";  // buffers, frozen parameters
inline constexpr const char* kObjectsFile = "objects.safetensors";            // registered objects

// Where the loop stands, as the checkpoint needs it.
struct LoopPosition {
  int64_t steps = 0;          // optimizer steps applied
  int64_t micro = 0;          // micro-steps whose backward ran
  bool open = false;          // a micro-step began and its backward has not run
  bool sync_ready = false;    // gradients reduced, waiting for the step
  int accumulation = 1;       // gradient_accumulation_steps
  nlohmann::json loss_scaling = nlohmann::json::object();  // fp16: the scaler's state (grad_scaling.hpp)
};

// A loop that writes its own state-record keys in place of a user program's: the built-in trainer's
// loop on the API (trainer_record.hpp), so its checkpoints and the trainer's resume each other.
struct RecordFormat {
  std::string writer;                                                     // the records it writes and reads
  std::function<nlohmann::json()> keys;                                   // added to every record saved
  std::function<void(const std::string& dir, const nlohmann::json&)> check;  // throws for a record it cannot resume
  // Called on every rank once this rank's files are staged, before the commit (steps done; true on
  // the background thread of an asynchronous save); may be empty. The trainer's fault injection
  // stops a rank here (the checkpoint_write and checkpoint_background_write points).
  std::function<void(int64_t steps_done, bool in_background)> after_files;
};

class StateIo {
 public:
  // `rendezvous` may be null (a world of one, run without the launcher).
  StateIo(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous);
  ~StateIo();

  void register_object(const std::string& name, std::function<std::vector<at::Tensor>()> save,
                       std::function<void(const std::vector<at::Tensor>&)> load);

  // Records are written and accepted under `format.writer` from now on, instead of kApiWriter.
  void use_record_format(RecordFormat format) { format_ = std::move(format); }

  // Collective. `root` empty: <output_dir>/checkpoints. RunError mid-accumulation.
  std::string save(const std::string& root, engine::Backend& backend, torch::nn::Module& model,
                   const LoopPosition& at);
  // The state record of the checkpoint the last load() restored (empty before).
  const nlohmann::json& loaded_record() const { return loaded_record_; }
  // Collective. The steps restored, or nullopt when there was nothing to load. Waits for the saves
  // in flight first.
  std::optional<int64_t> load(const std::string& dir, engine::Backend& backend, torch::nn::Module& model,
                              const LoopPosition& at);
  // Asynchronous saves (training.async_checkpoint): waits until every save in flight is committed
  // (throws the first failure); before_state_changes() returns once none reads the live state any
  // more (call it before an optimizer step) and throws a failure already known.
  void wait_for_saves();
  void before_state_changes();
  // The saves' times over every checkpoint root (CheckpointEngine::AsyncTimes), as JSON.
  nlohmann::json async_times() const;

 private:
  struct Object {
    std::function<std::vector<at::Tensor>()> save;
    std::function<void(const std::vector<at::Tensor>&)> load;
  };
  api::CheckpointEngine& engine(const std::string& root, engine::Backend& backend);
  void check_fits(const std::string& dir, const nlohmann::json& record, torch::nn::Module& model,
                  const engine::OptimizerSetup& optimizer) const;

  const config::LoadedJob& job_;
  comm::Communicator& comm_;
  comm::Rendezvous* rendezvous_;
  std::map<std::string, Object> objects_;
  std::optional<RecordFormat> format_;
  std::map<std::string, std::unique_ptr<api::CheckpointEngine>> engines_;  // by root
  nlohmann::json loaded_record_ = nlohmann::json::object();
};

}  // namespace accel::api
