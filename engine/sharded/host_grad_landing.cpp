#include "engine/sharded/host_grad_landing.hpp"

#include <ATen/DeviceAccelerator.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "engine/sharded/unit_block_allocator.hpp"

namespace accel::engine {

void HostGradLanding::land(int unit, const at::Tensor& reduced, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  const size_t u = size_t(unit);
  if (staging_.size() <= u) {
    staging_.resize(u + 1);
    copied_.resize(u + 1);
  }
  // Accumulation: the unit's previous shard is still in the staging buffer; take it first.
  for (size_t i = 0; i < pending_.size(); ++i)
    if (pending_[i].unit == unit) {
      if (copied_[u]) copied_[u]->synchronize();
      take(i);
      break;
    }
  at::Tensor& staging = staging_[u];
  if (!staging.defined() || staging.numel() != reduced.numel() || staging.scalar_type() != reduced.scalar_type())
    staging = host_empty(reduced.numel(), reduced.scalar_type(), device_);
  staging.copy_(reduced, /*non_blocking=*/true);
  if (!device_.is_cpu()) {
    if (!copied_[u]) copied_[u] = std::make_unique<c10::Event>(device_.type());
    copied_[u]->record(at::accelerator::getCurrentStream(device_.index()));
  }
  pending_.push_back({unit, grad});
}

void HostGradLanding::take(size_t i) {
  Landing landing = std::move(pending_[i]);
  pending_.erase(pending_.begin() + std::ptrdiff_t(i));
  landing.grad.add_(staging_[size_t(landing.unit)]);
}

void HostGradLanding::settle() {
  if (!device_.is_cpu()) {
    // Everything queued so far: the copies, and the uploads of the masters the host writes next.
    c10::Event now(device_.type());
    now.record(at::accelerator::getCurrentStream(device_.index()));
    now.synchronize();
  }
  at::NoGradGuard no_grad;
  while (!pending_.empty()) take(0);
}

int64_t HostGradLanding::staging_bytes() const {
  int64_t bytes = 0;
  for (const auto& t : staging_)
    if (t.defined()) bytes += int64_t(t.numel()) * int64_t(t.element_size());
  return bytes;
}

}  // namespace accel::engine
