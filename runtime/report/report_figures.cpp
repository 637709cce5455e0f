// See report_figures.hpp.
#include "runtime/report/report_figures.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

namespace accel::report {
namespace {

std::string series_name(const RunData& run) { return run.label + (run.strategy.empty() ? "" : " (" + run.strategy + ")"); }

// A line chart of metrics.jsonl's `field` (times `scale`), one series per run that has it.
Figure curve(const std::vector<RunData>& runs, const std::string& id, const std::string& field, const std::string& title,
             const std::string& y_label, double scale, bool markers, const std::string& caption) {
  Figure f;
  f.id = id;
  f.title = title;
  f.caption = caption;
  LineChart chart;
  chart.id = id;
  chart.title = title;
  chart.x_label = "step";
  chart.y_label = y_label;
  for (size_t i = 0; i < runs.size(); ++i) {
    Series s;
    s.name = series_name(runs[i]);
    s.color = run_color(int(i));
    s.markers = markers;
    for (const auto& [x, y] : runs[i].series(field)) {
      if (!std::isfinite(y)) continue;
      s.x.push_back(x);
      s.y.push_back(y * scale);
    }
    if (s.x.empty()) {
      f.notes.push_back(runs[i].label + ": no " + field + " in metrics.jsonl");
      continue;
    }
    chart.series.push_back(std::move(s));
  }
  if (chart.series.empty()) return f;
  for (size_t a = 0; a < chart.series.size(); ++a)
    for (size_t b = a + 1; b < chart.series.size(); ++b)
      if (chart.series[a].x == chart.series[b].x && chart.series[a].y == chart.series[b].y)
        f.notes.push_back(chart.series[a].name + " and " + chart.series[b].name +
                          " are equal at every step: the later line is drawn over the earlier, thinner");
  chart.finish_axes();
  f.line = std::move(chart);
  return f;
}

// Scales a curve already built in bytes to a readable unit.
void to_byte_unit(Figure& f, const std::string& y_label_start) {
  if (!f.line) return;
  double top = 0;
  for (const auto& s : f.line->series)
    for (double v : s.y) top = std::max(top, v);
  const ByteUnit unit = byte_unit(top);
  for (auto& s : f.line->series)
    for (double& v : s.y) v /= unit.bytes;
  f.line->y_label = y_label_start + " (" + unit.name + ")";
  f.line->finish_axes();
}

double member(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// Model-state memory by category: the run report's measurement and the estimate's figure.
const std::vector<std::string> kMemoryCategories = {"parameters", "gradients", "master weights", "optimizer states",
                                                    "live buffers", "in nvme files"};

std::vector<double> measured_memory(const nlohmann::json& m) {
  return {member(m, "params") + member(m, "param_shards"),
          member(m, "grads") + member(m, "grad_shard"),
          member(m, "master"),
          member(m, "optimizer_states"),
          member(m, "live_params_peak") + member(m, "live_grads_peak") + member(m, "nvme_buffer_bytes"),
          member(m, "nvme_bytes")};
}

std::vector<double> estimated_memory(const estimate::MemoryEstimate& e) {
  const bool states_in_files = e.plan.offload == estimate::Placement::nvme;
  const bool shard_in_file = e.plan.param_offload == estimate::Placement::nvme;
  std::vector<double> v = {double(e.params) + (shard_in_file ? 0.0 : double(e.param_shard)),
                           double(e.grads + e.grad_shard),
                           states_in_files ? 0.0 : double(e.master),
                           states_in_files ? 0.0 : double(e.optimizer_states),
                           double(e.live_params + e.live_grads),
                           double(e.nvme)};
  // What the estimate holds in memory beside its components: the nvme staging buffers.
  double in_memory = 0;
  for (size_t k = 0; k + 1 < v.size(); ++k) in_memory += v[k];
  v[4] += std::max(0.0, double(e.device + e.host) - in_memory);
  return v;
}

// A group per run: a measured bar per rank, then the estimate (one per-rank figure for all ranks).
Figure memory_figure(const std::vector<RunData>& runs) {
  Figure f;
  f.id = "memory";
  f.title = "Model-state memory per rank, measured and estimated";
  f.caption = "Solid: what each rank's engine held (report/rank_<r>.json \"memory\"; live buffers at their peak). "
              "Pale: `accel estimate-memory` of the run's job.resolved.yaml, its own strategy's row. "
              "Activations, the allocator and the runtime are not model states (peak resident memory is in the "
              "table above).";
  BarChart chart;
  chart.id = f.id;
  chart.title = f.title;
  chart.categories = kMemoryCategories;
  chart.legend_note = "r<n>: rank n measured; pale: the estimate, per rank";
  double top = 0;
  std::vector<BarGroup> groups;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    if (run.rank_reports.empty()) {
      f.notes.push_back(run.label + ": no run report (report/rank_<r>.json)");
      continue;
    }
    if (!run.estimate) f.notes.push_back(run.label + ": measured only (no estimate: see the run's notes)");
    BarGroup g;
    g.label = run.label;
    g.color = run_color(int(i));
    for (const auto& report : run.rank_reports)
      g.bars.push_back({"r" + std::to_string(report.value("rank", 0)), measured_memory(report["memory"]), false});
    if (run.estimate)
      g.bars.push_back({"estimate", estimated_memory(run.estimate->strategies[size_t(run.estimate->configured)]), true});
    for (const auto& b : g.bars) {
      double sum = 0;
      for (double v : b.stack) sum += v;
      top = std::max(top, sum);
    }
    groups.push_back(std::move(g));
  }
  if (groups.empty()) return f;
  const ByteUnit unit = byte_unit(top);
  for (auto& g : groups)
    for (auto& b : g.bars)
      for (double& v : b.stack) v /= unit.bytes;
  chart.groups = std::move(groups);
  chart.y_label = "per rank (" + unit.name + ")";
  chart.finish_axes();
  f.bar = std::move(chart);
  return f;
}

Figure comm_figure(const std::vector<RunData>& runs) {
  Figure f;
  f.id = "comm";
  f.title = "Communication per training step, by collective";
  f.caption = "Bus bytes each rank moved per training step (report/rank_<r>.json \"comm_per_step\": every "
              "communicator, evaluation and checkpoints excluded; bus bytes count what a ring moves per rank, "
              "e.g. 2(n-1)/n of the payload for all_reduce).";
  BarChart chart;
  chart.id = f.id;
  chart.title = f.title;
  // The collectives in a fixed order, those that occur at all.
  const std::vector<std::string> order = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
                                          "send", "recv", "all_to_all"};
  std::vector<std::string> kinds;
  auto by_kind_of = [](const nlohmann::json& report) {
    return report.value("comm_per_step", nlohmann::json::object()).value("by_kind", nlohmann::json::object());
  };
  for (const auto& run : runs)
    for (const auto& report : run.rank_reports) {
      const nlohmann::json by_kind = by_kind_of(report);
      for (const auto& [kind, v] : by_kind.items())
        if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    }
  std::sort(kinds.begin(), kinds.end(), [&](const std::string& a, const std::string& b) {
    auto rank = [&](const std::string& k) { return std::find(order.begin(), order.end(), k) - order.begin(); };
    return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
  });
  chart.categories = kinds;
  double top = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    if (run.rank_reports.empty()) {
      f.notes.push_back(run.label + ": no run report (report/rank_<r>.json)");
      continue;
    }
    BarGroup g;
    g.label = run.label;
    g.color = run_color(int(i));
    for (const auto& report : run.rank_reports) {
      const nlohmann::json by_kind = by_kind_of(report);
      Bar b;
      b.label = "r" + std::to_string(report.value("rank", 0));
      for (const auto& kind : kinds) b.stack.push_back(by_kind.contains(kind) ? member(by_kind[kind], "bus_bytes") : 0.0);
      double sum = 0;
      for (double v : b.stack) sum += v;
      top = std::max(top, sum);
      g.bars.push_back(std::move(b));
    }
    chart.groups.push_back(std::move(g));
  }
  if (chart.groups.empty()) return f;
  if (kinds.empty()) f.notes.push_back("no collective in any run (a world of one process communicates nothing)");
  const ByteUnit unit = byte_unit(top);
  for (auto& g : chart.groups)
    for (auto& b : g.bars)
      for (double& v : b.stack) v /= unit.bytes;
  chart.y_label = "bus bytes per step (" + unit.name + ")";
  chart.finish_axes();
  f.bar = std::move(chart);
  return f;
}

