// A world of one rank (see solo_communicator.hpp).
#include "runtime/comm/solo_communicator.hpp"

#include <cstring>

#include "runtime/comm/op_checks.hpp"

namespace accel::comm {
namespace {

void copy_bytes(const at::Tensor& from, const at::Tensor& to) {
  if (from.numel() == 0 || from.data_ptr() == to.data_ptr()) return;
  std::memcpy(to.data_ptr(), from.data_ptr(), static_cast<size_t>(from.numel() * from.element_size()));
}

class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "solo"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  // Sum, Avg, Max and Min over one rank are its own values.
  WorkPtr all_reduce(at::Tensor tensor, ReduceOp) override {
    check_all_reduce_args(tensor, 0, 1);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    return completed_work();
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp) override {
    check_reduce_scatter_args(input, output, 0, 1);
    stats_.record(CollectiveKind::ReduceScatter, tensor_bytes(input));
    copy_bytes(input, output);
    return completed_work();
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    check_all_gather_args(input, output, 0, 1);
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    copy_bytes(input, output);
    return completed_work();
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, 0, 1);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    return completed_work();
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    return completed_work();
  }

  std::unique_ptr<Communicator> split(int color) override {
    exchange_split_colors(*this, color);  // counts the exchange and refuses a negative color, as every split does
    return std::make_unique<SoloCommunicator>(timeout_);
  }

 private:
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator(std::chrono::milliseconds timeout) {
  return std::make_unique<SoloCommunicator>(timeout);
}

}  // namespace accel::comm
