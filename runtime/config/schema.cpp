// Lookups and rendering over the schema table (the table itself is in schema_fields.cpp).
#include "runtime/config/schema.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

namespace accel::config {

std::string FieldSpec::section() const {
  auto dot = path.find('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string FieldSpec::leaf() const {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string FieldSpec::env_var() const {
  std::string name = "ACCEL_";
  for (char c : path) name += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

static std::string number_text(double v) {
  if (std::fabs(v) >= 1e6 && v == std::floor(v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string FieldSpec::type_name() const {
  switch (type) {
    case FieldType::Bool: return "boolean";
    case FieldType::Int: return "integer";
    case FieldType::Float: return "number";
    case FieldType::String: return "string";
    case FieldType::Path: return "path";
    case FieldType::Enum: return "enum";
    case FieldType::FloatList: return "list of " + std::to_string(list_size) + " numbers";
    case FieldType::StringList: return "list of strings";
  }
  return "?";
}

std::vector<std::string> FieldSpec::allowed_values() const { return allowed_from ? allowed_from() : allowed; }

std::string FieldSpec::allowed_text() const {
  if (type == FieldType::Enum) {
    std::string s;
    for (const auto& a : allowed_values()) s += (s.empty() ? "" : " | ") + a;
    return s;
  }
  if (type == FieldType::StringList && !allowed.empty()) {
    std::string s;
    for (const auto& a : allowed) s += (s.empty() ? "" : " | ") + a;
    return "list of " + s;
  }
  if (type == FieldType::Bool) return "true | false";
  if (type == FieldType::Int || type == FieldType::Float || type == FieldType::FloatList) {
    std::string what = type == FieldType::Int ? "integer" : "number";
    if (type == FieldType::FloatList) what = "list of " + std::to_string(list_size) + " numbers, each";
    if (min && max) return what + " in [" + number_text(*min) + ", " + number_text(*max) + (max_exclusive ? ")" : "]");
    if (min) return what + " >= " + number_text(*min);
    if (max) return what + (max_exclusive ? " < " : " <= ") + number_text(*max);
    return what;
  }
  return "";
}

const FieldSpec* find_field(const std::string& path) {
  static const std::map<std::string, const FieldSpec*> index = [] {
    std::map<std::string, const FieldSpec*> m;
    for (const auto& f : schema()) m[f.path] = &f;
    return m;
  }();
  auto it = index.find(path);
  return it == index.end() ? nullptr : it->second;
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : schema()) {
      auto s = f.section();
      if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
    }
    return v;
  }();
  return names;
}

const std::vector<std::string>& reserved_env_vars() {
  // The launcher's contract with workers: ACCEL_JOB (the resolved job file), ACCEL_RESTART_COUNT,
  // ACCEL_RENDEZVOUS_FD (rank 0's inherited listening socket), ACCEL_WORKER_TASK and ACCEL_WORKER_OPTIONS (what `accel test` / `accel bench` ask of workers).
  // ACCEL_LOG_LEVEL: log verbosity. ACCEL_BUILD_DIR, ACCEL_BUILD_JOBS: used by scripts/.
  // ACCEL_PYTHON: the Python interpreter the reference checks run; ACCEL_VENV: where scripts/setup.sh
  // puts accel's Python environment (default ~/.cache/accel/venv-torch2.11).
  // ACCEL_FAULT: deterministic fault injection for crash and restart tests (docs/design/0004).
  // ACCEL_SHM_DISABLE: keeps the CPU ranks of one host on TCP (docs/design/0020).
  // ACCEL_NCCL_ISSUE_AT_WORLD_ONE: a test switch sending a one-GPU job's collectives through NCCL.
  // ACCEL_WHOLE_MODEL_INIT: a benchmark switch, the built-in model built whole on every rank.
  // ACCEL_FLIGHT_DIR: where workers dump collective flight records (set by the launcher);
  // ACCEL_FLIGHT_RECORDER=0: communicators record nothing (docs/design/0025).
  // ACCEL_PROGRESS (tty | lines | off): how long work shows its progress (runtime/common/progress.hpp).
  // ACCEL_SECRET_FILE: the job secret's file; ACCEL_SECRET_FD: its memfd in workers (SECURITY.md).
  static const std::vector<std::string> names = {"ACCEL_JOB",          "ACCEL_RESTART_COUNT", "ACCEL_WORKER_TASK",
                                                 "ACCEL_WORKER_OPTIONS", "ACCEL_LOG_LEVEL",     "ACCEL_BUILD_DIR",
                                                 "ACCEL_BUILD_JOBS", "ACCEL_PYTHON",        "ACCEL_VENV",
                                                 "ACCEL_FAULT",      "ACCEL_SHM_DISABLE",   "ACCEL_RENDEZVOUS_FD",
                                                 "ACCEL_NCCL_ISSUE_AT_WORLD_ONE", "ACCEL_WHOLE_MODEL_INIT",
                                                 "ACCEL_FLIGHT_DIR", "ACCEL_FLIGHT_RECORDER", "ACCEL_PROGRESS",
                                                 "ACCEL_SECRET_FILE", "ACCEL_SECRET_FD"};
  return names;
}

// Strings YAML would read as something other than a string must be quoted when written back.
static bool needs_quotes(const std::string& s) {
  static const std::regex special(
      R"(^(|~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$)");
  static const std::regex number(R"(^[-+]?(\.?[0-9]|[0-9]).*$)");
  if (std::regex_match(s, special) || std::regex_match(s, number)) return true;
  for (char c : s)
    if (c == ':' || c == '#' || c == '"' || c == '\'' || c == '{' || c == '}' || c == '[' || c == ']' ||
        c == ',' || c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '@' || c == '`')
      return true;
  return s.front() == ' ' || s.back() == ' ' || s.front() == '-' || s.front() == '?';
}

static std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

static std::string float_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest text that reads back to the same double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float in YAML
  return s;
}

std::string value_to_yaml(const Value& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return float_text(d); }
    std::string operator()(const std::string& s) const { return needs_quotes(s) ? quote(s) : s; }
    std::string operator()(const std::vector<std::string>& v) const {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (needs_quotes(v[i]) || v[i].find(' ') != std::string::npos ? quote(v[i]) : v[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<double>& v) const {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + float_text(v[i]);
      return s + "]";
    }
  };
  return std::visit(Visitor{}, value);
}

bool values_equal(const Value& a, const Value& b) { return a == b; }

}  // namespace accel::config
