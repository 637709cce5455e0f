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

namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

}  // namespace

WorkPtr completed_work() { return std::make_shared<CompletedWork>(); }

std::unique_ptr<Communicator> Communicator::split(int /*color*/) {
  throw CommError("split: the " + backend_name() + " communicator cannot form subgroups");
}

SplitGroup exchange_split_colors(Communicator& parent, int color) {
  if (color < 0)
    throw CommError("split on rank " + std::to_string(parent.rank()) + ": color must be >= 0, got " +
                    std::to_string(color));
  // On the parent's device (NCCL takes only GPU tensors), read back on the host.
  at::Tensor mine = at::full({1}, int64_t(color), at::TensorOptions().dtype(at::kLong).device(parent.device()));
  at::Tensor gathered = at::empty({parent.size()}, mine.options());
  parent.all_gather(mine, gathered)->wait();
  at::Tensor all = gathered.cpu();
  SplitGroup g;
  g.color = color;
  g.size = 0;
  g.sequence = parent.splits_++;
  const int64_t* colors = all.data_ptr<int64_t>();
  for (int q = 0; q < parent.size(); ++q) {
    if (colors[q] != color) continue;
    if (q == parent.rank()) g.rank = g.size;
    g.members.push_back(q);
    ++g.size;
  }
  return g;
}

std::vector<double> all_reduce_values(Communicator& comm, const std::vector<double>& values, ReduceOp op) {
  at::Tensor t = at::tensor(values, at::kDouble).to(comm.device());
  comm.all_reduce(t, op)->wait();
  t = t.cpu();  // on a CUDA communicator: after the op, on the current stream
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace accel::comm
