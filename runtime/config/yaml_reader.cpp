#include "runtime/config/yaml_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/config/schema.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/common/strings.hpp"

namespace accel::config {
namespace {

std::vector<std::string> keys_in_section(const std::string& section) {
  std::vector<std::string> keys;
  for (const auto& f : schema())
    if (f.section() == section) keys.push_back(f.leaf());
  if (section.empty())
    for (const auto& s : section_names()) keys.push_back(s);
  return keys;
}

// A suggestion for an unknown key: a near spelling here, the same key in another section, or an
// Accelerate-style `fsdp_` prefix that our fsdp block drops.
std::string unknown_key_hint(const std::string& section, const std::string& key) {
  auto here = keys_in_section(section);
  std::string stripped = key.rfind("fsdp_", 0) == 0 ? key.substr(5) : key;
  if (stripped != key && find_field(section.empty() ? stripped : section + "." + stripped))
    return "did you mean '" + stripped + "'? (inside fsdp: keys drop Accelerate's fsdp_ prefix)";
  auto guess = nearest(key, here);
  if (!guess.empty()) return "did you mean '" + guess + "'?";
  for (const auto& f : schema())
    if (f.leaf() == key && f.section() != section) return "'" + key + "' belongs under '" + f.section() + ":' (" + f.path + ")";
  return "remove it, or see `accel config keys`";
}

}  // namespace

std::string read_config_text(const std::string& path) {
  // open(2) first, for the operating system's reason when the file cannot be read (ENOENT, EACCES, ...).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int open_errno = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  std::ifstream in(path);
  std::error_code ec;  // the throwing overload of exists() escapes on a permission error
  if (fd < 0 || !std::filesystem::exists(path, ec) || !in)
    throw ConfigError(Diagnostic{"", Location::in_file(path, 0, 0),
                                 std::string("cannot read the job file: ") + std::strerror(open_errno ? open_errno : EIO), "",
                                 "", "check the path (working directory: " +
                                         std::filesystem::current_path(ec).string() + ")"});
  // A directory opens and reads as an empty document, which would load as "all defaults".
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(Diagnostic{"", Location::in_file(path, 0, 0), "cannot read the job file", "", "",
                                 "it is a directory; give the path of a file in it"});
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

YAML::Node read_yaml_file(const std::string& path) {
  std::string text = read_config_text(path);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(Diagnostic{"", Location::in_file(path, e.mark.line + 1, e.mark.column + 1),
                                 "not valid YAML: " + e.msg, "", "", "fix the syntax at that position"});
  }
}

std::vector<std::pair<YAML::Node, YAML::Node>> mapping_entries(const YAML::Node& map, const std::string& file,
                                                               const std::string& prefix,
                                                               std::vector<Diagnostic>& errors) {
  std::vector<std::pair<YAML::Node, YAML::Node>> entries;
  if (!map.IsMap()) {
    // Iterating a sequence yields invalid keys that throw when read, so a non-mapping stops here.
    if (map.IsDefined() && !map.IsNull())
      errors.push_back({prefix, node_location(file, map), "expected a mapping of keys to values", node_text(map),
                        "", prefix.empty() ? "" : "indent its keys under '" + prefix + ":'"});
    return entries;
  }
  std::map<std::string, Location> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    YAML::Node key = it->first, value = it->second;
    std::string name = key.IsScalar() ? key.Scalar() : node_text(key);
    std::string path = prefix.empty() ? name : prefix + "." + name;
    auto where = node_location(file, key);
    if (seen.count(name)) {
      errors.push_back({path, where, "duplicate key", "", "", "first written at " + seen[name].str() + "; keep one"});
      continue;
    }
    seen[name] = where;
    entries.emplace_back(key, value);
  }
  return entries;
}

YAML::Node find_child(const YAML::Node& map, const std::string& key) {
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

void read_native_job(const YAML::Node& root, const std::string& file, std::vector<Assignment>& assignments,
                     std::vector<Diagnostic>& errors) {
  if (root.IsNull()) return;  // an empty job file means "all defaults"
  if (!root.IsMap()) {
    errors.push_back({"", node_location(file, root), "a job file must be a mapping of keys to values",
                      node_text(root), "", "see config_templates/quickstart.yaml"});
    return;
  }
  const auto& sections = section_names();
  for (auto& [key, value] : mapping_entries(root, file, "", errors)) {
    std::string name = key.Scalar();
    bool is_section = std::find(sections.begin(), sections.end(), name) != sections.end();
    if (is_section) {
      if (value.IsNull()) continue;  // `fsdp:` with nothing under it
      if (!value.IsMap()) {
        errors.push_back({name, node_location(file, value), "a section must be a mapping of keys to values",
                          node_text(value), join(keys_in_section(name)), "indent its keys under '" + name + ":'"});
        continue;
      }
      for (auto& [k, v] : mapping_entries(value, file, name, errors)) {
        std::string path = name + "." + k.Scalar();
        if (!find_field(path)) {
          errors.push_back({path, node_location(file, k), "unknown key", "", join(keys_in_section(name)),
                            unknown_key_hint(name, k.Scalar())});
          continue;
        }
        assignments.push_back({path, v, node_location(file, v)});
      }
      continue;
    }
    if (!find_field(name)) {
      errors.push_back({name, node_location(file, key), "unknown key", "", join(keys_in_section("")),
                        unknown_key_hint("", name)});
      continue;
    }
    assignments.push_back({name, value, node_location(file, value)});
  }
}

}  // namespace accel::config
