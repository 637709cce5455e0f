#include "engine/sharded/sharded_optimizer.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>

#include "engine/format/safetensors.hpp"
#include "engine/optim/adamw_fused.hpp"
#include "engine/optim/adamw_step.hpp"
#include "engine/optim/math_precision.hpp"
#include "engine/optim/sgd_step.hpp"
#include "engine/sharded/unit_block_allocator.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {

ShardedOptimizer::ShardedOptimizer(const config::OptimizerSection& section, int rank, at::ScalarType master_dtype)
    : ShardedOptimizer(builtin_optimizer_setup(section), rank, master_dtype) {}

ShardedOptimizer::ShardedOptimizer(OptimizerSetup setup, int rank, at::ScalarType master_dtype)
    : setup_(std::move(setup)), rank_(rank), master_dtype_(master_dtype) {}

at::Tensor ShardedOptimizer::state_empty(int64_t numel, at::ScalarType dtype) const {
  return device_.is_cpu() ? host_empty(numel, dtype, engine_device_) : unit_empty(numel, dtype, device_);
}

UnitShardState& ShardedOptimizer::add_unit(const std::string& name, const FlatLayout& layout, std::vector<int> groups,
                                           const at::Tensor& master, bool adopt_master) {
  const int64_t S = layout.shard_numel();
  const at::ScalarType state_dtype = optimizer_math_dtype(master_dtype_);
  for (int g : groups)
    if (g < 0 || size_t(g) >= setup_.groups.size())
      throw RunError("sharded optimizer: unit " + name + " names parameter group " + std::to_string(g) + " of " +
                     std::to_string(setup_.groups.size()));
  UnitShardState u{name, layout, layout.segments(rank_), std::move(groups), {}, {}, {}, {}, {}, 0};
  grad_landed_.push_back(false);
  if (nvme_) {
    // Offloaded: the master goes straight from the caller's tensor to its file, and the moments
    // and the gradient slot are the new file's zeros; nothing unit-sized stays in memory.
    units_.push_back(std::move(u));
    const int slots = int(state_slots(units_.back()).size());
    int index = nvme_->add_unit(units_.back().unit, int64_t(slots + 1) * S);
    nvme_->write(index, master.to(at::kCPU, master_dtype_));  // from a GPU too
    return units_.back();
  }
  u.grad = state_zeros(S, master_dtype_);
  if (adopt_master && (master.scalar_type() != master_dtype_ || !master.is_contiguous() || master.numel() != S ||
                       master.device() != device_))
    throw RunError("sharded optimizer: unit " + name + " cannot adopt its master (dtype, layout or size differ)");
  u.master = adopt_master ? master : state_empty(S, master_dtype_).copy_(master);
  if (setup_.kind == config::OptimizerName::adamw) {
    u.exp_avg = state_zeros(S, state_dtype);
    u.exp_avg_sq = state_zeros(S, state_dtype);
  } else if (setup_.keeps_momentum()) {
    u.momentum = state_zeros(S, state_dtype);
  }
  units_.push_back(std::move(u));
  return units_.back();
}

void ShardedOptimizer::zero_grads() {
  grad_factor_ = 1.0;
  if (nvme_) {
    std::fill(grad_landed_.begin(), grad_landed_.end(), char(0));  // the files' slots are stale, read as zeros
    return;
  }
  for (auto& u : units_) u.grad.zero_();
}

at::Device ShardedOptimizer::grad_device(int unit) const {
  return nvme_ ? at::Device(at::kCPU) : units_.at(size_t(unit)).grad.device();
}

at::Tensor ShardedOptimizer::read_grad(size_t i) {
  UnitShardState& u = units_[i];
  const int64_t S = u.layout.shard_numel();
  at::Tensor g = unit_empty(S, at::kFloat);
  if (!grad_landed_[i]) return g.zero_();
  nvme_->read_range(int(i), grad_offset(u), g);
  return g;
}

