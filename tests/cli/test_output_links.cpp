// A symbolic link planted in output_dir at a name accel writes (another user's trap on a shared
// cluster: the link points at a file of the user who launches) is never followed: the launch
// exits 2 naming the link and saying so, and the file it points at is unchanged. One case per
// name, through the real launcher and the built-in trainer (a one-step world-1 job).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "support/accel_cli.hpp"
#include "support/run_command.hpp"
#include "support/temp_dir.hpp"

using namespace accel::test;

namespace {


std::string accel_cmd(const std::string& args) {
  return accel_command(args, "OMP_WAIT_POLICY=PASSIVE");
}

// The smallest trainer job that writes every file of a run: a rank log, metrics.jsonl, the run
// report and the weights export.
std::string tiny_trainer_job(const TempDir& dir) {
  return dir.write("job.yaml",
                   "backend: ddp\nnum_processes: 1\ndevice: cpu\nmain_process_port: 0\n"
                   "model: {name: gpt, n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 64, block_size: 16}\n"
                   "data: {kind: synthetic, val_fraction: 0}\nscheduler: {warmup_steps: 0}\n"
                   "training:\n  max_steps: 1\n  micro_batch_size: 2\n  seq_len: 16\n  eval_every: 0\n"
                   "  checkpoint_at_end: false\n  save_weights: true\n  output_dir: " +
                       (dir.path() / "out").string() + "\n");
}

}  // namespace

TEST_CASE("a symbolic link planted in output_dir is never followed: exit 2 naming it, its target unchanged") {
  // Each name a launch writes: the launcher's rank log (truncated at start), the metrics (staged
  // beside, then renamed), the run report (written in place), the weights export (renamed), and the
  // launch lock (issue 48: opened O_RDWR|O_CREAT and truncated) and its directory.
  const std::string name = GENERATE(as<std::string>{}, "logs/rank_0.log", "metrics.jsonl", "metrics.jsonl.tmp",
                                    "report/rank_0.json", "weights.safetensors", ".accel-launch/rank0.lock",
                                    ".accel-launch");
  INFO(name);
  TempDir dir;
  const std::string job = tiny_trainer_job(dir);
  const std::string victim = dir.write("victim.txt", "another file of the user who launches\n");
  const std::filesystem::path link = dir.path() / "out" / name;
  std::filesystem::create_directories(link.parent_path());
  std::filesystem::create_symlink(victim, link);

  auto r = run_command(accel_cmd("launch " + shell_quote(job)));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains(link.string()) && Catch::Contains("symbolic link") &&
                           Catch::Contains("never follows") && Catch::Contains("fix: remove the link"));
  CHECK(read_file(victim) == "another file of the user who launches\n");
  CHECK(std::filesystem::is_symlink(link));  // refused, not replaced either
}
