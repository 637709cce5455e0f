#include "trainer/fault_communicator.hpp"

#include <thread>

namespace accel::train {
namespace {

class FaultCommunicator final : public comm::Communicator {
 public:
  FaultCommunicator(comm::Communicator& inner, const FaultInjector& faults, std::unique_ptr<comm::Communicator> owned)
      : owned_(std::move(owned)), inner_(inner), faults_(faults) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  at::Device device() const override { return inner_.device(); }

  comm::WorkPtr all_reduce(at::Tensor tensor, comm::ReduceOp op) override {
    switch (faults_.in_collective("all_reduce")) {
      case FaultInjector::Action::Skip: return comm::completed_work();
      case FaultInjector::Action::IssueBarrier: return issue([&] { return inner_.barrier(); });
      case FaultInjector::Action::IssueHalf: {
        const int64_t n = tensor.numel();
        at::Tensor other = n > 1 ? tensor.view(-1).narrow(0, 0, n / 2) : at::zeros({2}, tensor.options());
        return issue([&] { return inner_.all_reduce(other, op); });
      }
      case FaultInjector::Action::IssueLate: sleep_past_timeout(); break;
      case FaultInjector::Action::Issue: break;
    }
    return issue([&] { return inner_.all_reduce(std::move(tensor), op); });
  }
  comm::WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, comm::ReduceOp op) override {
    return forward("reduce_scatter", [&] { return inner_.reduce_scatter(std::move(input), std::move(output), op); });
  }
  comm::WorkPtr reduce_scatter_consuming(at::Tensor input, at::Tensor output, comm::ReduceOp op) override {
    return forward("reduce_scatter",
                   [&] { return inner_.reduce_scatter_consuming(std::move(input), std::move(output), op); });
  }
  comm::WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    return forward("all_gather", [&] { return inner_.all_gather(std::move(input), std::move(output)); });
  }
  comm::WorkPtr broadcast(at::Tensor tensor, int root) override {
    return forward("broadcast", [&] { return inner_.broadcast(std::move(tensor), root); });
  }
  comm::WorkPtr barrier() override {
    return forward("barrier", [&] { return inner_.barrier(); });
  }

  std::unique_ptr<comm::Communicator> split(int color) override {
    if (faults_.in_collective("split") == FaultInjector::Action::IssueLate) sleep_past_timeout();
    std::unique_ptr<comm::Communicator> group = inner_.split(color);
    stats_ = inner_.stats();
    comm::Communicator& borrowed = *group;
    return make_fault_communicator(borrowed, faults_, std::move(group));
  }

 private:
  template <typename Issue>
  comm::WorkPtr forward(const char* op, Issue issue_op) {
    if (faults_.in_collective(op) == FaultInjector::Action::IssueLate) sleep_past_timeout();
    return issue(issue_op);
  }

  template <typename Issue>
  comm::WorkPtr issue(Issue issue_op) {
    comm::WorkPtr work = issue_op();
    stats_ = inner_.stats();  // counted by the wrapped communicator when issued
    return work;
  }

  // slow_collective: later than any peer waits (the launcher stops this rank meanwhile).
  void sleep_past_timeout() const { std::this_thread::sleep_for(2 * inner_.timeout()); }

  std::unique_ptr<comm::Communicator> owned_;
  comm::Communicator& inner_;
  const FaultInjector& faults_;
};

}  // namespace

std::unique_ptr<comm::Communicator> make_fault_communicator(comm::Communicator& inner, const FaultInjector& faults,
                                                            std::unique_ptr<comm::Communicator> owned) {
  return std::make_unique<FaultCommunicator>(inner, faults, std::move(owned));
}

}  // namespace accel::train
