// A model section as JSON, for records that must rebuild the model later without the job file: a
// checkpoint's trainer.json (merge-weights --format hf writes config.json from it). Every model.*
// key of the schema is written, so a new model key is recorded without touching this file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config/job.hpp"

namespace accel::config {

// {"name": "llama", "n_layer": 2, ...}: every model.* key but from_pretrained (a path on the
// machine that trained, not part of the model).
nlohmann::json model_section_json(const ModelSection& section);

// The inverse. Keys absent from `record` keep their defaults (older records held only name and
// the five gpt sizes). Throws accel::UsageError naming `where` and the key for a value of the
// wrong type or one check_model_section refuses.
ModelSection model_section_from_json(const nlohmann::json& record, const std::string& where);

}  // namespace accel::config
