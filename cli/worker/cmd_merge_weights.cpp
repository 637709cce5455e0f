// `accel merge-weights CKPT -o FILE`: the full fp32 weights of a checkpoint of any layout, as
// safetensors under the model's parameter names (DeepSpeed's zero_to_fp32, docs/design/0006).
// One process, no launcher: `accel merge-weights` (cli/cmd_merge_weights.cpp) checks the arguments
// and runs this in accel-worker, which links libtorch. The checkpoint is verified against its manifest first; anything
// wrong with it (missing, incomplete, damaged, unreadable layout) is exit 2, naming the file; a
// failure to write FILE is exit 1.
// Memory: reads one parameter at a time (ranged reads from the shard files) and holds the output
// weights, never the optimizer state.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/worker/worker_commands.hpp"
#include "engine/format/canonical_state.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/node_local.hpp"
#include "runtime/common/errors.hpp"

namespace accel::cli::worker_program {
namespace {

namespace fs = std::filesystem;

// A step_N directory as given; a checkpoints root, its `latest` file, or an output_dir (holding
// checkpoints/latest): the checkpoint `latest` names.
std::string resolve_checkpoint(const std::string& arg) {
  fs::path p(arg);
  std::error_code ec;
  if (!fs::exists(p, ec)) throw checkpoint::CheckpointError("checkpoint " + arg + " does not exist");
  if (fs::is_regular_file(p, ec) && p.filename() == checkpoint::kLatestName) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    throw checkpoint::CheckpointError(arg + " is not a checkpoint directory, a checkpoints root or its `latest` file");
  if (fs::exists(p / checkpoint::kManifestName, ec)) return p.string();
  for (const fs::path& root : {p, p / "checkpoints"})
    if (fs::exists(root / checkpoint::kLatestName, ec)) {
      auto dir = checkpoint::find_latest_checkpoint(root.string());
      if (dir) return *dir;
    }
  return p.string();  // verification reports what is missing
}

struct Source {
  std::string dir;
  int64_t step = 0;
  std::unique_ptr<engine::CanonicalState> state;
};

Source open_checkpoint(const std::string& arg) {
  Source s;
  s.dir = resolve_checkpoint(arg);
  const checkpoint::Manifest manifest = checkpoint::verify_checkpoint(s.dir);
  s.step = manifest.step;
  const std::string trainer = s.dir + "/trainer.json";
  std::ifstream in(trainer);
  auto state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!in || state.is_discarded() || !state.is_object() || !state.contains("backend_state"))
    throw checkpoint::CheckpointError(trainer + " is missing or has no backend_state (not a checkpoint of accel's trainer?)");
  try {
    s.state = engine::CanonicalState::open(s.dir, state["backend_state"]);
  } catch (const RunError& e) {  // node-local storage: name the machines holding what is absent
    const std::string note = checkpoint::elsewhere_note(manifest, s.dir);
    if (note.empty()) throw;
    throw checkpoint::CheckpointError(std::string(e.what()) + "\n" + note);
  }
  return s;
}

}  // namespace

void add_merge_weights_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, output;
  };
  auto o = std::make_shared<Options>();
  // Hidden: users run `accel merge-weights`, which validated these arguments and describes them.
  auto* cmd = app.add_subcommand("merge-weights", "");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A step_N checkpoint directory, a checkpoints root (or its `latest` file), or an output_dir")
      ->required();
  cmd->add_option("-o,--output", o->output, "The safetensors file to write (replaced atomically)")->required();
  cmd->callback([o] {
    Source source;
    engine::NamedTensors weights;
    int64_t values = 0;
    try {
      source = open_checkpoint(o->checkpoint);
      for (const auto& p : source.state->params()) {
        weights.emplace_back(p.name, source.state->read_full(p.name, engine::kParamKind));
        values += p.numel;
      }
    } catch (const RunError& e) {  // the checkpoint is the problem: a usage error, not a failed run
      throw UsageError(std::string(e.what()) + "\nnothing was written; name a complete checkpoint");
    }
    fs::path parent = fs::absolute(o->output).parent_path();
    if (!fs::is_directory(parent)) throw UsageError("-o " + o->output + ": directory " + parent.string() + " does not exist");
    engine::save_safetensors(o->output, weights);
    std::cout << "accel merge-weights: " << source.dir << " (" << source.step << " steps, "
              << source.state->describe() << ") -> " << o->output << ": " << weights.size() << " tensors, " << values
              << " fp32 values\n";
  });
}

}  // namespace accel::cli::worker_program
