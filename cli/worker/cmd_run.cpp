// `accel-worker run`: one rank, as the launcher starts it. It joins the world and
// runs the task named by ACCEL_WORKER_TASK: train (`accel launch`, the built-in trainer), comm-test
// (`accel test`), comm-bench (`accel bench comm`), launch-probe (`accel bench launch`).
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli/worker/worker_commands.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/worker/comm_bench.hpp"
#include "runtime/worker/comm_selftest.hpp"
#include "trainer/trainer.hpp"
#include "runtime/worker/launch_probe.hpp"

namespace accel::cli::worker_program {
namespace {

worker::CommBenchOptions bench_options() {
  worker::CommBenchOptions o;
  const char* text = std::getenv("ACCEL_WORKER_OPTIONS");
  if (!text || !*text) return o;
  auto json = nlohmann::json::parse(text);
  o.min_bytes = json.value("min_bytes", o.min_bytes);
  o.max_bytes = json.value("max_bytes", o.max_bytes);
  o.iters = json.value("iters", o.iters);
  o.warmup = json.value("warmup", o.warmup);
  o.json_path = json.value("json", o.json_path);
  return o;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "One rank of a job, as accel launch / test / bench start it");
  cmd->callback([] {
    const char* task_env = std::getenv("ACCEL_WORKER_TASK");
    std::string task = task_env ? task_env : "";
    if (task != "train" && task != "comm-test" && task != "comm-bench" && task != "launch-probe")
      throw RunError("accel-worker run: unknown ACCEL_WORKER_TASK '" + task +
                     "' (train | comm-test | comm-bench | launch-probe)");
    auto ctx = worker::start_worker();
    if (task == "train") {
      train::TrainerOptions options;
      const char* text = std::getenv("ACCEL_WORKER_OPTIONS");
      if (text && *text) {
        auto json = nlohmann::json::parse(text);
        options.progress_bar = json.value("progress", false);
        options.trace_path = json.value("trace", "");
        options.profile.dir = json.value("profile", "");
        options.profile.first = json.value("profile_first", int64_t(0));
        options.profile.last = json.value("profile_last", int64_t(0));
      }
      train::run_training(ctx, options);
      ctx.rendezvous->finish();
    } else if (task == "launch-probe") {
      const char* text = std::getenv("ACCEL_WORKER_OPTIONS");
      if (!text || !*text) throw RunError("accel-worker run: launch-probe needs ACCEL_WORKER_OPTIONS (set by accel bench launch)");
      auto options = nlohmann::json::parse(text);
      worker::report_launch_probe(ctx, options.at("launch_start_ns").get<int64_t>(), options.value("json", ""));
      ctx.rendezvous->finish();
    } else if (task == "comm-test") {
      bool ok = worker::run_comm_selftest(ctx);
      ctx.rendezvous->finish();
      if (!ok) throw RunError("collective checks failed (table above)");
    } else {
      worker::run_comm_bench(ctx, bench_options());
      ctx.rendezvous->finish();
    }
  });
}

}  // namespace accel::cli::worker_program
