// `accel test [JOB]`: launches the job's world and checks every collective (like `accelerate test`).
#include "cli/commands.hpp"
#include "cli/launch_support.hpp"
#include "runtime/launch/gpu_probe.hpp"

namespace accel::cli {

void add_test_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("test", "Launch the job's world and check every collective against closed-form "
                                         "values\n\nExamples:\n  accel test config_templates/quickstart.yaml\n"
                                         "  accel test --set num_processes=4\n"
                                         "  accel test config_templates/fsdp_hybrid_shard.yaml --set machine_rank=1");
  cmd->add_option("job", o->file, "Job file (default: the default job, else 1 process with defaults)");
  add_set_option(cmd, o->overrides);
  cmd->callback([o] {
    auto loaded = load_job_for_cli(o->file, o->overrides, /*allow_none=*/true, /*check_paths=*/true,
                                   launch::visible_cuda_gpus());
    launch_worker_task(loaded, "comm-test");
  });
}

}  // namespace accel::cli
