// `accel merge-weights CKPT -o FILE`: the full fp32 weights of a checkpoint of any layout, as
// safetensors under the model's parameter names (DeepSpeed's zero_to_fp32, docs/design/0006).
// Reading shards needs libtorch, so the launcher checks the arguments and hands the command to
// `accel-worker merge-weights` (cli/worker/cmd_merge_weights.cpp), which prints and exits for it.
#include "cli/commands.hpp"
#include "runtime/launch/worker_program.hpp"

namespace accel::cli {

void add_merge_weights_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, output, format = "safetensors", dtype = "fp32";
    int64_t max_shard_size = 5'000'000'000;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "merge-weights",
      "Write a checkpoint's full fp32 weights (any backend, any world size) as one safetensors file\n"
      "under the model's parameter names: the format of weights.safetensors and training.init_from\n\n"
      "Examples:\n"
      "  accel merge-weights runs/job/checkpoints -o weights.safetensors               # the `latest` one\n"
      "  accel merge-weights runs/job/checkpoints/step_00000200 -o step200.safetensors\n"
      "  accel merge-weights runs/job --format hf --dtype bf16 -o runs/job/hf      # a Hugging Face folder");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A step_N checkpoint directory, a checkpoints root (or its `latest` file), or an output_dir")
      ->required();
  cmd->add_option("-o,--output", o->output,
                  "The safetensors file (format safetensors) or folder (format hf) to write, replaced atomically")
      ->required();
  cmd->add_option("--format", o->format,
                  "safetensors: one file under accel's names; hf: a Hugging Face folder transformers loads "
                  "(config.json from the checkpoint's model record, shards, index)")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "The stored dtype")->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->capture_default_str();
  cmd->add_option("--max-shard-size", o->max_shard_size, "Format hf: the largest shard in bytes")
      ->check(CLI::Range(int64_t(1), INT64_MAX))
      ->capture_default_str();
  cmd->callback([o] {
    launch::exec_worker_program({"merge-weights", o->checkpoint, "--output", o->output, "--format", o->format, "--dtype",
                                 o->dtype, "--max-shard-size", std::to_string(o->max_shard_size)});
  });
}

}  // namespace accel::cli
