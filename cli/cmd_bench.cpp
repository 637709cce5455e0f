// `accel bench comm [JOB]`: collective bandwidth on the job's world (nccl-tests style table + JSON).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/launch_support.hpp"
#include "runtime/launch/gpu_probe.hpp"
#include "runtime/common/wall_clock.hpp"

namespace accel::cli {

void add_bench_command(CLI::App& app) {
  struct Options {
    std::string file, json;
    std::vector<std::string> overrides;
    int64_t min_bytes = 1024, max_bytes = 16 << 20;
    int iters = 10;
  };
  auto o = std::make_shared<Options>();
  auto* bench = app.add_subcommand("bench", "Benchmarks (they print figures and write JSON; they assert nothing)\n\n"
                                            "Examples:\n  accel bench comm --set num_processes=4");
  bench->require_subcommand(1);
  auto* comm = bench->add_subcommand("comm", "Time every collective over a range of sizes (size, time, algbw, busbw)\n\n"
                                             "Examples:\n  accel bench comm config_templates/ddp.yaml\n"
                                             "  accel bench comm --set num_processes=2 --max-bytes 4194304 --json out.json");
  comm->add_option("job", o->file, "Job file (default: the default job, else 1 process with defaults)");
  add_set_option(comm, o->overrides);
  comm->add_option("--min-bytes", o->min_bytes, "Smallest buffer")->capture_default_str()->check(CLI::PositiveNumber);
  comm->add_option("--max-bytes", o->max_bytes, "Largest buffer")->capture_default_str()->check(CLI::PositiveNumber);
  comm->add_option("--iters", o->iters, "Timed iterations per size")->capture_default_str()->check(CLI::PositiveNumber);
  comm->add_option("--json", o->json, "Where to write the results (default: <output_dir>/bench_comm.json)");
  auto* launch = bench->add_subcommand("launch", "Time from the launcher's start until every worker is ready to train "
                                                 "(past rendezvous, communicator connected)\n\n"
                                                 "Examples:\n  accel bench launch --set num_processes=4");
  launch->add_option("job", o->file, "Job file (default: the default job, else 1 process with defaults)");
  add_set_option(launch, o->overrides);
  launch->add_option("--json", o->json, "Where to write the result");
  launch->callback([o] {
    int64_t start = realtime_ns();  // taken before the job is even read: the user-visible start
    auto loaded = load_job_for_cli(o->file, o->overrides, /*allow_none=*/true, /*check_paths=*/true,
                                   launch::visible_cuda_gpus());
    nlohmann::json options = {{"launch_start_ns", start}};
    if (!o->json.empty()) options["json"] = std::filesystem::absolute(o->json).string();
    launch_worker_task(loaded, "launch-probe", options.dump());
  });

  comm->callback([o] {
    auto loaded = load_job_for_cli(o->file, o->overrides, /*allow_none=*/true, /*check_paths=*/true,
                                   launch::visible_cuda_gpus());
    nlohmann::json options = {{"min_bytes", o->min_bytes}, {"max_bytes", o->max_bytes}, {"iters", o->iters}};
    if (!o->json.empty()) options["json"] = std::filesystem::absolute(o->json).string();
    launch_worker_task(loaded, "comm-bench", options.dump());
  });
}

}  // namespace accel::cli
