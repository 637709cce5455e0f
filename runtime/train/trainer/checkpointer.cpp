#include "runtime/train/trainer/checkpointer.hpp"

#include "runtime/train/checkpoint/checkpoint_store.hpp"

namespace accel::train {

// "writer" names the program whose loop the record describes: the public API refuses the
// trainer's checkpoints and the trainer the API's, each saying so (their loops differ).
inline constexpr const char* kTrainerWriter = "accel trainer";

Checkpointer::Checkpointer(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous& rendezvous,
                           backends::Backend& backend, const Dataset& data, const FaultInjector& faults)
    : job_(job),
      comm_(comm),
      data_(data),
      faults_(faults),
      engine_(job, comm, &rendezvous, backend, ckpt::checkpoints_root(job.job.training.output_dir)) {}

nlohmann::json Checkpointer::trainer_state(const nlohmann::json& loop_state) const {
  const auto& j = job_.job;
  const auto& t = j.training;
  return {{"writer", kTrainerWriter},
          {"max_steps", t.max_steps},
          {"loop_state", loop_state},
          {"micro_batch_size", t.micro_batch_size},
          {"gradient_accumulation_steps", t.gradient_accumulation_steps},
          {"global_batch_rows", int64_t(comm_.size()) * t.micro_batch_size * t.gradient_accumulation_steps},
          {"seed", t.seed},
          {"data", data_.state()},
          {"model",
           {{"name", config::to_string(j.model.name)},
            {"n_layer", j.model.n_layer},
            {"n_head", j.model.n_head},
            {"n_embd", j.model.n_embd},
            {"vocab_size", j.model.vocab_size},
            {"block_size", j.model.block_size}}}};
}

std::string Checkpointer::save(int64_t steps_done, const nlohmann::json& loop_state) {
  CheckpointEngine::SaveRequest request;
  request.steps_done = steps_done;
  request.record = trainer_state(loop_state);
  request.after_files = [&] { faults_.at("checkpoint_write", steps_done - 1); };
  return engine_.save(request);
}

int64_t Checkpointer::load(const std::string& dir) {
  const nlohmann::json record = engine_.load(dir, [&](const nlohmann::json& state) {
    if (!state.contains("data"))
      throw ckpt::CheckpointError(dir + "/" + kStateRecordFile + " is not a trainer state: it was written by " +
                                  state.value("writer", std::string("another program")) +
                                  "; resume it with the program that saved it, or set training.resume: never");
    data_.check_state(state["data"]);
  });
  loaded_loop_state_ = record.value("loop_state", nlohmann::json::object());
  return record["steps_done"].get<int64_t>();
}

}  // namespace accel::train
