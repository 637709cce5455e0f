// accel::DistributedSampler: which rows of a dataset this rank reads, for torch::data's loaders.
// Batch k of an epoch is the k-th global batch of world x batch_size rows: rank r reads rows
// [(k*world + r) * batch_size, +batch_size) of the epoch's order (0..size-1, or a permutation of it
// seeded by (seed, epoch) and the same on every rank). So the rows of a global batch do not depend
// on how it is split across ranks: world 2 with batches of 4 reads what world 1 reads with 8.
// A tail of fewer than world x batch_size rows is dropped, on every rank alike.
// Only torch and the standard library.
#pragma once

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace accel {

class DistributedSampler final : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  DistributedSampler(size_t size, int world_size, int rank, bool shuffle = false, uint64_t seed = 0);

  // Starts the next epoch (torch's loaders call it when an iteration begins): epochs count from 0.
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  // The next batch_size rows of this rank, or nullopt at the end of the epoch.
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  int64_t epoch() const { return epoch_; }

 private:
  size_t size_;
  int world_size_, rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;  // reset() before the first epoch makes it 0
  size_t batch_ = 0;    // batches handed out in this epoch
  std::vector<int64_t> order_;
};

}  // namespace accel
