// The built-in trainer's state-record keys (see trainer_record.hpp).
#include "trainer/trainer_record.hpp"

#include "api/checkpoint_engine.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/config/model_record.hpp"

namespace accel::train {

nlohmann::json trainer_record(const config::JobConfig& job, int world, const Dataset& data,
                              const nlohmann::json& loop_state) {
  const auto& t = job.training;
  return {{"writer", kTrainerWriter},
          {"max_steps", t.max_steps},
          {"loop_state", loop_state},
          {"micro_batch_size", t.micro_batch_size},
          {"gradient_accumulation_steps", t.gradient_accumulation_steps},
          {"global_batch_rows", int64_t(world) * t.micro_batch_size * t.gradient_accumulation_steps},
          {"seed", t.seed},
          {"data", data.state()},
          {"model", config::model_section_json(job.model)}};
}

void check_trainer_record(const std::string& dir, const nlohmann::json& record, const Dataset& data) {
  if (!record.contains("data"))
    throw checkpoint::CheckpointError(dir + "/" + api::kStateRecordFile + " is not a trainer state: it was written by " +
                                record.value("writer", std::string("another program")) +
                                "; resume it with the program that saved it, or set training.resume: never");
  data.check_state(record["data"]);
}

}  // namespace accel::train
