#include "engine/sharded/unit_trace.hpp"

#include <map>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::engine {

const char* to_string(TraceEvent event) {
  switch (event) {
    case TraceEvent::gather_issued: return "gather_issued";
    case TraceEvent::gather_done: return "gather_done";
    case TraceEvent::reshard: return "reshard";
    case TraceEvent::reduce_issued: return "reduce_issued";
    case TraceEvent::reduce_done: return "reduce_done";
    case TraceEvent::forward_begin: return "forward_begin";
    case TraceEvent::forward_end: return "forward_end";
    case TraceEvent::backward_begin: return "backward_begin";
    case TraceEvent::backward_end: return "backward_end";
    case TraceEvent::optimizer_step: return "optimizer_step";
  }
  return "?";
}

UnitTrace::UnitTrace(int rank) : rank_(rank), origin_(std::chrono::steady_clock::now()) {}

void UnitTrace::record(TraceEvent event, const std::string& unit) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_).count();
  events_.push_back({event, unit, int64_t(us), step_});
}

void UnitTrace::write_chrome_trace(const std::string& path) const {
  nlohmann::json out = nlohmann::json::array();
  // Spans: an issued event opens, the matching done event closes (per unit and kind, FIFO).
  std::map<std::pair<std::string, std::string>, std::vector<const Entry*>> open;
  auto lane = [](TraceEvent e) {
    switch (e) {
      case TraceEvent::gather_issued: case TraceEvent::gather_done: case TraceEvent::reshard: return 1;
      case TraceEvent::reduce_issued: case TraceEvent::reduce_done: return 2;
      default: return 0;
    }
  };
  for (size_t i = 0; i < events_.size(); ++i) {
    const Entry& e = events_[i];
    out.push_back({{"name", std::string(to_string(e.event)) + " " + e.unit}, {"ph", "i"}, {"s", "t"},
                   {"ts", e.ts_us}, {"pid", rank_}, {"tid", lane(e.event)},
                   {"args", {{"seq", i}, {"event", to_string(e.event)}, {"unit", e.unit}, {"step", e.step}}}});
    auto span = [&](const char* kind, bool begins) {
      auto& q = open[{kind, e.unit}];
      if (begins) {
        q.push_back(&e);
      } else if (!q.empty()) {
        const Entry* b = q.front();
        q.erase(q.begin());
        out.push_back({{"name", std::string(kind) + " " + e.unit}, {"ph", "X"}, {"ts", b->ts_us},
                       {"dur", e.ts_us - b->ts_us}, {"pid", rank_}, {"tid", lane(e.event)}});
      }
    };
    switch (e.event) {
      case TraceEvent::gather_issued: span("gather", true); break;
      case TraceEvent::gather_done: span("gather", false); break;
      case TraceEvent::reduce_issued: span("reduce", true); break;
      case TraceEvent::reduce_done: span("reduce", false); break;
      case TraceEvent::forward_begin: span("forward", true); break;
      case TraceEvent::forward_end: span("forward", false); break;
      case TraceEvent::backward_begin: span("backward", true); break;
      case TraceEvent::backward_end: span("backward", false); break;
      default: break;
    }
  }
  nlohmann::json doc = {{"traceEvents", out}, {"displayTimeUnit", "ms"},
                        {"otherData", {{"rank", rank_}, {"lanes", "0 compute, 1 gather/reshard, 2 reduce"}}}};
  try {
    files::write_file_replacing(path, doc.dump() + "\n");  // never through a link (safe_file.hpp)
  } catch (const RunError& e) {
    throw RunError(std::string("--trace: ") + e.what());
  }
}

}  // namespace accel::engine
