// Host staging for asynchronous checkpoints (see the header and docs/design/0028).
#include "api/checkpoint_staging.hpp"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstring>
#include <set>

namespace accel::api {

void CheckpointStaging::begin(const std::string& dir) {
  dir_ = dir;
  files_.clear();
  streamed_.clear();
  used_.clear();
  host_copies_.clear();
  device_sources_.clear();
}

at::Tensor CheckpointStaging::buffer_for(const std::string& key, const at::Tensor& like) {
  used_.push_back(key);
  at::Tensor& buffer = buffers_[key];
  if (buffer.defined() && buffer.scalar_type() == like.scalar_type() && buffer.sizes().equals(like.sizes()))
    return buffer;
  // Page-locked beside a GPU, so the copy is asynchronous and runs at full bandwidth.
  buffer = at::empty(like.sizes(), at::TensorOptions(like.scalar_type()).pinned_memory(!device_.is_cpu()));
  return buffer;
}

void CheckpointStaging::write(const std::string& file, const engine::NamedTensors& tensors) {
  engine::NamedTensors staged;
  std::optional<c10::Stream> side;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor live = tensor.detach();
    if (!live.is_contiguous()) live = live.contiguous();  // a copy already: nobody else changes it
    at::Tensor buffer = buffer_for(file + "/" + name, live);
    if (live.is_cpu()) {
      host_copies_.push_back({live, buffer});
    } else {
      if (!side) {
        // The copies wait for what the compute stream has queued so far (the step just taken)
        // and run beside what it queues next.
        const c10::Device d = live.device();
        c10::Event ready(d.type());
        ready.record(at::accelerator::getCurrentStream(d.index()));
        side = c10::impl::VirtualGuardImpl(d.type()).getStreamFromGlobalPool(d, /*isHighPriority=*/false);
        ready.block(*side);
        if (!device_copied_) device_copied_ = std::make_unique<c10::Event>(d.type());
      }
      c10::StreamGuard on_side(*side);
      buffer.copy_(live, /*non_blocking=*/true);
      device_sources_.push_back(live);  // its memory must not be reused before the copy ran
    }
    staged.emplace_back(name, buffer);
  }
  if (side) device_copied_->record(*side);
  files_.emplace_back(file, std::move(staged));
}

void CheckpointStaging::write_streamed(const std::string& file, const std::vector<engine::TensorSpec>& specs,
                                       const std::function<at::Tensor(size_t)>& produce) {
  // States kept on disk (nvme offload): staging them would take the host memory offload saves.
  engine::save_safetensors_streamed(dir_ + "/" + file, specs, produce);
  streamed_.push_back(file);
}

void CheckpointStaging::copy_host() {
  // One thread, plain memcpy: the training thread's intra-op pool stays the training thread's.
  for (const Pending& p : host_copies_) std::memcpy(p.staging.data_ptr(), p.live.const_data_ptr(), p.live.nbytes());
  host_copies_.clear();
  if (!device_sources_.empty()) device_copied_->synchronize();
  device_sources_.clear();
}

std::vector<std::string> CheckpointStaging::write_files() {
  std::vector<std::string> names;
  for (const auto& [file, tensors] : files_) {
    engine::save_safetensors(dir_ + "/" + file, tensors);
    names.push_back(file);
  }
  names.insert(names.end(), streamed_.begin(), streamed_.end());
  // Buffers this save did not use (a layout that changed) are given back.
  const std::set<std::string> used(used_.begin(), used_.end());
  for (auto it = buffers_.begin(); it != buffers_.end();)
    it = used.count(it->first) ? std::next(it) : buffers_.erase(it);
  files_.clear();
  return names;
}

int64_t CheckpointStaging::staging_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, buffer] : buffers_) bytes += int64_t(buffer.nbytes());
  return bytes;
}

}  // namespace accel::api
