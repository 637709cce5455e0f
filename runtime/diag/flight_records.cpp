// The JSON form of a rank's flight records; see flight_records.hpp.
#include "runtime/diag/flight_records.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/common/human_bytes.hpp"

namespace accel::flight {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "accel-flight-1";

OpState state_from(const std::string& text, const std::string& where) {
  for (OpState s : {OpState::Running, OpState::Completed, OpState::Failed})
    if (text == to_string(s)) return s;
  throw std::runtime_error(where + ": unknown op state '" + text + "' (running | completed | failed)");
}

json record_json(const OpRecord& r) {
  return json{{"seq", r.seq},           {"order", r.order},         {"op", r.op},
              {"dtype", r.dtype},       {"count", r.count},         {"bytes", r.bytes},
              {"root", r.root},         {"issued_ns", r.issued_ns}, {"started_ns", r.started_ns},
              {"ended_ns", r.ended_ns}, {"state", to_string(r.state)}};
}

OpRecord record_from(const json& j, const std::string& where) {
  OpRecord r;
  r.seq = j.at("seq").get<uint64_t>();
  r.order = j.at("order").get<uint64_t>();
  r.op = j.at("op").get<std::string>();
  r.dtype = j.at("dtype").get<std::string>();
  r.count = j.at("count").get<int64_t>();
  r.bytes = j.at("bytes").get<int64_t>();
  r.root = j.at("root").get<int>();
  r.issued_ns = j.at("issued_ns").get<int64_t>();
  r.started_ns = j.at("started_ns").get<int64_t>();
  r.ended_ns = j.at("ended_ns").get<int64_t>();
  r.state = state_from(j.at("state").get<std::string>(), where);
  return r;
}

}  // namespace

const char* to_string(OpState state) {
  switch (state) {
    case OpState::Running: return "running";
    case OpState::Completed: return "completed";
    case OpState::Failed: return "failed";
  }
  return "unknown";
}

bool same_signature(const OpRecord& a, const OpRecord& b) {
  return a.op == b.op && a.count == b.count && a.dtype == b.dtype && a.bytes == b.bytes && a.root == b.root;
}

std::string describe_op(const OpRecord& op) {
  if (op.op == "barrier") return op.op;
  std::string text = op.op + " of " + std::to_string(op.count) + " " + op.dtype + " (" + human_bytes(op.bytes) + ")";
  if (op.root >= 0) text += " from rank " + std::to_string(op.root);
  return text;
}

std::string to_json(const RankDump& dump) {
  json groups = json::array();
  for (const GroupRecords& g : dump.groups) {
    json records = json::array();
    for (const OpRecord& r : g.records) records.push_back(record_json(r));
    groups.push_back(json{{"name", g.name},
                          {"members", g.members},
                          {"group_rank", g.group_rank},
                          {"timeout_ms", g.timeout_ms},
                          {"issued", g.issued},
                          {"torn", g.torn},
                          {"closed", g.closed},
                          {"records", std::move(records)}});
  }
  json j{{"format", kFormat},
         {"rank", dump.rank},
         {"world", dump.world},
         {"pid", dump.pid},
         {"host", dump.host},
         {"hosts", dump.hosts},
         {"reason", dump.reason},
         {"dumped_at_ns", dump.dumped_at_ns},
         {"groups", std::move(groups)}};
  return j.dump(1) + "\n";
}

RankDump rank_dump_from_json(const std::string& text, const std::string& where) {
  try {
    const json j = json::parse(text);
    if (j.value("format", "") != kFormat)
      throw std::runtime_error("not a flight record dump (format '" + j.value("format", "") + "', expected '" +
                               kFormat + "')");
    RankDump dump;
    dump.rank = j.at("rank").get<int>();
    dump.world = j.at("world").get<int>();
    dump.pid = j.at("pid").get<int>();
    dump.host = j.at("host").get<std::string>();
    if (j.contains("hosts")) dump.hosts = j.at("hosts").get<std::vector<std::string>>();  // absent before issue 52
    dump.reason = j.at("reason").get<std::string>();
    dump.dumped_at_ns = j.at("dumped_at_ns").get<int64_t>();
    for (const json& gj : j.at("groups")) {
      GroupRecords g;
      g.name = gj.at("name").get<std::string>();
      g.members = gj.at("members").get<std::vector<int>>();
      g.group_rank = gj.at("group_rank").get<int>();
      g.timeout_ms = gj.at("timeout_ms").get<int64_t>();
      g.issued = gj.at("issued").get<uint64_t>();
      g.torn = gj.at("torn").get<uint64_t>();
      g.closed = gj.at("closed").get<bool>();
      for (const json& rj : gj.at("records")) g.records.push_back(record_from(rj, where));
      dump.groups.push_back(std::move(g));
    }
    return dump;
  } catch (const json::exception& e) {
    throw std::runtime_error(where + ": " + e.what());
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.rfind(where, 0) == 0) throw;
    throw std::runtime_error(where + ": " + what);
  }
}

}  // namespace accel::flight
