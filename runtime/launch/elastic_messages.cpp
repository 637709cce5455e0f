#include "runtime/launch/elastic_messages.hpp"

#include "runtime/common/job_secret.hpp"

#include <charconv>

namespace accel::launch {
namespace {

std::string clean(std::string text) {
  for (char& c : text)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return text;
}

std::string list_text(const std::vector<int>& values) {
  if (values.empty()) return "-";
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

std::optional<int> number(const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::optional<std::vector<int>> list(const std::string& text) {
  std::vector<int> values;
  if (text == "-") return values;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    auto v = number(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!v) return std::nullopt;
    values.push_back(*v);
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

std::vector<std::string> split(const std::string& line, size_t max_fields) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (fields.size() + 1 < max_fields) {
    const size_t tab = line.find('\t', start);
    if (tab == std::string::npos) break;
    fields.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
  fields.push_back(line.substr(start));  // the last field keeps any tab (none after encode)
  return fields;
}

}  // namespace

std::string encode(const ElasticMessage& m) {
  const std::string t = "\t";
  switch (m.kind) {
    case ElasticKind::Join: return "join" + t + std::to_string(m.machine) + t + clean(m.text) + "\n";
    case ElasticKind::Failed: return "failed" + t + std::to_string(m.round) + t + clean(m.text) + "\n";
    case ElasticKind::Done: return "done" + t + std::to_string(m.round) + "\n";
    case ElasticKind::Round:
      return "round" + t + std::to_string(m.round) + t + std::to_string(m.rank) + t + std::to_string(m.worker_port) +
             t + list_text(m.machines) + t + list_text(m.left) + t + clean(m.text) + "\n";
    case ElasticKind::Stop: return "stop" + t + std::to_string(m.round) + t + clean(m.text) + "\n";
    case ElasticKind::Wait: return "wait" + t + std::to_string(m.round) + "\n";
    case ElasticKind::End: return "end" + t + std::to_string(m.exit_code) + t + clean(m.text) + "\n";
  }
  return "\n";
}

std::optional<ElasticMessage> decode(const std::string& line) {
  const std::string kind = line.substr(0, line.find('\t'));
  ElasticMessage m;
  auto fields_of = [&](size_t n) { return split(line, n); };
  if (kind == "join") {
    auto f = fields_of(3);
    auto machine = f.size() == 3 ? number(f[1]) : std::nullopt;
    if (!machine) return std::nullopt;
    m.kind = ElasticKind::Join;
    m.machine = *machine;
    m.text = secret::printable(f[2]);
    return m;
  }
  if (kind == "failed" || kind == "stop") {
    auto f = fields_of(3);
    auto round = f.size() == 3 ? number(f[1]) : std::nullopt;
    if (!round) return std::nullopt;
    m.kind = kind == "failed" ? ElasticKind::Failed : ElasticKind::Stop;
    m.round = *round;
    m.text = secret::printable(f[2]);
    return m;
  }
  if (kind == "done" || kind == "wait") {
    auto f = fields_of(2);
    auto round = f.size() == 2 ? number(f[1]) : std::nullopt;
    if (!round) return std::nullopt;
    m.kind = kind == "done" ? ElasticKind::Done : ElasticKind::Wait;
    m.round = *round;
    return m;
  }
  if (kind == "round") {
    auto f = fields_of(7);
    if (f.size() != 7) return std::nullopt;
    auto round = number(f[1]), rank = number(f[2]), port = number(f[3]);
    auto machines = list(f[4]), left = list(f[5]);
    if (!round || !rank || !port || !machines || !left || machines->empty()) return std::nullopt;
    m.kind = ElasticKind::Round;
    m.round = *round;
    m.rank = *rank;
    m.worker_port = *port;
    m.machines = *machines;
    m.left = *left;
    m.text = secret::printable(f[6]);
    return m;
  }
  if (kind == "end") {
    auto f = fields_of(3);
    auto code = f.size() == 3 ? number(f[1]) : std::nullopt;
    if (!code) return std::nullopt;
    m.kind = ElasticKind::End;
    m.exit_code = *code;
    m.text = secret::printable(f[2]);
    return m;
  }
  return std::nullopt;
}

std::string machines_text(const std::vector<int>& machines) {
  std::string out;
  for (size_t i = 0; i < machines.size(); ++i) {
    if (i) out += i + 1 == machines.size() ? " and " : ", ";
    out += std::to_string(machines[i]);
  }
  return out;
}

}  // namespace accel::launch