void ShardedOptimizer::add_to_grad(int unit, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  const size_t i = size_t(unit);
  if (!nvme_) {
    units_.at(i).grad.add_(values);
    return;
  }
  // The same add as into a gradient held in memory (zeros first), so the sums are bitwise equal.
  at::Tensor g = read_grad(i);
  g.add_(values);
  nvme_->write(unit, g, grad_offset(units_[i]));
  grad_landed_[i] = 1;
}

double ShardedOptimizer::unscale_and_clip(double grad_scale, double max_norm, const SumOfSquaresReduce& reduce) {
  if (!nvme_) {
    std::vector<at::Tensor> grads;
    for (auto& u : units_) grads.push_back(u.grad);
    return unscale_and_clip_grad_norm(grads, grad_scale, max_norm, reduce);
  }
  GradSquares squares;
  for (size_t i = 0; i < units_.size(); ++i) squares.add(read_grad(i));
  const double local = squares.local_sum();
  const double norm = std::sqrt(reduce ? reduce(local) : local) / grad_scale;
  grad_factor_ = unscale_and_clip_factor(norm, grad_scale, max_norm);
  return norm;
}

void ShardedOptimizer::update(UnitShardState& u, const std::vector<GroupHyper>& groups) {
  ++u.step;
  // Fused: the unit's segments of each parameter group in one launch.
  const bool fused = setup_.fused && setup_.kind == config::OptimizerName::adamw && fused_adamw_applies(u.master, u.exp_avg);
  std::vector<AdamWBatch> batches(fused ? groups.size() : 0);
  for (const auto& seg : u.segments) {
    auto piece = [&](const at::Tensor& t) { return t.narrow(0, seg.shard_offset, seg.numel); };
    const int group = u.groups[size_t(seg.param)];
    const GroupHyper& h = groups[size_t(group)];
    if (fused) {
      batches[size_t(group)].add(piece(u.master), piece(u.grad), piece(u.exp_avg), piece(u.exp_avg_sq), u.step);
    } else if (setup_.kind == config::OptimizerName::adamw) {
      adamw_step(piece(u.master), piece(u.grad), piece(u.exp_avg), piece(u.exp_avg_sq), u.step, h.adamw(),
                        /*apply_decay=*/true);
    } else {
      sgd_step(piece(u.master), piece(u.grad), u.momentum.defined() ? piece(u.momentum) : at::Tensor(),
                      u.step, h.sgd(), /*apply_decay=*/true);
    }
  }
  for (size_t g = 0; g < batches.size(); ++g) adamw_fused_step(batches[g], groups[g].adamw());
}

std::vector<at::Tensor*> ShardedOptimizer::state_slots(UnitShardState& u) {
  std::vector<at::Tensor*> slots{&u.master};
  if (setup_.kind == config::OptimizerName::adamw) {
    slots.push_back(&u.exp_avg);
    slots.push_back(&u.exp_avg_sq);
  } else if (setup_.keeps_momentum()) {
    slots.push_back(&u.momentum);
  }
  return slots;
}

void ShardedOptimizer::step(const std::vector<GroupHyper>& groups,
                            const std::function<void(int, UnitShardState&)>& after_unit) {
  if (groups.size() != setup_.groups.size())
    throw RunError("sharded optimizer: " + std::to_string(groups.size()) + " groups' hyper-parameters for " +
                   std::to_string(setup_.groups.size()) + " groups");
  at::NoGradGuard no_grad;
  if (!spilled_) {
    for (size_t i = 0; i < units_.size(); ++i) {
      if (nvme_) {  // states materialized (a reshard), gradients still in their files
        units_[i].grad = read_grad(i);
        if (grad_factor_ != 1.0) units_[i].grad.mul_(grad_factor_);
      }
      update(units_[i], groups);
      if (after_unit) after_unit(int(i), units_[i]);
      if (nvme_) units_[i].grad = at::Tensor();
    }
    return;
  }
  nvme_->for_each_unit(
      [&](int i, at::Tensor& buffer) {
        UnitShardState& u = units_[size_t(i)];
        auto slots = state_slots(u);
        const int64_t S = u.layout.shard_numel();
        for (size_t k = 0; k < slots.size(); ++k) *slots[k] = buffer.narrow(0, int64_t(k) * S, S);
        u.grad = buffer.narrow(0, grad_offset(u), S);
        if (!grad_landed_[size_t(i)]) u.grad.zero_();
        if (grad_factor_ != 1.0) u.grad.mul_(grad_factor_);  // unscale_and_clip's, as in memory
        update(u, groups);
        if (after_unit) after_unit(i, u);
        for (auto* slot : slots) *slot = at::Tensor();  // the buffer goes back to the pool
        u.grad = at::Tensor();
      },
      /*write_back=*/true);
}

