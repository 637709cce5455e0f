#include "runtime/config/import_common.hpp"

#include "runtime/common/strings.hpp"
#include "runtime/config/suggest.hpp"

namespace accel::config {

void ForeignReader::map(const YAML::Node& node, const std::string& foreign_path, const std::string& accel_path,
                        Translate translate) {
  if (is_auto(node)) {
    out_.auto_keys.emplace_back(foreign_path, accel_path);
    return;
  }
  auto location = where(node);
  location.detail = foreign_path;
  out_.assignments.push_back({accel_path, translate ? translate(node) : node, location});
}

void ForeignReader::unused(const YAML::Node& node, const std::string& foreign_path, const std::string& why,
                           const std::set<std::string>& neutral_values) {
  std::string text = node_text(node);
  bool neutral = node.IsNull() || (node.IsSequence() && node.size() == 0) || (node.IsMap() && node.size() == 0) ||
                 neutral_values.count(text);
  if (neutral) {
    out_.notes.push_back(foreign_path + ": ignored at its neutral value " + text);
    return;
  }
  out_.warnings.push_back({foreign_path, where(node), "accel does not act on this " + format_ + " key", text, "", why});
}

void ForeignReader::refuse(const YAML::Node& node, const std::string& foreign_path, const std::string& message,
                           const std::string& allowed, const std::string& hint) {
  out_.errors.push_back({foreign_path, where(node), message, node_text(node), allowed, hint});
}

void ForeignReader::unknown(const YAML::Node& key, const std::string& foreign_path,
                            const std::vector<std::string>& known) {
  std::string name = key.IsScalar() ? key.Scalar() : node_text(key);
  std::string guess = nearest(name, known);
  if (!guess.empty()) {
    out_.errors.push_back({foreign_path, where(key), "unknown " + format_ + " key", "", join(known),
                           "did you mean '" + guess + "'?"});
    return;
  }
  out_.warnings.push_back({foreign_path, where(key), "unknown " + format_ + " key; accel does not act on it", "", "",
                           "remove it, or check its spelling"});
}

std::vector<std::pair<YAML::Node, YAML::Node>> ForeignReader::entries(const YAML::Node& block,
                                                                      const std::string& foreign_path) {
  return mapping_entries(block, file_, foreign_path, out_.errors);
}

bool ForeignReader::is_block(const YAML::Node& node, const std::string& foreign_path) {
  if (node.IsMap()) return true;
  if (node.IsNull()) {
    out_.notes.push_back(foreign_path + ": empty, nothing to import");
    return false;
  }
  std::string leaf = foreign_path.substr(foreign_path.rfind('.') + 1);  // npos + 1 == 0
  out_.errors.push_back({foreign_path, where(node), "expected a mapping of keys to values", node_text(node), "",
                         format_ == "DeepSpeed" ? "write a JSON object: \"" + leaf + "\": {...}"
                                                : "indent its keys under '" + leaf + ":'"});
  return false;
}

std::optional<bool> ForeignReader::flag(const YAML::Node& node, const std::string& foreign_path) {
  bool value = false;
  if (node.IsScalar() && YAML::convert<bool>::decode(node, value)) return value;  // true, True, yes, on, ...
  out_.errors.push_back({foreign_path, where(node), "expected a boolean", node_text(node), "true | false", ""});
  return std::nullopt;
}

}  // namespace accel::config
