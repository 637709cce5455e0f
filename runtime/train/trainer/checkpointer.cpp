#include "runtime/train/trainer/checkpointer.hpp"

#include "runtime/train/checkpoint/checkpoint_store.hpp"
#include "runtime/train/checkpoint/trainer_record.hpp"

namespace accel::train {

Checkpointer::Checkpointer(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous& rendezvous,
                           backends::Backend& backend, const Dataset& data, const FaultInjector& faults)
    : job_(job),
      comm_(comm),
      data_(data),
      faults_(faults),
      engine_(job, comm, &rendezvous, backend, ckpt::checkpoints_root(job.job.training.output_dir)) {}

std::string Checkpointer::save(int64_t steps_done, const nlohmann::json& loop_state) {
  CheckpointEngine::SaveRequest request;
  request.steps_done = steps_done;
  request.record = trainer_record(job_.job, comm_.size(), data_, loop_state);
  request.after_files = [&] { faults_.at("checkpoint_write", steps_done - 1); };
  return engine_.save(request);
}

int64_t Checkpointer::load(const std::string& dir) {
  const nlohmann::json record =
      engine_.load(dir, [&](const nlohmann::json& state) { check_trainer_record(dir, state, data_); });
  loaded_loop_state_ = record.value("loop_state", nlohmann::json::object());
  return record["steps_done"].get<int64_t>();
}

}  // namespace accel::train