Figure time_figure(const std::vector<RunData>& runs) {
  Figure f;
  f.id = "time";
  f.title = "Where the wall time went (rank 0)";
  f.caption = "report/rank_0.json \"time_s\": setup (model, engine, data, resume), the training steps, evaluation, "
              "checkpoint writing, the weights export, and the rest; the log's `time:` line says the same.";
  BarChart chart;
  chart.id = f.id;
  chart.title = f.title;
  const std::vector<std::pair<std::string, const char*>> phases = {
      {"setup", "setup"}, {"training", "training"}, {"evaluation", "evaluation"},
      {"checkpoints", "checkpoint"}, {"export", "export"}, {"other", "other"}};
  for (const auto& [name, key] : phases) chart.categories.push_back(name);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& run = runs[i];
    if (run.rank_reports.empty() || !run.rank_reports[0].contains("time_s")) {
      f.notes.push_back(run.label + ": no time_s in report/rank_0.json");
      continue;
    }
    BarGroup g;
    g.label = run.label;
    g.color = run_color(int(i));
    Bar b;
    for (const auto& [name, key] : phases) b.stack.push_back(member(run.rank_reports[0]["time_s"], key));
    g.bars.push_back(std::move(b));
    chart.groups.push_back(std::move(g));
  }
  if (chart.groups.empty()) return f;
  chart.y_label = "seconds";
  chart.finish_axes();
  f.bar = std::move(chart);
  return f;
}

}  // namespace

