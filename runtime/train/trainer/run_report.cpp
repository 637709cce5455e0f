#include "runtime/train/trainer/run_report.hpp"

#include <malloc.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/common/errors.hpp"

namespace accel::train {

void StepCommCounter::add(const comm::CommStats& before, const comm::CommStats& after) {
  for (size_t k = 0; k < total_.per_kind.size(); ++k) {
    total_.per_kind[k].calls += after.per_kind[k].calls - before.per_kind[k].calls;
    total_.per_kind[k].payload_bytes += after.per_kind[k].payload_bytes - before.per_kind[k].payload_bytes;
  }
}

nlohmann::json make_run_report(int rank, int world, const std::string& backend, const nlohmann::json& memory,
                               const StepCommCounter& comm, int64_t steps, int64_t peak_rss_bytes) {
  nlohmann::json per_kind = nlohmann::json::object();
  const double n = steps > 0 ? double(steps) : 1.0;
  for (size_t k = 0; k < size_t(comm::CollectiveKind::Count); ++k) {
    auto kind = comm::CollectiveKind(k);
    const auto& c = comm.total().of(kind);
    if (c.calls == 0) continue;
    per_kind[comm::to_string(kind)] = {{"calls", double(c.calls) / n},
                                       {"payload_bytes", double(c.payload_bytes) / n},
                                       {"bus_bytes", comm.total().bus_bytes(kind, world) / n}};
  }
  return {{"rank", rank},
          {"world_size", world},
          {"backend", backend},
          {"memory", memory},
          {"comm_per_step", {{"steps", steps}, {"bus_bytes", comm.total().total_bus_bytes(world) / n}, {"by_kind", per_kind}}},
          {"peak_rss_bytes", peak_rss_bytes},
          {"rss_bytes_at_end", resident_bytes_now()}};
}

int64_t resident_bytes_now() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * int64_t(sysconf(_SC_PAGESIZE));
}

void write_run_report(const std::string& output_dir, int rank, const nlohmann::json& report) {
  std::filesystem::path dir = std::filesystem::path(output_dir) / "report";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string path = (dir / ("rank_" + std::to_string(rank) + ".json")).string();
  std::ofstream f(path);
  f << report.dump(2) << '\n';
  if (ec || !f) throw RunError("cannot write the run report " + path);
}

}  // namespace accel::train
