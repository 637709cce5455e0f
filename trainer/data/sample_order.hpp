// The order in which training windows are visited: maps a global sample index i (window_plan.hpp)
// to a training window in [0, n_train).
//   sequential (the reference order):  window = i mod n_train
//   shuffled:  epoch e = i / n_train, position p = i mod n_train, window = perm_e[p], where
//     perm_e = epoch_permutation(seed, e, n_train) is a Fisher-Yates shuffle driven by splitmix64
//     (splitmix.hpp): perm = [0, 1, ..., n-1]; rng = SplitMix64(stream_key(seed, shuffle_epoch = 3, e));
//     for j = n-1 down to 1: k = rng.next_below(j + 1); swap(perm[j], perm[k]).
// Invariant: within an epoch every training window is visited exactly once; the order depends only
// on (order, n_train, seed), never on how samples are split over ranks, micro batches or micro-steps.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/config/enums.hpp"

namespace accel::train {

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

class SampleOrder {
 public:
  SampleOrder(config::DataOrder order, int64_t num_train, uint64_t seed);

  // The training window of global sample `sample` (>= 0). Thread-safe.
  int64_t window(int64_t sample) const;

  config::DataOrder order() const { return order_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

  config::DataOrder order_;
  int64_t num_train_;
  uint64_t seed_;
  // The permutations of the last two epochs used (a step may straddle an epoch boundary).
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace accel::train