void ShardedOptimizer::offload_to_nvme(const std::string& dir, int buffer_count) {
  nvme_ = std::make_unique<NvmeStateStore>(dir, rank_, buffer_count);
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitShardState& u = units_[i];
    nvme_->add_unit(u.unit, int64_t(state_slots(u).size() + 1) * u.layout.shard_numel());
    if (u.grad.defined()) {  // a gradient already landed goes to its slot; zeros need no write
      if (u.grad.count_nonzero().item<int64_t>() > 0) {
        nvme_->write(int(i), u.grad.to(at::kCPU, at::kFloat), grad_offset(u));
        grad_landed_[i] = 1;
      }
      u.grad = at::Tensor();
    }
  }
  spill();
  spilled_ = true;
}

void ShardedOptimizer::spill_unit(size_t i) {
  auto slots = state_slots(units_[i]);
  const int64_t S = units_[i].layout.shard_numel();
  for (size_t k = 0; k < slots.size(); ++k) {  // each state at its place: no staging copy of the unit
    nvme_->write(int(i), *slots[k], int64_t(k) * S);
    *slots[k] = at::Tensor();
  }
}

void ShardedOptimizer::spill() {
  if (!nvme_ || spilled_) return;
  for (size_t i = 0; i < units_.size(); ++i) spill_unit(i);
  spilled_ = true;
}

// The shape state_tensors() gives a step counter (at::tensor of one value).
static std::vector<int64_t> step_shape() { return at::tensor(int64_t(0), at::kLong).sizes().vec(); }

std::vector<std::string> ShardedOptimizer::slot_suffixes() const {
  if (setup_.kind == config::OptimizerName::adamw) return {".master", ".exp_avg", ".exp_avg_sq"};
  if (setup_.keeps_momentum()) return {".master", ".momentum"};
  return {".master"};
}

std::vector<std::string> ShardedOptimizer::state_kinds() const {
  std::vector<std::string> kinds;
  for (const auto& suffix : slot_suffixes())
    if (suffix != ".master") kinds.push_back(suffix.substr(1));
  return kinds;
}

void ShardedOptimizer::save_state_file(const std::string& path) {
  const std::filesystem::path p(path);
  DirectFileSink files(p.parent_path().string());
  save_state_file(files, p.filename().string());
}

void ShardedOptimizer::save_state_file(TensorFileSink& files, const std::string& file) {
  if (!spilled_) {
    files.write(file, state_tensors());
    return;
  }
  // Per unit: master, the moments, then the step (the order of state_tensors()).
  const auto suffixes = slot_suffixes();
  std::vector<TensorSpec> specs;
  std::vector<std::pair<size_t, int>> source;  // (unit, slot; -1 = step)
  for (size_t i = 0; i < units_.size(); ++i) {
    const UnitShardState& u = units_[i];
    for (size_t k = 0; k < suffixes.size(); ++k) {
      specs.push_back({u.unit + suffixes[k], at::kFloat, {u.layout.shard_numel()}});
      source.emplace_back(i, int(k));
    }
    specs.push_back({u.unit + ".step", at::kLong, step_shape()});
    source.emplace_back(i, -1);
  }
  at::Tensor cached;
  size_t cached_unit = SIZE_MAX;
  files.write_streamed(file, specs, [&](size_t t) {
    auto [i, k] = source[t];
    if (k < 0) return at::tensor(units_[i].step, at::kLong);
    if (cached_unit != i) {
      cached = nvme_->read(int(i));
      cached_unit = i;
    }
    const int64_t S = units_[i].layout.shard_numel();
    return cached.narrow(0, int64_t(k) * S, S);
  });
}

