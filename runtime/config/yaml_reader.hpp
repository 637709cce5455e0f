// Reads YAML (and JSON, which yaml-cpp also parses) files with positions, and turns a native job
// document into assignments. Structural problems (unknown keys at any depth, duplicate keys,
// a section that is not a mapping) become diagnostics with file:line:col and a suggestion.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/assignment.hpp"

namespace accel::config {

// The text of a config file; a missing file or a directory throws ConfigError.
std::string read_config_text(const std::string& path);

// Parses a file; a missing file or a syntax error throws ConfigError with the position.
YAML::Node read_yaml_file(const std::string& path);

// Walks a native job document. Appends one assignment per leaf key, and diagnostics for problems.
void read_native_job(const YAML::Node& root, const std::string& file, std::vector<Assignment>& assignments,
                     std::vector<Diagnostic>& errors);

// Keys of a mapping node in order, reporting duplicates (yaml-cpp keeps both silently). A node that
// is not a mapping yields no entries and, unless it is empty (null), one diagnostic at `prefix`.
std::vector<std::pair<YAML::Node, YAML::Node>> mapping_entries(const YAML::Node& map, const std::string& file,
                                                               const std::string& prefix,
                                                               std::vector<Diagnostic>& errors);

// The value under `key` in a mapping, or an undefined node (false in a test). Never throws, unlike
// operator[] on a const node, whose result throws when queried if the key is missing.
YAML::Node find_child(const YAML::Node& map, const std::string& key);

}  // namespace accel::config
