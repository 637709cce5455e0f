// `accel estimate-memory [JOB]`: per-rank memory of the model states under every strategy, side by
// side, with the job's own marked (runtime/estimate). Reads the job only; starts nothing.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/estimate/memory_report.hpp"

namespace accel::cli {
namespace {

// A parameter count as a whole number, written plainly or in scientific notation ("7e9", "1.3e9").
int64_t parse_count(const std::string& flag, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return UsageError(flag + " " + text + ": " + why + "; give a positive whole number such as 124000000 or 7e9");
  };
  if (text.empty()) throw bad("empty");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad("not a number");
  }
  if (used != text.size() || !std::isfinite(value)) throw bad("not a number");
  if (value <= 0) throw bad("must be positive");
  if (value > 1e15) throw bad("more than this estimator handles (at most 1e15)");
  if (value != std::floor(value)) throw bad("not a whole number");
  bool digits_only = std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
  return digits_only ? std::stoll(text) : int64_t(value);  // plain digits stay exact beyond 2^53
}

}  // namespace

void add_estimate_memory_command(CLI::App& app) {
  struct Options {
    std::string file, json, params, unit_params;
    std::vector<std::string> overrides;
    int world = 0;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "estimate-memory",
      "Per-rank memory of parameters, gradients and optimizer states under every strategy (ddp, ZeRO 0-3, FSDP), "
      "as accel's engine lays them out, next to the ZeRO paper's figure; the job's own strategy is marked\n\n"
      "Examples:\n"
      "  accel estimate-memory config_templates/deepspeed_zero3.yaml\n"
      "  accel estimate-memory job.yaml --set model.n_layer=24 --set model.n_embd=1024 --world 8\n"
      "  accel estimate-memory --params 7e9 --world 8 --set mixed_precision=bf16\n"
      "  accel estimate-memory job.yaml --json memory.json");
  cmd->add_option("job", o->file, "Job file (default: the default job, else the defaults)");
  add_set_option(cmd, o->overrides);
  cmd->add_option("--params", o->params, "Estimate for a bare parameter count (e.g. 7e9) instead of the job's model");
  cmd->add_option("--unit-params", o->unit_params,
                  "With --params: the largest unit's parameter count, so live-unit buffers are estimated");
  auto* world = cmd->add_option("--world", o->world, "World size (default: the job's num_processes)");
  cmd->add_option("--json", o->json, "Also write the figures as JSON (exact bytes) to this file");
  cmd->callback([o, world] {
    estimate::JobEstimateOptions options;
    if (!o->params.empty()) options.params = parse_count("--params", o->params);
    if (!o->unit_params.empty()) options.unit_params = parse_count("--unit-params", o->unit_params);
    if (world->count() > 0 && o->world < 1)
      throw UsageError("--world " + std::to_string(o->world) + ": the world size must be at least 1");
    options.world = o->world;
    auto loaded = load_job_for_cli(o->file, o->overrides, /*allow_none=*/true, /*check_paths=*/false);
    auto estimate = estimate::estimate_job(loaded.job, options);
    std::cout << estimate::render_memory_table(estimate);
    if (!o->json.empty()) {
      std::ofstream out(o->json);
      out << estimate::memory_estimate_json(estimate).dump(2) << "\n";
      if (!out) throw RunError("cannot write " + o->json);
      std::cerr << "wrote " << o->json << "\n";
    }
  });
}

}  // namespace accel::cli
