// The job schema: one FieldSpec per YAML key, in file order. It is the single source of truth for
// the key set, types, defaults, allowed values, ranges and documentation. Loading, overrides,
// validation, dumps, `accel config keys`, the questionnaire and the docs all read this table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/config/job.hpp"

namespace accel::config {

enum class FieldType { Bool, Int, Float, String, Path, Enum, FloatList, StringList };

// A parsed value of one key. Enums are held by name; the binding converts to the typed enum.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<double>, std::vector<std::string>>;

struct FieldSpec {
  std::string path;                  // "deepspeed.zero_stage"
  FieldType type = FieldType::String;
  std::string doc;                   // meaning, unit, what disables it
  std::vector<std::string> allowed;  // Enum: the spellings (accepted synonyms are not listed);
                                     // StringList: what each element may be (empty: anything)
  // Set: the spellings are read when asked instead (backend: the dialects registered by then).
  std::function<std::vector<std::string>()> allowed_from;
  std::vector<std::string> not_built;  // values the tools accel follows accept and accel does not
                                       // build: refused with a fix that says so
  std::optional<double> min, max;    // numeric range (per element for FloatList), inclusive
  bool max_exclusive = false;        // max itself is not allowed (betas < 1)
  size_t list_size = 0;              // FloatList: exact length
  bool int32 = false;                // Int bound to a C++ int: a value beyond its 32 bits is refused,
                                     // never wrapped (2^32 would otherwise read as 0)
  bool relative_to_file = false;     // Path: resolve against the directory of the file that set it
  std::string alias_of;              // non-empty: writing this key writes that one (DeepSpeed names)
  std::function<Value(const JobConfig&)> get;
  std::function<void(JobConfig&, const Value&)> set;

  std::string section() const;       // "deepspeed", or "" for top-level keys
  std::string leaf() const;          // "zero_stage"
  std::string env_var() const;       // "ACCEL_DEEPSPEED_ZERO_STAGE"
  std::vector<std::string> allowed_values() const;  // Enum: allowed_from's, else allowed
  std::string allowed_text() const;  // "0 | 1 | 2 | 3", "integer >= 1", ...
  std::string type_name() const;     // "integer", "number", "boolean", ...
};

// All keys, in the order a dumped job lists them. Aliases come after the keys they alias.
const std::vector<FieldSpec>& schema();
const FieldSpec* find_field(const std::string& path);
// The section names, in file order ("deepspeed", "fsdp", ...).
const std::vector<std::string>& section_names();

// Environment variables starting with ACCEL_ that are not job keys (scripts, launcher contract).
const std::vector<std::string>& reserved_env_vars();

// Renders a value as YAML text (strings quoted when YAML would misread them).
std::string value_to_yaml(const Value& value);
bool values_equal(const Value& a, const Value& b);

}  // namespace accel::config
