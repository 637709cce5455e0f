#include "runtime/worker/comm_bench.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "runtime/comm/gloo_communicator.hpp"
#include "runtime/comm/shard_layout.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::worker {
namespace {

using comm::CollectiveKind;

// Runs one collective of a full buffer of `numel` float32 elements.
void run_op(comm::Communicator& c, CollectiveKind kind, at::Tensor& full, at::Tensor& shard) {
  switch (kind) {
    case CollectiveKind::AllReduce: c.all_reduce(full, comm::ReduceOp::Sum)->wait(); break;
    case CollectiveKind::ReduceScatter: c.reduce_scatter(full, shard, comm::ReduceOp::Sum)->wait(); break;
    case CollectiveKind::AllGather: c.all_gather(shard, full)->wait(); break;
    case CollectiveKind::Broadcast: c.broadcast(full, 0)->wait(); break;
    default: c.barrier()->wait(); break;
  }
}

}  // namespace

void run_comm_bench(WorkerContext& ctx, const CommBenchOptions& o) {
  auto& c = *ctx.communicator;
  int world = c.size();
  nlohmann::json results = nlohmann::json::array();
  bool report = c.rank() == 0;
  if (report) {
    std::printf("accel bench comm: %d rank(s), communicator %s, float32, %d iterations (+%d warm-up) per size\n",
                world, comm::transport_of(c).c_str(), o.iters, o.warmup);
    std::printf("times are the slowest rank's mean per op; busbw = algbw x bus factor (nccl-tests convention)\n");
  }
  for (auto kind : {CollectiveKind::AllReduce, CollectiveKind::ReduceScatter, CollectiveKind::AllGather,
                    CollectiveKind::Broadcast}) {
    if (report) {
      std::printf("\n%s (bus factor %.3f)\n", comm::to_string(kind), comm::bus_factor(kind, world));
      std::printf("%12s %12s %12s %12s %12s\n", "size (B)", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)");
    }
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
      int64_t numel = std::max<int64_t>(1, bytes / 4);
      const auto on_device = at::TensorOptions().dtype(at::kFloat).device(c.device());
      auto full = at::ones({numel}, on_device);
      auto shard = at::ones({comm::shard_range(numel, world, c.rank()).size()}, on_device);
      for (int i = 0; i < o.warmup; ++i) run_op(c, kind, full, shard);
      c.barrier()->wait();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) run_op(c, kind, full, shard);
      // GPU ops only queue on the host: the barrier blocks until they ran (adding its own latency,
      // spread over the iterations).
      if (!c.device().is_cpu()) c.barrier()->wait();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / o.iters;
      auto slowest = at::full({1}, us, at::TensorOptions().dtype(at::kDouble).device(c.device()));
      c.all_reduce(slowest, comm::ReduceOp::Max)->wait();
      us = slowest.cpu().item<double>();
      double size = double(numel) * 4, algbw = size / (us * 1e-6) / 1e9, busbw = algbw * comm::bus_factor(kind, world);
      if (report) std::printf("%12.0f %12lld %12.1f %12.3f %12.3f\n", size, (long long)numel, us, algbw, busbw);
      results.push_back({{"collective", comm::to_string(kind)}, {"size_bytes", size}, {"count", numel},
                         {"time_us", us}, {"algbw_gbps", algbw}, {"busbw_gbps", busbw}});
    }
  }
  if (!report) return;
  std::string path = o.json_path.empty() ? ctx.job.job.training.output_dir + "/bench_comm.json" : o.json_path;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  nlohmann::json doc = {{"world_size", world}, {"machines", ctx.job.job.num_machines},
                        {"communicator", c.backend_name()}, {"transport", comm::transport_of(c)},
                        {"dtype", "float32"}, {"iters", o.iters},
                        {"results", results}};
  files::write_file_replacing(path, doc.dump(2) + "\n");  // never through a link (safe_file.hpp)
  std::printf("\nwrote %s\n", path.c_str());
}

}  // namespace accel::worker
