#include "trainer/step_metrics.hpp"

#include <optional>

#include "api/progress_line.hpp"
#include "runtime/common/errors.hpp"

namespace accel::train {

nlohmann::json to_json(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"tokens", m.tokens},
                      {"tokens_per_s", m.tokens_per_s},
                      {"step_time_s", m.step_time_s},
                      {"peak_mem_bytes", m.peak_mem_bytes},
                      {"comm_bytes", m.comm_bytes}};
  if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
  if (m.loss_scale) {
    j["loss_scale"] = *m.loss_scale;
    j["skipped"] = m.skipped;
  }
  return j;
}

std::vector<std::pair<std::string, double>> tracker_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> v = {{"train/loss", m.loss},
                                                   {"train/lr", m.lr},
                                                   {"train/grad_norm", m.grad_norm}};
  if (m.loss_scale) v.emplace_back("train/loss_scale", *m.loss_scale);
  if (m.eval_loss) v.emplace_back("eval/loss", *m.eval_loss);
  v.emplace_back("perf/tokens_per_s", m.tokens_per_s);
  v.emplace_back("perf/step_time_s", m.step_time_s);
  v.emplace_back("perf/peak_mem_bytes", double(m.peak_mem_bytes));
  v.emplace_back("perf/comm_bytes", m.comm_bytes);
  return v;
}

namespace {

// A line of an existing file: a record's step index, or the trainer's rule for anything else.
std::optional<int64_t> record_step(const std::string& path, const std::string& line, int lineno, bool last) {
  if (line.empty()) return std::nullopt;
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_integer()) {
    // A crash can cut the last line short; anything else is someone else's file.
    if (last) return std::nullopt;
    throw RunError(path + ":" + std::to_string(lineno) + ": not a metrics record; move the file away to resume");
  }
  return j["step"].get<int64_t>();
}

}  // namespace

MetricsFile::MetricsFile(std::string path, int64_t keep_before)
    : log_(path, keep_before, api::ResumeKeeps::steps_before,
           [path](const std::string& line, int lineno, bool last) { return record_step(path, line, lineno, last); }) {}

void MetricsFile::append(const StepMetrics& m) { log_.append(to_json(m).dump()); }

std::string format_step_line(const StepMetrics& m, int64_t total_steps, bool progress_bar) {
  api::StepProgress p;
  p.done = m.step + 1;
  p.total = total_steps;
  p.loss = m.loss;
  p.lr = m.lr;
  p.grad_norm = m.grad_norm;
  p.tokens_per_s = m.tokens_per_s;
  p.step_time_s = m.step_time_s;
  p.peak_mem_bytes = m.peak_mem_bytes;
  p.eval_loss = m.eval_loss;
  p.loss_scale = m.loss_scale;
  p.skipped = m.skipped;
  return api::format_progress_line(p, progress_bar);
}

}  // namespace accel::train
