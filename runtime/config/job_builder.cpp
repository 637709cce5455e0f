#include "runtime/config/job_builder.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "runtime/config/machine_range.hpp"
#include "runtime/config/suggest.hpp"

namespace accel::config {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || std::isnan(v) || std::isinf(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(const std::string& text) {
  auto t = lower(text);
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

// "a boolean", "an integer": the type's name with its article.
std::string a_type(const FieldSpec& f) {
  const std::string name = f.type_name();
  return (std::string("aeiou").find(name[0]) == std::string::npos ? "a " : "an ") + name;
}

Diagnostic type_error(const FieldSpec& f, const YAML::Node& node, const Location& where, const std::string& what) {
  return {f.path, where, what, node_text(node), f.allowed_text(), "write " + a_type(f)};
}

bool in_range(const FieldSpec& f, double v) {
  if (f.min && v < *f.min) return false;
  if (f.max && (f.max_exclusive ? v >= *f.max : v > *f.max)) return false;
  return true;
}

Diagnostic range_error(const FieldSpec& f, const YAML::Node& node, const Location& where) {
  return {f.path, where, "value out of range", node_text(node), f.allowed_text(), ""};
}

std::optional<std::string> match_enum(const FieldSpec& f, const YAML::Node& node) {
  std::string text = node.IsNull() ? "null" : node.Scalar();
  const std::vector<std::string> allowed = f.allowed_values();
  for (const auto& a : allowed)
    if (a == text) return a;
  for (const auto& a : allowed)  // FULL_SHARD and full_shard are the same name
    if (lower(a) == lower(text)) return a;
  // YAML reads a bare `no` as false and a bare `none`/`~` as null: accept them for the "off" value.
  auto t = lower(text);
  bool off_word = t == "false" || t == "no" || t == "none" || t == "null" || t == "~" || t.empty();
  if (off_word)
    for (const auto& a : allowed)
      if (a == "no" || a == "none") return a;
  return std::nullopt;
}

// A StringList element outside f.allowed: "unknown value" at the element itself.
bool check_element(const FieldSpec& f, const YAML::Node& item, const Location& list_where, std::string& text,
                   std::vector<Diagnostic>& errors) {
  if (f.allowed.empty()) return true;
  for (const auto& a : f.allowed)
    if (lower(a) == lower(text)) {
      text = a;
      return true;
    }
  Location where = list_where;
  if (where.origin == Location::Origin::File) where = node_location(where.file, item);
  Diagnostic d{f.path, where, "unknown value", text, f.allowed_text(), ""};
  if (std::find(f.not_built.begin(), f.not_built.end(), lower(text)) != f.not_built.end()) {
    d.hint = "'" + text + "' is not built in accel; use one of the allowed values";
  } else {
    auto guess = nearest(text, f.allowed);
    d.hint = guess.empty() ? "use one of the allowed values" : "did you mean '" + guess + "'?";
  }
  errors.push_back(d);
  return false;
}

}  // namespace

Location node_location(const std::string& file, const YAML::Node& node) {
  if (!node.IsDefined()) return Location::in_file(file, 0, 0);  // Mark() throws on a missing key's node
  auto mark = node.Mark();
  if (mark.line < 0) return Location::in_file(file, 0, 0);
  return Location::in_file(file, mark.line + 1, mark.column + 1);
}

std::string node_text(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

std::optional<Value> parse_value(const FieldSpec& f, const YAML::Node& node, const Location& where,
                                 std::vector<Diagnostic>& errors) {
  if (f.type == FieldType::Enum) {
    if (node.IsNull() || node.IsScalar())
      if (auto v = match_enum(f, node)) return Value{*v};
    Diagnostic d{f.path, where, "unknown value", node_text(node), f.allowed_text(), ""};
    auto guess = nearest(node.IsScalar() ? node.Scalar() : "", f.allowed_values());
    d.hint = guess.empty() ? "use one of the allowed values" : "did you mean '" + guess + "'?";
    errors.push_back(d);
    return std::nullopt;
  }
  if (f.type == FieldType::String || f.type == FieldType::Path) {
    if (node.IsNull()) return Value{std::string()};
    if (!node.IsScalar()) {
      errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
      return std::nullopt;
    }
    return Value{node.Scalar()};
  }
  if (node.IsNull() && f.type == FieldType::StringList) return Value{std::vector<std::string>{}};
  if (node.IsNull()) {
    errors.push_back(type_error(f, node, where, "needs a value"));
    return std::nullopt;
  }
  if (f.type == FieldType::StringList) {
    if (node.IsScalar()) {  // a single word
      std::string text = node.Scalar();
      if (!check_element(f, node, where, text, errors)) return std::nullopt;
      return Value{std::vector<std::string>{text}};
    }
    if (!node.IsSequence()) {
      errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
      return std::nullopt;
    }
    std::vector<std::string> list;
    bool ok = true;
    for (const auto& item : node) {
      if (!item.IsScalar()) {
        errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
        return std::nullopt;
      }
      std::string text = item.Scalar();
      ok = check_element(f, item, where, text, errors) && ok;
      list.push_back(text);
    }
    if (!ok) return std::nullopt;
    return Value{list};
  }
  if (f.type == FieldType::FloatList) {
    if (!node.IsSequence()) {
      errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
      return std::nullopt;
    }
    std::vector<double> list;
    for (const auto& item : node) {
      auto v = item.IsScalar() ? parse_number(item.Scalar()) : std::nullopt;
      if (!v) {
        errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
        return std::nullopt;
      }
      list.push_back(*v);
    }
    bool ok = f.list_size == 0 || list.size() == f.list_size;
    for (double v : list) ok = ok && in_range(f, v);
    if (!ok) {
      errors.push_back(range_error(f, node, where));
      return std::nullopt;
    }
    return Value{list};
  }
  if (!node.IsScalar()) {
    errors.push_back(type_error(f, node, where, "expected " + a_type(f)));
    return std::nullopt;
  }
  const std::string& text = node.Scalar();
  if (f.type == FieldType::Bool) {
    if (auto b = parse_bool(text)) return Value{*b};
    errors.push_back(type_error(f, node, where, "expected a boolean"));
    return std::nullopt;
  }
  auto number = parse_number(text);
  if (!number) {
    errors.push_back(type_error(f, node, where, "expected " + std::string(f.type == FieldType::Int ? "an integer" : "a number")));
    return std::nullopt;
  }
  if (f.type == FieldType::Int && (*number != std::floor(*number) || std::fabs(*number) > 9.0e18)) {
    errors.push_back(type_error(f, node, where, "expected an integer"));
    return std::nullopt;
  }
  if (!in_range(f, *number)) {
    errors.push_back(range_error(f, node, where));
    return std::nullopt;
  }
  if (f.int32 && (*number > std::numeric_limits<int>::max() || *number < std::numeric_limits<int>::min())) {
    auto d = range_error(f, node, where);
    d.allowed = f.min ? d.allowed + ", at most 2147483647" : "integer in -2147483648 .. 2147483647";
    d.hint = "this key holds a 32-bit integer";
    errors.push_back(d);
    return std::nullopt;
  }
  if (f.type == FieldType::Int) return Value{static_cast<int64_t>(*number)};
  return Value{*number};
}

JobBuilder::JobBuilder() {
  for (const auto& f : schema())
    if (f.alias_of.empty()) {
      sources_[f.path] = Location::default_value();
      layers_[f.path] = Layer::Default;
    }
}

Layer JobBuilder::layer_of(const std::string& path) const {
  auto it = layers_.find(path);
  return it == layers_.end() ? Layer::Default : it->second;
}

void JobBuilder::apply(const Assignment& a, Layer layer) {
  if (is_machine_range(a)) {  // num_machines: MIN:MAX sets min_machines too
    for (const Assignment& part : expand_machine_range(a, errors_)) apply(part, layer);
    return;
  }
  const FieldSpec* field = find_field(a.path);
  if (!field) {
    std::vector<std::string> keys;
    for (const auto& f : schema()) keys.push_back(f.path);
    auto guess = nearest(a.path, keys);
    errors_.push_back({a.path, a.where, "unknown key", "", "",
                       guess.empty() ? "run `accel config keys` for the list of keys" : "did you mean '" + guess + "'?"});
    return;
  }
  auto value = parse_value(*field, a.value, a.where, errors_);
  if (!value) return;

  const FieldSpec* target = field->alias_of.empty() ? field : find_field(field->alias_of);
  Location where = a.where;
  if (target != field) where.detail = where.detail.empty() ? "as " + field->path : where.detail + ", as " + field->path;

  if (target->type == FieldType::Path && target->relative_to_file && where.origin == Location::Origin::File) {
    auto& text = std::get<std::string>(*value);
    std::filesystem::path p(text);
    // Absolute, so the resolved job a launcher writes elsewhere (output_dir) still names the same file.
    if (!text.empty() && p.is_relative())
      text = std::filesystem::absolute(std::filesystem::path(where.file).parent_path() / p).lexically_normal().string();
  }
  // The program a job file names follows the same rule as its data files: a relative path (one with a
  // slash) is the job file's neighbour, whatever the working directory; a bare name is looked up on
  // PATH as execvp does, and the arguments after it are the program's own.
  if (target->path == "program" && where.origin == Location::Origin::File) {
    auto& words = std::get<std::vector<std::string>>(*value);
    if (!words.empty() && words.front().find('/') != std::string::npos && std::filesystem::path(words.front()).is_relative())
      words.front() = std::filesystem::absolute(std::filesystem::path(where.file).parent_path() / words.front())
                          .lexically_normal()
                          .string();
  }

  Layer previous = layer_of(target->path);
  // A higher-precedence layer already set it: this value is overridden, and so is any disagreement
  // within its own layer (a job file and the DeepSpeed JSON it names, settled by --set).
  if (previous > layer) return;
  if (previous == layer && layer_values_.count(target->path) && !values_equal(layer_values_[target->path], *value)) {
    errors_.push_back({target->path, where, "set twice with different values", value_to_yaml(*value), "",
                       "also set to " + value_to_yaml(layer_values_[target->path]) + " at " +
                           sources_[target->path].str() + "; keep one"});
    return;
  }
  target->set(job_, *value);
  sources_[target->path] = where;
  layers_[target->path] = layer;
  layer_values_[target->path] = *value;
}

void JobBuilder::derive(const std::string& path, const Value& value, const std::string& how,
                        const std::string& from_file) {
  const FieldSpec* field = find_field(path);
  field->set(job_, value);
  sources_[path] = Location::derived(how);
  sources_[path].file = from_file;
}

}  // namespace accel::config
