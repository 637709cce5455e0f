// `accel merge-weights CKPT -o FILE`: the full fp32 weights of a checkpoint of any layout, as
// safetensors under the model's parameter names (DeepSpeed's zero_to_fp32, docs/design/0006).
// One process, no launcher: `accel merge-weights` (cli/cmd_merge_weights.cpp) checks the arguments
// and runs this in accel-worker, which links libtorch. The checkpoint is verified against its manifest first; anything
// wrong with it (missing, incomplete, damaged, unreadable layout) is exit 2, naming the file; a
// failure to write FILE is exit 1.
// --format hf writes a Hugging Face folder (config.json from trainer.json's model record).
// Memory: one parameter at a time, read (ranged reads from the shard files), written to its place
// in the output and freed (engine/format/weights_export.hpp); never the optimizer state.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/worker/worker_commands.hpp"
#include "engine/format/canonical_state.hpp"
#include "engine/format/safetensors.hpp"
#include "engine/format/weights_export.hpp"
#include "runtime/config/enums.hpp"
#include "runtime/config/model_record.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/checkpoint/node_local.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/progress.hpp"

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

// The model section a checkpoint's trainer.json records (trainer_record.cpp), for config.json.
config::ModelSection model_from_record(const std::string& dir, const nlohmann::json& record) {
  const std::string where = dir + "/trainer.json";
  if (!record.is_object() || !record.contains("model") || !record["model"].is_object())
    throw UsageError(where + " records no model section: --format hf needs one (a checkpoint of accel's trainer)");
  // Every model key the record holds (older records: name and the five gpt sizes); the rest keep
  // their defaults. n_layer .. block_size are required: without them no model has a shape.
  const nlohmann::json& m = record["model"];
  for (const char* key : {"name", "n_layer", "n_head", "n_embd", "vocab_size", "block_size"})
    if (!m.contains(key)) throw UsageError(where + ": model." + key + " is missing");
  return config::model_section_from_json(m, where);
}

}  // namespace

void add_merge_weights_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, output, format = "safetensors", dtype = "fp32";
    int64_t max_shard_size = 5'000'000'000;
  };
  auto o = std::make_shared<Options>();
  // Hidden: users run `accel merge-weights`, which validated these arguments and describes them.
  auto* cmd = app.add_subcommand("merge-weights", "");
  cmd->add_option("checkpoint", o->checkpoint,
                  "A step_N checkpoint directory, a checkpoints root (or its `latest` file), or an output_dir")
      ->required();
  cmd->add_option("-o,--output", o->output, "The file or folder to write")->required();
  cmd->add_option("--format", o->format, "safetensors | hf");
  cmd->add_option("--dtype", o->dtype, "fp32 | bf16 | fp16");
  cmd->add_option("--max-shard-size", o->max_shard_size, "bytes");
  cmd->callback([o] {
    Source source;
    engine::ExportOptions options;
    options.format = *config::enum_from_string<config::ExportFormat>(o->format);
    options.dtype = *config::enum_from_string<config::ExportDtype>(o->dtype);
    options.max_shard_size = o->max_shard_size;
    config::ModelSection model;
    int64_t values = 0;
    progress::Output output = progress::Output::standard();
    output.line = [](const std::string& line) { std::cout << "accel merge-weights: " << line << "\n" << std::flush; };
    progress::Task task("merging " + o->checkpoint + " into " + o->output, true, progress::display_from_env(), output);
    try {
      task.set_stage("verifying the checkpoint");
      source = open_checkpoint(o->checkpoint);
      if (options.format == config::ExportFormat::hf) {
        std::ifstream in(source.dir + "/trainer.json");
        model = model_from_record(source.dir, nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
      }
    } catch (const RunError& e) {  // the checkpoint is the problem: a usage error, not a failed run
      throw UsageError(std::string(e.what()) + "\nnothing was written; name a complete checkpoint");
    }
    fs::path parent = fs::absolute(o->output).parent_path();
    if (!fs::is_directory(parent)) throw UsageError("-o " + o->output + ": directory " + parent.string() + " does not exist");
    std::vector<engine::TensorSpec> specs;
    uint64_t bytes = 0;
    for (const auto& p : source.state->params()) {
      specs.push_back({p.name, at::kFloat, p.shape});
      bytes += uint64_t(p.numel) * c10::elementSize(engine::export_scalar_type(options.dtype));
    }
    // Streamed: one parameter read from the shard files, written to its place, and freed at a time.
    engine::WeightsExport out(o->output, specs, &model, options);
    task.set_stage("reading and writing");
    task.set_total(int64_t(specs.size()), "tensors");
    progress::expect_bytes(bytes);
    for (const auto& p : source.state->params()) {
      try {
        out.write(p.name, source.state->read_full(p.name, engine::kParamKind));
      } catch (const RunError& e) {
        throw UsageError(std::string(e.what()) + "\nnothing was written; name a complete checkpoint");
      }
      values += p.numel;
      task.advance();
    }
    out.commit();
    task.finish();
    std::cout << "accel merge-weights: " << source.dir << " (" << source.step << " steps, "
              << source.state->describe() << ") -> " << o->output << ": " << specs.size() << " tensors, " << values
              << " " << o->dtype << " values" << (options.format == config::ExportFormat::hf ? " (Hugging Face folder, "
              + std::to_string(out.files()) + " shard file(s))" : "") << "\n";
  });
}

}  // namespace accel::cli::worker_program
