// Names for the Communicator's enums (error messages, logs, stats reports) and the color exchange
// that starts every split().
// Invariant: every enumerator has a stable lower-case name that matches the op names in errors.
#include "runtime/comm/communicator.hpp"

namespace accel::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "unknown";
}

std::unique_ptr<Communicator> Communicator::split(int /*color*/) {
  throw CommError("split: the " + backend_name() + " communicator cannot form subgroups");
}

SplitGroup exchange_split_colors(Communicator& parent, int color) {
  if (color < 0)
    throw CommError("split on rank " + std::to_string(parent.rank()) + ": color must be >= 0, got " +
                    std::to_string(color));
  at::Tensor mine = at::tensor({int64_t(color)}, at::kLong);
  at::Tensor all = at::empty({parent.size()}, at::kLong);
  parent.all_gather(mine, all)->wait();
  SplitGroup g;
  g.color = color;
  g.size = 0;
  g.sequence = parent.splits_++;
  const int64_t* colors = all.data_ptr<int64_t>();
  for (int q = 0; q < parent.size(); ++q) {
    if (colors[q] != color) continue;
    if (q == parent.rank()) g.rank = g.size;
    ++g.size;
  }
  return g;
}

}  // namespace accel::comm
