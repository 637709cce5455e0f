// `accel merge-weights CKPT -o FILE`: the full fp32 weights of a checkpoint of any layout, as
// safetensors under the model's parameter names (DeepSpeed's zero_to_fp32, docs/design/0006).
// Reading shards needs libtorch, so the launcher checks the arguments and hands the command to
// `accel-worker merge-weights` (cli/worker/cmd_merge_weights.cpp), which prints and exits for it.
#include "cli/commands.hpp"
#include "runtime/launch/worker_program.hpp"

namespace accel::cli {

void add_merge_weights_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, output;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "merge-weights",
      "Write a checkpoint's full fp32 weights (any backend, any world size) as one safetensors file\n"
      "under the model's parameter names: the format of weights.safetensors and training.init_from\n\n"
      "Examples:\n"
      "  accel merge-weights runs/job/checkpoints -o weights.safetensors               # the `latest` one\n"
      "  accel merge-weights runs/job/checkpoints/step_00000200 -o step200.safetensors");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A step_N checkpoint directory, a checkpoints root (or its `latest` file), or an output_dir")
      ->required();
  cmd->add_option("-o,--output", o->output, "The safetensors file to write (replaced atomically)")->required();
  cmd->callback([o] { launch::exec_worker_program({"merge-weights", o->checkpoint, "--output", o->output}); });
}

}  // namespace accel::cli
