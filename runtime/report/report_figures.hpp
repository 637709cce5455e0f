// What `accel report` shows of its runs, figure by figure, in page order: the curves over the
// steps of metrics.jsonl (loss, evaluation loss, lr, throughput, step time, peak memory), then
// the run reports' per-rank figures (model-state memory beside accel estimate-memory,
// communication per step by collective, where the time went). Every run is one colour throughout.
// A figure with nothing to draw keeps its place and says why (notes).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/report/chart.hpp"
#include "runtime/report/run_data.hpp"

namespace accel::report {

struct Figure {
  std::string id;  // "loss": chart-loss on the page, loss.png beside it
  std::string title;
  std::optional<LineChart> line;
  std::optional<BarChart> bar;
  std::string caption;             // what is drawn, from which file
  std::vector<std::string> notes;  // what is not drawn and why
  bool drawn() const { return line.has_value() || bar.has_value(); }
};

std::vector<Figure> build_figures(const std::vector<RunData>& runs);

// A byte count's unit for an axis whose largest value is `max_bytes`: {"MiB", 2^20}.
struct ByteUnit {
  std::string name;
  double bytes = 1;
};
ByteUnit byte_unit(double max_bytes);

}  // namespace accel::report