ByteUnit byte_unit(double max_bytes) {
  static const char* const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double bytes = 1;
  while (u < 4 && max_bytes >= bytes * 1024) {
    bytes *= 1024;
    ++u;
  }
  return {names[u], bytes};
}

std::vector<Figure> build_figures(const std::vector<RunData>& runs) {
  std::vector<Figure> figures;
  figures.push_back(curve(runs, "loss", "loss", "Training loss", "loss", 1.0, false,
                          "metrics.jsonl \"loss\": each step's mean token cross-entropy over the global batch."));
  Figure eval = curve(runs, "eval_loss", "eval_loss", "Evaluation loss", "loss", 1.0, true,
                      "metrics.jsonl \"eval_loss\": the held-out loss on evaluation steps (training.eval_every).");
  for (auto& note : eval.notes) {  // say why a run has none
    for (const auto& run : runs)
      if (note.rfind(run.label + ":", 0) == 0 && run.job)
        note = run.label + ": no evaluation (training.eval_every " + std::to_string(run.job->training.eval_every) +
               (run.job->training.eval_every > 0 ? ", or no held-out data: data.val_fraction" : "") + ")";
  }
  figures.push_back(std::move(eval));
  figures.push_back(curve(runs, "lr", "lr", "Learning rate", "lr", 1.0, false,
                          "metrics.jsonl \"lr\": the scheduled learning rate of each step."));
  figures.push_back(curve(runs, "throughput", "tokens_per_s", "Throughput", "tokens per second", 1.0, false,
                          "metrics.jsonl \"tokens_per_s\": the global batch's tokens over the step's wall time."));
  figures.push_back(curve(runs, "step_time", "step_time_s", "Step time", "milliseconds", 1e3, false,
                          "metrics.jsonl \"step_time_s\": the wall time of each optimizer step on rank 0."));
  Figure peak = curve(runs, "peak_memory", "peak_mem_bytes", "Peak memory, largest rank", "bytes", 1.0, false,
                      "metrics.jsonl \"peak_mem_bytes\": the largest rank's peak so far (resident memory on the CPU, "
                      "allocated memory on a GPU), runtime included.");
  to_byte_unit(peak, "peak");
  figures.push_back(std::move(peak));
  figures.push_back(memory_figure(runs));
  figures.push_back(comm_figure(runs));
  figures.push_back(time_figure(runs));
  return figures;
}

}  // namespace accel::report
