// Shared machinery for importing foreign config files key by key. Every key of the foreign file
// ends in exactly one place: mapped to an accel key, kept at accel's value ("auto"), noted as
// ignored at a neutral value, warned about (accel does not act on it), or an error (accel cannot
// honour the value and refuses to downgrade silently). A key close to a known one is an error: a
// misspelt `enabled` would otherwise drop the setting it was meant to make.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/config/import_result.hpp"
#include "runtime/config/yaml_reader.hpp"

namespace accel::config {

class ForeignReader {
 public:
  ForeignReader(std::string file, std::string format, ImportResult& out) : file_(std::move(file)), format_(std::move(format)), out_(out) {}

  // Maps key `name` of `map` (at `prefix`) to `accel_path`, translating the value if `translate`
  // is given. "auto" keeps accel's value.
  using Translate = std::function<YAML::Node(const YAML::Node&)>;
  void map(const YAML::Node& node, const std::string& foreign_path, const std::string& accel_path,
           Translate translate = nullptr);

  // Records that a key has no effect in accel. At a neutral value it is noted; otherwise warned.
  void unused(const YAML::Node& node, const std::string& foreign_path, const std::string& why,
              const std::set<std::string>& neutral_values = {});
  // Refuses a value accel cannot honour.
  void refuse(const YAML::Node& node, const std::string& foreign_path, const std::string& message,
              const std::string& allowed, const std::string& hint);
  // A key this reader does not know. Near one of `known` (the keys of its block) it is an error
  // with a suggestion; otherwise a warning, since foreign formats grow keys accel need not act on.
  void unknown(const YAML::Node& key, const std::string& foreign_path, const std::vector<std::string>& known);

  // The entries of a block; duplicates and a block that is not a mapping are errors.
  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& block, const std::string& foreign_path);
  // True when `node` is a mapping to read. An empty (null) block is noted; any other value is an error.
  bool is_block(const YAML::Node& node, const std::string& foreign_path);
  // A boolean in YAML's spellings (true, False, yes, off, ...); anything else is refused: nullopt.
  std::optional<bool> flag(const YAML::Node& node, const std::string& foreign_path);

  static bool is_auto(const YAML::Node& node) { return node.IsScalar() && node.Scalar() == "auto"; }
  Location where(const YAML::Node& node) const { return node_location(file_, node); }
  const std::string& file() const { return file_; }
  ImportResult& out() { return out_; }

 private:
  std::string file_;
  std::string format_;
  ImportResult& out_;
};

// Dispatches on a key's name and remembers every name it was compared with, so the fallback can
// list the block's keys and suggest the nearest without a second list that could drift.
class KeyMatch {
 public:
  // A key that is not a scalar (YAML allows `? [a, b]`) matches nothing and is named as written.
  explicit KeyMatch(const YAML::Node& key) : name_(key.IsScalar() ? key.Scalar() : node_text(key)) {}
  bool is(const std::string& candidate) {
    tried_.push_back(candidate);
    return name_ == candidate;
  }
  bool any(const std::vector<std::string>& candidates) {
    for (const auto& c : candidates)
      if (is(c)) return true;
    return false;
  }
  const std::string& name() const { return name_; }
  const std::vector<std::string>& tried() const { return tried_; }

 private:
  std::string name_;
  std::vector<std::string> tried_;
};

}  // namespace accel::config
