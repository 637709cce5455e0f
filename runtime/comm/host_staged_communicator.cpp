// HostStagedCommunicator (see the header): device -> host copy at issue, the host communicator's op,
// host -> device copy in wait().
#include "runtime/comm/host_staged_communicator.hpp"

#include <functional>

#include "runtime/comm/op_checks.hpp"

namespace accel::comm {
namespace {

// A private host copy of `t` (a copy even when `t` is already on the CPU). Synchronous: the
// device-to-host copy waits for the work queued on `t`'s stream, so the host op sees final values.
at::Tensor to_host(const at::Tensor& t) { return t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true); }

class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr host, std::function<void()> copy_back) : host_(std::move(host)), copy_back_(std::move(copy_back)) {}
  void wait() override {
    if (!copy_back_) return;
    host_->wait();
    copy_back_();
    copy_back_ = nullptr;
  }
  bool is_completed() override { return !copy_back_ || host_->is_completed(); }

 private:
  WorkPtr host_;
  std::function<void()> copy_back_;  // null once waited
};

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::unique_ptr<Communicator> host, at::Device device)
      : host_(std::move(host)), device_(device) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string backend_name() const override { return host_->backend_name() + "-staged"; }
  std::chrono::milliseconds timeout() const override { return host_->timeout(); }
  at::Device device() const override { return device_; }

  WorkPtr all_reduce(at::Tensor tensor, ReduceOp op) override {
    check_all_reduce_args(tensor, rank(), size(), device_);
    stats_.record(CollectiveKind::AllReduce, tensor_bytes(tensor));
    at::Tensor staged = to_host(tensor);
    return staged_work(host_->all_reduce(staged, op), tensor, staged);
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    check_reduce_scatter_args(input, output, rank(), size(), device_);
    stats_.record(CollectiveKind::ReduceScatter, tensor_bytes(input));
    at::Tensor staged_out = at::empty(output.sizes(), output.options().device(at::kCPU));
    // The staged input is ours alone, so the host op may reduce in it.
    return staged_work(host_->reduce_scatter_consuming(to_host(input), staged_out, op), output, staged_out);
  }

  WorkPtr all_gather(at::Tensor input, at::Tensor output) override {
    check_all_gather_args(input, output, rank(), size(), device_);
    stats_.record(CollectiveKind::AllGather, tensor_bytes(output));
    at::Tensor staged_out = at::empty(output.sizes(), output.options().device(at::kCPU));
    return staged_work(host_->all_gather(to_host(input), staged_out), output, staged_out);
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check_broadcast_args(tensor, root, rank(), size(), device_);
    stats_.record(CollectiveKind::Broadcast, tensor_bytes(tensor));
    at::Tensor staged = to_host(tensor);
    return staged_work(host_->broadcast(staged, root), tensor, staged);
  }

  WorkPtr barrier() override {
    stats_.record(CollectiveKind::Barrier, 0);
    return host_->barrier();
  }

  // The host communicator forms the group; the group stages as this one. The host's color exchange
  // is one all_gather of an int64 per rank, counted here as every split counts it in its parent.
  std::unique_ptr<Communicator> split(int color) override {
    auto group = host_->split(color);
    stats_.record(CollectiveKind::AllGather, int64_t(size()) * int64_t(sizeof(int64_t)));
    return make_host_staged_communicator(std::move(group), device_);
  }

 private:
  static WorkPtr staged_work(WorkPtr host_work, at::Tensor device_result, at::Tensor host_result) {
    return std::make_shared<StagedWork>(std::move(host_work), [device_result, host_result]() mutable {
      device_result.copy_(host_result);
    });
  }

  std::unique_ptr<Communicator> host_;
  const at::Device device_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staged_communicator(std::unique_ptr<Communicator> host, at::Device device) {
  if (!host) throw CommError("host-staged communicator: the host communicator is null");
  if (!host->device().is_cpu())
    throw CommError("host-staged communicator: the host communicator (" + host->backend_name() +
                    ") must work on CPU tensors, not " + host->device().str());
  return std::make_unique<HostStagedCommunicator>(std::move(host), device);
}

}  // namespace accel::comm
