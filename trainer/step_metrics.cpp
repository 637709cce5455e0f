#include "trainer/step_metrics.hpp"

#include <cstdio>
#include <optional>
#include <sstream>

#include "runtime/common/errors.hpp"
#include "runtime/common/human_bytes.hpp"

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

static std::string human_rate(double per_s) {
  char buf[32];
  if (per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  else if (per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", per_s);
  return buf;
}

std::string format_step_line(const StepMetrics& m, int64_t total_steps, bool progress_bar) {
  std::ostringstream s;
  int64_t done = m.step + 1;
  if (progress_bar) {
    constexpr int kWidth = 20;
    int filled = total_steps > 0 ? int(kWidth * done / total_steps) : kWidth;
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3lld%% ", static_cast<long long>(total_steps > 0 ? 100 * done / total_steps : 100));
    s << "[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] " << pct;
  }
  int width = int(std::to_string(total_steps).size());
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %*lld/%lld | loss %.4f | lr %.2e | grad_norm %.3f | %s tok/s | %.1f ms | peak %s",
                width, static_cast<long long>(done), static_cast<long long>(total_steps), m.loss, m.lr, m.grad_norm,
                human_rate(m.tokens_per_s).c_str(), m.step_time_s * 1e3, human_bytes(m.peak_mem_bytes).c_str());
  s << buf;
  if (m.eval_loss) {
    std::snprintf(buf, sizeof buf, " | eval_loss %.4f", *m.eval_loss);
    s << buf;
  }
  if (m.loss_scale) {
    std::snprintf(buf, sizeof buf, " | loss_scale %g%s", *m.loss_scale, m.skipped ? ", skipped: overflow" : "");
    s << buf;
  }
  return s.str();
}

}  // namespace accel::train
