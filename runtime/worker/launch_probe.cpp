#include "runtime/worker/launch_probe.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/common/sealed_value.hpp"

namespace accel::worker {

void report_launch_probe(WorkerContext& ctx, int64_t launch_start_ns, const std::string& json_path) {
  int64_t ready = realtime_ns();
  auto& store = *ctx.rendezvous->store();
  auto key_of = [&](int r) { return ctx.rendezvous->prefix() + "ready/" + std::to_string(r); };
  // Sealed: the store takes writes from anyone who reaches it (SECURITY.md).
  std::string text = secret::seal(key_of(ctx.world.rank), std::to_string(ready));
  store.set(key_of(ctx.world.rank), std::vector<uint8_t>(text.begin(), text.end()));
  if (ctx.world.rank != 0) return;
  std::vector<double> delays_ms;
  for (int r = 0; r < ctx.world.world_size; ++r) {
    auto bytes = store.get(key_of(r));
    delays_ms.push_back((std::stoll(secret::unseal(key_of(r), std::string(bytes.begin(), bytes.end()))) -
                         launch_start_ns) / 1e6);
  }
  double slowest = *std::max_element(delays_ms.begin(), delays_ms.end());
  double fastest = *std::min_element(delays_ms.begin(), delays_ms.end());
  std::printf("accel bench launch: %d workers ready to train (past rendezvous, communicator connected) "
              "%.1f ms after the launcher started (first ready at %.1f ms)\n",
              ctx.world.world_size, slowest, fastest);
  if (json_path.empty()) return;
  std::filesystem::path p(json_path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(json_path) << nlohmann::json{{"world_size", ctx.world.world_size}, {"slowest_ready_ms", slowest},
                                             {"fastest_ready_ms", fastest}, {"per_rank_ready_ms", delays_ms}}
                                  .dump(2)
                           << "\n";
}

}  // namespace accel::worker
