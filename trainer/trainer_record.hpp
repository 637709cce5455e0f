// The built-in trainer's keys of a checkpoint's state record (docs/design/0004): who wrote it, the
// data position's identity, the model and batch shape, and the loop's own state. The trainer hands
// them to Accelerator::save_state / load_state as its record format (api::RecordFormat), so its
// checkpoints read as the trainer's always have (docs/design/0017).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config/job.hpp"
#include "trainer/data/dataset.hpp"

namespace accel::train {

// "writer" names the program whose loop the record describes: the public API refuses the
// trainer's checkpoints and the trainer the API's, each saying so (their loops differ).
inline constexpr const char* kTrainerWriter = "accel trainer";

// The record keys for a run of `job` at `world` ranks on `data`; `loop_state` is identical on every
// rank (the fp16 loss scaler, or an empty object).
nlohmann::json trainer_record(const config::JobConfig& job, int world, const Dataset& data,
                              const nlohmann::json& loop_state);

// Throws CheckpointError naming `dir`'s record when it is not a trainer state, or DataError when
// it was written for other data.
void check_trainer_record(const std::string& dir, const nlohmann::json& record, const Dataset& data);

}  // namespace accel::train