void ShardedOptimizer::load_state_file(const std::string& path) {
  if (!spilled_) {
    load_state(load_safetensors(path), path);
    return;
  }
  // Unit by unit, with load_state's checks: names, shapes and dtypes.
  SafetensorsReader reader(path);
  const auto suffixes = slot_suffixes();
  size_t expected = units_.size() * (suffixes.size() + 1);
  if (reader.tensors().size() != expected)
    throw RunError(path + ": " + std::to_string(reader.tensors().size()) + " optimizer tensors, this run expects " +
                   std::to_string(expected) + " (another optimizer or model?)");
  auto read = [&](const std::string& name, at::ScalarType dtype, std::vector<int64_t> shape) {
    const auto* info = reader.find(name);
    if (!info || info->dtype != dtype || info->shape != shape)
      throw RunError(path + ": tensor '" + name + "' is missing or has another shape or dtype");
    return reader.read(name);
  };
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitShardState& u = units_[i];
    const int64_t S = u.layout.shard_numel();
    for (size_t k = 0; k < suffixes.size(); ++k) nvme_->write(int(i), read(u.unit + suffixes[k], at::kFloat, {S}), int64_t(k) * S);
    u.step = read(u.unit + ".step", at::kLong, step_shape()).item<int64_t>();
  }
}

void ShardedOptimizer::visit_masters(const std::function<void(int, const at::Tensor&)>& fn) {
  if (!spilled_) {
    for (size_t i = 0; i < units_.size(); ++i) fn(int(i), units_[i].master);
    return;
  }
  nvme_->for_each_unit([&](int i, at::Tensor& buffer) { fn(i, buffer.narrow(0, 0, units_[size_t(i)].layout.shard_numel())); },
                       /*write_back=*/false);
}

void ShardedOptimizer::materialize() {
  if (!nvme_ || !spilled_) return;
  for (size_t i = 0; i < units_.size(); ++i) {
    auto slots = state_slots(units_[i]);
    at::Tensor all = nvme_->read(int(i));
    const int64_t S = units_[i].layout.shard_numel();
    for (size_t k = 0; k < slots.size(); ++k) *slots[k] = state_empty(S, at::kFloat).copy_(all.narrow(0, int64_t(k) * S, S));
  }
  spilled_ = false;
}

NamedTensors ShardedOptimizer::state_tensors() const {
  NamedTensors out;
  for (const auto& u : units_) {
    out.emplace_back(u.unit + ".master", u.master);
    if (u.exp_avg.defined()) {
      out.emplace_back(u.unit + ".exp_avg", u.exp_avg);
      out.emplace_back(u.unit + ".exp_avg_sq", u.exp_avg_sq);
    }
    if (u.momentum.defined()) out.emplace_back(u.unit + ".momentum", u.momentum);
    out.emplace_back(u.unit + ".step", at::tensor(u.step, at::kLong));
  }
  return out;
}

void ShardedOptimizer::load_state(const NamedTensors& state, const std::string& source) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  auto expected = state_tensors();
  if (by_name.size() != expected.size())
    throw RunError(source + ": " + std::to_string(by_name.size()) + " optimizer tensors, this run expects " +
                   std::to_string(expected.size()) + " (another optimizer or model?)");
  for (const auto& [name, t] : expected) {
    auto it = by_name.find(name);
    if (it == by_name.end() || !it->second.sizes().equals(t.sizes()) || it->second.scalar_type() != t.scalar_type())
      throw RunError(source + ": tensor '" + name + "' is missing or has another shape or dtype");
  }
  at::NoGradGuard no_grad;
  for (auto& u : units_) {
    u.master.copy_(by_name.at(u.unit + ".master"));
    if (u.exp_avg.defined()) {
      u.exp_avg.copy_(by_name.at(u.unit + ".exp_avg"));
      u.exp_avg_sq.copy_(by_name.at(u.unit + ".exp_avg_sq"));
    }
    if (u.momentum.defined()) u.momentum.copy_(by_name.at(u.unit + ".momentum"));
    u.step = by_name.at(u.unit + ".step").item<int64_t>();
  }
}

}  // namespace accel::engine
