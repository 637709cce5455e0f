// The model section as JSON (see model_record.hpp).
#include "runtime/config/model_record.hpp"

#include <algorithm>

#include "runtime/common/errors.hpp"
#include "runtime/config/enums.hpp"
#include "runtime/config/model_section.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config {
namespace {

bool recorded(const FieldSpec& f) {
  return f.section() == "model" && f.alias_of.empty() && f.path != "model.from_pretrained";
}

}  // namespace

nlohmann::json model_section_json(const ModelSection& section) {
  JobConfig job;
  job.model = section;
  nlohmann::json out = nlohmann::json::object();
  for (const FieldSpec& f : schema()) {
    if (!recorded(f)) continue;
    std::visit([&](const auto& v) { out[f.leaf()] = v; }, f.get(job));
  }
  return out;
}

ModelSection model_section_from_json(const nlohmann::json& record, const std::string& where) {
  if (!record.is_object()) throw UsageError(where + ": the model record is not a JSON object");
  JobConfig job;
  for (const FieldSpec& f : schema()) {
    if (!recorded(f) || !record.contains(f.leaf())) continue;
    const nlohmann::json& v = record[f.leaf()];
    const std::string key = "model." + f.leaf();
    Value value;
    if (f.type == FieldType::Bool && v.is_boolean()) {
      value = v.get<bool>();
    } else if (f.type == FieldType::Int && v.is_number_integer()) {
      value = v.get<int64_t>();
      if ((f.min && double(v.get<int64_t>()) < *f.min) || (f.max && double(v.get<int64_t>()) > *f.max))
        throw UsageError(where + ": " + key + " is " + v.dump() + ", outside " + f.allowed_text());
    } else if (f.type == FieldType::Float && v.is_number()) {
      value = v.get<double>();
    } else if (f.type == FieldType::Enum && v.is_string()) {
      const auto allowed = f.allowed_values();
      if (std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end())
        throw UsageError(where + ": " + key + " is " + v.dump() + ", not one of " + f.allowed_text());
      value = v.get<std::string>();
    } else {
      throw UsageError(where + ": " + key + " is " + v.dump() + ", not a " + f.type_name());
    }
    f.set(job, value);
  }
  try {
    check_model_section(job.model);
  } catch (const ConfigError& e) {
    throw UsageError(where + ": the recorded model section is not one accel builds: " + e.what());
  }
  return job.model;
}

}  // namespace accel::config
