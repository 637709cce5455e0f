// Reads a JSON config file (a DeepSpeed config, an Accelerate config saved as .json) as strictly
// as Accelerate does (Python's json module; DeepSpeed's hjson reader also takes comments and
// trailing commas, which Accelerate refuses), then hands the importers the same
// positioned YAML::Node tree a YAML file gives. yaml-cpp alone would accept YAML that is not JSON
// (`{"eauto"}` is a YAML mapping with a null value), so a strict JSON parser checks the syntax
// first; its byte position becomes file:line:col. Duplicate keys, which DeepSpeed refuses at any
// depth, are errors at both positions.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

namespace accel::config {

// True for a path whose name ends in ".json": a job file in that format is read by read_json_file.
bool is_json_path(const std::string& path);

// Parses `path` as strict JSON. A missing file, a syntax error, or a duplicate key throws
// ConfigError with the position. A file of only whitespace returns a null node, which the importer
// reports in its own words ("the DeepSpeed config is empty").
YAML::Node read_json_file(const std::string& path);

// The 1-based line and column of byte `offset` (0-based) of `text`; an offset past the end is the
// position just after the last character.
std::pair<int, int> line_and_column(const std::string& text, size_t offset);

}  // namespace accel::config
