#include "engine/sharded/nvme_state_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>

#include "engine/sharded/unit_block_allocator.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {
namespace {

}  // namespace

NvmeStateStore::NvmeStateStore(const std::string& dir, int rank, int buffer_count)
    : dir_(dir, "accel", rank, "deepspeed.offload_optimizer_nvme_path"), buffer_count_(std::max(2, buffer_count)) {}

NvmeStateStore::~NvmeStateStore() {
  for (auto& u : units_)
    if (u.fd >= 0) ::close(u.fd);
}  // dir_ then removes the files

int NvmeStateStore::add_unit(const std::string& name, int64_t floats) {
  UnitFile f;
  f.path = dir_.path() + "/" + std::to_string(units_.size()) + "_" + name + ".fp32";
  f.floats = floats;
  f.fd = create_offload_file(dir_, f.path, size_t(floats) * 4);
  units_.push_back(f);
  return int(units_.size()) - 1;
}

void NvmeStateStore::read_into(int unit, at::Tensor& dst) const {
  const UnitFile& f = units_[size_t(unit)];
  read_offload_file(dir_, f.fd, f.path, dst.data_ptr(), size_t(f.floats) * 4, 0);
}

void NvmeStateStore::write_from(int unit, const at::Tensor& src, int64_t offset) const {
  const UnitFile& f = units_[size_t(unit)];
  write_offload_file(dir_, f.fd, f.path, src.data_ptr(), size_t(src.numel()) * 4, off_t(offset) * 4);
}

void NvmeStateStore::write(int unit, const at::Tensor& values, int64_t offset) {
  at::Tensor v = values.contiguous();
  const int64_t floats = units_[size_t(unit)].floats;
  if (v.scalar_type() != at::kFloat || offset < 0 || offset + v.numel() > floats)
    throw RunError("nvme offload: unit " + std::to_string(unit) + " holds " + std::to_string(floats) +
                   " fp32 values; cannot write " + std::to_string(v.numel()) + " at " + std::to_string(offset));
  write_from(unit, v, offset);
}

void NvmeStateStore::read_range(int unit, int64_t offset, at::Tensor& dst) const {
  const UnitFile& f = units_.at(size_t(unit));
  if (dst.scalar_type() != at::kFloat || !dst.is_contiguous() || offset < 0 || offset + dst.numel() > f.floats)
    throw RunError("nvme offload: unit " + std::to_string(unit) + " holds " + std::to_string(f.floats) +
                   " fp32 values; cannot read " + std::to_string(dst.numel()) + " at " + std::to_string(offset));
  read_offload_file(dir_, f.fd, f.path, dst.data_ptr(), size_t(dst.numel()) * 4, off_t(offset) * 4);
}

at::Tensor NvmeStateStore::read(int unit) {
  at::Tensor t = unit_empty(units_[size_t(unit)].floats, at::kFloat);
  read_into(unit, t);
  return t;
}

void NvmeStateStore::for_each_unit(const std::function<void(int, at::Tensor&)>& fn, bool write_back) {
  const int n = size();
  if (n == 0) return;
  int64_t largest = 0;
  for (const auto& u : units_) largest = std::max(largest, u.floats);
  const int pool = std::min(buffer_count_, n);
  std::vector<at::Tensor> buffers(static_cast<size_t>(pool));
  for (auto& b : buffers) b = unit_empty(largest, at::kFloat);
  // Buffer b serves units b, b + pool, ...: unit u's read starts (on its I/O thread) once the
  // write-back of unit u - pool from the same buffer has completed.
  std::vector<std::future<void>> reads(static_cast<size_t>(n));
  std::vector<std::shared_future<void>> writes(static_cast<size_t>(pool));
  auto view = [&](int u) { return buffers[size_t(u % pool)].narrow(0, 0, units_[size_t(u)].floats); };
  auto start_read = [&](int u) {
    std::shared_future<void> prior = writes[size_t(u % pool)];
    reads[size_t(u)] = std::async(std::launch::async, [this, u, v = view(u), prior]() mutable {
      if (prior.valid()) prior.get();
      read_into(u, v);
    });
  };
  // Read ahead as far as the pool allows, keeping one buffer for the unit being written back.
  const int ahead = std::max(1, pool - 1);
  for (int u = 0; u < std::min(n, ahead); ++u) start_read(u);
  auto drain = [&] {
    for (auto& r : reads)
      if (r.valid()) r.wait();
    for (auto& w : writes)
      if (w.valid()) w.wait();
  };
  try {
    for (int u = 0; u < n; ++u) {
      if (u + ahead < n) start_read(u + ahead);
      reads[size_t(u)].get();
      at::Tensor v = view(u);
      fn(u, v);
      if (write_back)
        writes[size_t(u % pool)] = std::async(std::launch::async, [this, u, v]() { write_from(u, v, 0); }).share();
    }
    for (auto& w : writes)
      if (w.valid()) w.get();
  } catch (...) {
    drain();
    throw;
  }
}

int64_t NvmeStateStore::bytes_on_disk() const {
  int64_t b = 0;
  for (const auto& u : units_) b += u.floats * 4;
  return b;
}

int64_t NvmeStateStore::buffer_bytes() const {
  int64_t largest = 0;
  for (const auto& u : units_) largest = std::max(largest, u.floats);
  return int64_t(std::min<int>(buffer_count_, size())) * largest * 4;
}

}  // namespace accel::engine
