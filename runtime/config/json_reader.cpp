#include "runtime/config/json_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/config/assignment.hpp"
#include "runtime/config/yaml_reader.hpp"

namespace accel::config {
namespace {

const char* const kJsonRules =
    "keys and strings in double quotes, \"key\": value pairs separated by commas, no trailing comma, no "
    "comments; Accelerate reads this file with Python's json module, which refuses it too";

// A SAX consumer that only remembers the first error: the syntax check needs no document.
struct SyntaxCheck : nlohmann::json_sax<nlohmann::json> {
  bool failed = false;
  size_t position = 0;  // characters read when the error was seen, the offending one included
  std::string last_token, what;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& ex) override {
    failed = true;
    position = pos;
    last_token = token;
    what = ex.what();
    return false;
  }
};

// nlohmann's message without its "[json.exception...] parse error at line L, column C: " prefix
// (the position is ours) and split into what is wrong and what was expected.
struct SyntaxMessage {
  std::string problem, expected;
};

SyntaxMessage split_message(std::string what) {
  if (auto id_end = what.find("] "); what.rfind("[json.exception.", 0) == 0 && id_end != std::string::npos)
    what.erase(0, id_end + 2);
  if (what.rfind("parse error", 0) == 0)
    if (auto colon = what.find(": "); colon != std::string::npos) what.erase(0, colon + 2);
  if (auto dash = what.find(" - "); what.rfind("syntax error while parsing ", 0) == 0 && dash != std::string::npos)
    what.erase(0, dash + 3);  // "syntax error while parsing value - " says no more than "not valid JSON"
  SyntaxMessage m;
  if (auto last_read = what.find("; last read: "); last_read != std::string::npos) {
    auto expected = what.find("; expected ", last_read);
    m.expected = expected == std::string::npos ? "" : what.substr(expected + 11);
    what.erase(last_read);
  } else if (auto expected = what.find("; expected "); expected != std::string::npos) {
    m.expected = what.substr(expected + 11);
    what.erase(expected);
  }
  m.problem = what;
  return m;
}

// Every key written twice in any mapping of the tree. yaml-cpp keeps both silently, and the
// importers look only into the blocks they read, so the whole tree is checked here.
void find_duplicates(const YAML::Node& node, const std::string& path, const std::string& file,
                     std::vector<Diagnostic>& errors) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      find_duplicates(node[i], path + "[" + std::to_string(i) + "]", file, errors);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, Location> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // JSON keys are strings, which yaml-cpp reads as scalars.
    std::string name = it->first.IsScalar() ? it->first.Scalar() : node_text(it->first);
    std::string key_path = path.empty() ? name : path + "." + name;
    auto where = node_location(file, it->first);
    if (auto first = seen.find(name); first != seen.end())
      errors.push_back({key_path, where, "duplicate key", "", "",
                        "first written at " + first->second.str() + "; keep one (DeepSpeed refuses duplicate keys)"});
    else
      seen.emplace(name, where);
    find_duplicates(it->second, key_path, file, errors);
  }
}

}  // namespace

bool is_json_path(const std::string& path) { return path.size() > 5 && path.substr(path.size() - 5) == ".json"; }

std::pair<int, int> line_and_column(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return {line, int(offset - line_start) + 1};
}

YAML::Node read_json_file(const std::string& path) {
  const std::string text = read_config_text(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return YAML::Node(YAML::NodeType::Null);

  SyntaxCheck check;
  nlohmann::json::sax_parse(text, &check, nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/false);
  if (check.failed) {
    auto [line, col] = line_and_column(text, check.position > 0 ? check.position - 1 : 0);
    auto m = split_message(check.what);
    char first = text[text.find_first_not_of(" \t\r\n")];
    std::string hint = first == '{' || first == '['
                           ? std::string("fix the syntax at that position: ") + kJsonRules
                           : "a JSON file holds one object, {\"key\": value, ...}; accel reads YAML only from a job file "
                             "whose name does not end in .json";
    throw ConfigError(Diagnostic{"", Location::in_file(path, line, col), "not valid JSON: " + m.problem,
                                 check.last_token, m.expected, hint});
  }

  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // Valid JSON that yaml-cpp, which gives the importers their positions, cannot read.
    auto where = e.mark.is_null() ? Location::in_file(path, 1, 1)
                                  : Location::in_file(path, e.mark.line + 1, e.mark.column + 1);
    throw ConfigError(Diagnostic{"", where, "valid JSON that accel's reader cannot parse: " + e.msg, "", "",
                                 "keep each key on one line with its ':', keys under 1024 characters, and write "
                                 "characters beyond U+FFFF as UTF-8 rather than \\u escapes"});
  }
  std::vector<Diagnostic> duplicates;
  find_duplicates(root, "", path, duplicates);
  if (!duplicates.empty()) throw ConfigError(duplicates);
  return root;
}

}  // namespace accel::config
