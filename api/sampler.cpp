#include "accel/sampler.hpp"

#include <torch/serialize/archive.h>

#include <random>
#include <stdexcept>
#include <string>

namespace accel {

DistributedSampler::DistributedSampler(size_t size, int world_size, int rank, bool shuffle, uint64_t seed)
    : size_(size), world_size_(world_size), rank_(rank), shuffle_(shuffle), seed_(seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("accel::DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(world_size) + ")");
}

void DistributedSampler::reset(std::optional<size_t> new_size) {
  if (new_size) size_ = *new_size;
  ++epoch_;
  batch_ = 0;
  order_.clear();
  if (!shuffle_) return;
  // The same permutation on every rank: std::mt19937_64 and the Fisher-Yates shuffle below are
  // fully specified (std::shuffle's algorithm is not).
  order_.resize(size_);
  for (size_t i = 0; i < size_; ++i) order_[i] = int64_t(i);
  std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ULL + uint64_t(epoch_));
  for (size_t i = size_; i > 1; --i) std::swap(order_[i - 1], order_[size_t(gen() % i)]);
}

std::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (epoch_ < 0) reset();
  const size_t global = batch_size * size_t(world_size_);
  if (batch_size == 0 || (batch_ + 1) * global > size_) return std::nullopt;
  std::vector<size_t> rows(batch_size);
  const size_t first = (batch_ * size_t(world_size_) + size_t(rank_)) * batch_size;
  for (size_t j = 0; j < batch_size; ++j) rows[j] = shuffle_ ? size_t(order_[first + j]) : first + j;
  ++batch_;
  return rows;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("epoch", torch::tensor(epoch_, torch::kInt64), /*is_buffer=*/true);
  archive.write("batch", torch::tensor(int64_t(batch_), torch::kInt64), /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor epoch = torch::empty(1, torch::kInt64), batch = torch::empty(1, torch::kInt64);
  archive.read("epoch", epoch, /*is_buffer=*/true);
  archive.read("batch", batch, /*is_buffer=*/true);
  epoch_ = epoch.item<int64_t>() - 1;
  reset();  // rebuilds the epoch's order
  batch_ = size_t(batch.item<int64_t>());
}

}  // namespace accel
