#include "trainer/run_report.hpp"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "trainer/memory_probe.hpp"

namespace accel::train {

double StepCommCounter::add(const std::string& name, int size, const comm::CommStats& before,
                            const comm::CommStats& after) {
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.name == name; });
  if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{name, size, {}});
  comm::CommStats issued;
  for (size_t k = 0; k < it->total.per_kind.size(); ++k) {
    issued.per_kind[k].calls = after.per_kind[k].calls - before.per_kind[k].calls;
    issued.per_kind[k].payload_bytes = after.per_kind[k].payload_bytes - before.per_kind[k].payload_bytes;
    it->total.per_kind[k].calls += issued.per_kind[k].calls;
    it->total.per_kind[k].payload_bytes += issued.per_kind[k].payload_bytes;
  }
  return issued.total_bus_bytes(size);
}

nlohmann::json make_run_report(int rank, int world, const std::string& backend, const nlohmann::json& memory,
                               const StepCommCounter& comm, int64_t steps, int64_t peak_rss_bytes) {
  nlohmann::json per_kind = nlohmann::json::object();
  nlohmann::json by_group = nlohmann::json::object();
  const double n = steps > 0 ? double(steps) : 1.0;
  double bus_total = 0;
  for (size_t k = 0; k < size_t(comm::CollectiveKind::Count); ++k) {
    auto kind = comm::CollectiveKind(k);
    double calls = 0, payload = 0, bus = 0;
    for (const auto& g : comm.groups()) {
      calls += double(g.total.of(kind).calls);
      payload += double(g.total.of(kind).payload_bytes);
      bus += g.total.bus_bytes(kind, g.size);
    }
    if (calls == 0) continue;
    per_kind[comm::to_string(kind)] = {{"calls", calls / n}, {"payload_bytes", payload / n}, {"bus_bytes", bus / n}};
  }
  for (const auto& g : comm.groups()) {
    by_group[g.name] = {{"size", g.size}, {"bus_bytes", g.total.total_bus_bytes(g.size) / n}};
    bus_total += g.total.total_bus_bytes(g.size);
  }
  return {{"rank", rank},
          {"world_size", world},
          {"backend", backend},
          {"memory", memory},
          {"comm_per_step", {{"steps", steps}, {"bus_bytes", bus_total / n}, {"by_kind", per_kind}, {"by_group", by_group}}},
          {"peak_rss_bytes", peak_rss_bytes},
          {"rss_bytes_at_end", resident_bytes_now()}};
}

int64_t resident_bytes_now() {
  malloc_trim(0);
  return probe_memory().rss_bytes;
}

void write_run_report(const std::string& output_dir, int rank, const nlohmann::json& report) {
  std::filesystem::path dir = std::filesystem::path(output_dir) / "report";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = (dir / ("rank_" + std::to_string(rank) + ".json")).string();
  if (ec) throw RunError("cannot write the run report " + path + ": cannot create " + dir.string() + ": " + ec.message());
  files::write_file_replacing(path, report.dump(2) + "\n");  // never through a link (safe_file.hpp)
}

double RunTimes::other_s() const {
  return std::max(0.0, total_s - setup_s - training_s - evaluation_s - checkpoint_s - export_s);
}

nlohmann::json RunTimes::to_json() const {
  return {{"setup", setup_s},          {"training", training_s}, {"evaluation", evaluation_s},
          {"checkpoint", checkpoint_s}, {"export", export_s},     {"other", other_s()},
          {"total", total_s}};
}

std::string RunTimes::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "time: setup %.1f s, training %.1f s, evaluation %.1f s, checkpoints %.1f s, export %.1f s, other %.1f s "
                "(of %.1f s)",
                setup_s, training_s, evaluation_s, checkpoint_s, export_s, other_s(), total_s);
  return buf;
}

}  // namespace accel::train
