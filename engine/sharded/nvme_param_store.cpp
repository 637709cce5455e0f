#include "engine/sharded/nvme_param_store.hpp"

#include <unistd.h>

#include <algorithm>

#include "engine/sharded/unit_block_allocator.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {
namespace {

std::string dtype_suffix(at::ScalarType t) {
  if (t == at::kFloat) return "fp32";
  if (t == at::kBFloat16) return "bf16";
  return c10::toString(t);
}

}  // namespace

NvmeParamStore::NvmeParamStore(const std::string& dir, int rank, int buffer_count, at::ScalarType dtype,
                               at::Device for_device)
    : dir_(dir, "accel_params", rank, "deepspeed.offload_param_nvme_path"),
      buffer_count_(std::max(1, buffer_count)),
      dtype_(dtype),
      for_device_(for_device) {}

NvmeParamStore::~NvmeParamStore() {
  for (auto& u : units_)
    if (u.fd >= 0) ::close(u.fd);
}  // dir_ then removes the files

int NvmeParamStore::add_unit(const std::string& name, const at::Tensor& shard) {
  UnitFile f;
  f.path = dir_.path() + "/" + std::to_string(units_.size()) + "_" + name + "." + dtype_suffix(dtype_);
  f.numel = shard.numel();
  f.fd = create_offload_file(dir_, f.path, 0);  // written whole just below
  units_.push_back(f);
  is_staged_.push_back(0);
  write(int(units_.size()) - 1, shard);
  return int(units_.size()) - 1;
}

int NvmeParamStore::add_master_view(const NvmeStateStore& states, int state_unit, int64_t numel) {
  if (dtype_ != at::kFloat)
    throw RunError("nvme parameter offload: a shard read from the fp32 master needs fp32 compute, not " +
                   std::string(c10::toString(dtype_)));
  UnitFile f;
  f.numel = numel;
  f.states = &states;
  f.state_unit = state_unit;
  units_.push_back(f);
  is_staged_.push_back(0);
  return int(units_.size()) - 1;
}

void NvmeParamStore::write(int unit, const at::Tensor& shard) {
  const UnitFile& f = units_.at(size_t(unit));
  if (f.fd < 0 || shard.numel() != f.numel)
    throw RunError("nvme parameter offload: unit " + std::to_string(unit) + (f.fd < 0 ? " is read from the optimizer's "
                   "master file; it is not written here" : " holds " + std::to_string(f.numel) + " values, not " +
                   std::to_string(shard.numel())));
  at::Tensor v = shard.to(at::kCPU, dtype_).contiguous();  // a GPU engine's shard too
  write_offload_file(dir_, f.fd, f.path, v.data_ptr(), size_t(v.numel()) * v.element_size(), 0);
}

void NvmeParamStore::read_into(int unit, at::Tensor& dst) const {
  const UnitFile& f = units_.at(size_t(unit));
  if (f.fd < 0) {
    f.states->read_range(f.state_unit, 0, dst);
    return;
  }
  read_offload_file(dir_, f.fd, f.path, dst.data_ptr(), size_t(f.numel) * dst.element_size(), 0);
}

at::Tensor NvmeParamStore::read(int unit) const {
  at::Tensor t = at::empty({numel(unit)}, at::TensorOptions(dtype_));
  read_into(unit, t);
  return t;
}

at::Tensor NvmeParamStore::stage(int unit) {
  if (is_staged_.at(size_t(unit)))
    throw RunError("nvme parameter offload: unit " + std::to_string(unit) + " is staged already");
  if (staged_ >= buffer_count_)
    throw RunError("nvme parameter offload: all " + std::to_string(buffer_count_) +
                   " staging buffers are in use (a gather must complete first)");
  // On the CPU a unit block (the next stage of the same size reuses its pages within a phase); for
  // a GPU pinned memory from the host allocator.
  at::Tensor buffer = host_empty(numel(unit), dtype_, for_device_);
  read_into(unit, buffer);
  is_staged_[size_t(unit)] = 1;
  peak_staged_ = std::max(peak_staged_, ++staged_);
  return buffer;
}

void NvmeParamStore::unstage(int unit) {
  if (!is_staged_.at(size_t(unit))) return;
  is_staged_[size_t(unit)] = 0;
  --staged_;
}

int64_t NvmeParamStore::bytes_on_disk() const {
  int64_t b = 0;
  for (const auto& u : units_)
    if (u.fd >= 0) b += u.numel * int64_t(c10::elementSize(dtype_));
  return b;
}

int64_t NvmeParamStore::buffer_bytes() const {
  int64_t largest = 0;
  for (const auto& u : units_) largest = std::max(largest, u.numel);
  return int64_t(std::min<int>(buffer_count_, size())) * largest * int64_t(c10::elementSize(dtype_));
}

}  // namespace accel::engine
