// The order of training windows: see sample_order.hpp for the exact definition.
#include "trainer/data/sample_order.hpp"

#include <numeric>
#include <string>

#include "trainer/data/data_error.hpp"
#include "trainer/data/splitmix.hpp"

namespace accel::train {

std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n < 0 ? 0 : n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  SplitMix64 rng(stream_key(seed, DataStreamTag::shuffle_epoch, static_cast<uint64_t>(epoch)));
  for (int64_t j = n - 1; j >= 1; --j) {
    const auto k = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(j) + 1));
    std::swap(perm[j], perm[k]);
  }
  return perm;
}

SampleOrder::SampleOrder(config::DataOrder order, int64_t num_train, uint64_t seed)
    : order_(order), num_train_(num_train), seed_(seed) {
  if (num_train < 1) throw DataError("sample order: no training windows");
}

int64_t SampleOrder::window(int64_t sample) const {
  if (sample < 0) throw DataError("sample order: negative sample index " + std::to_string(sample));
  const int64_t position = sample % num_train_;
  if (order_ == config::DataOrder::sequential) return position;
  return (*permutation(sample / num_train_))[static_cast<size_t>(position)];
}

std::shared_ptr<const std::vector<int64_t>> SampleOrder::permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [e, perm] : cache_)
    if (e == epoch) return perm;
  auto perm = std::make_shared<const std::vector<int64_t>>(epoch_permutation(seed_, epoch, num_train_));
  if (cache_.size() >= 2) cache_.erase(cache_.begin());
  cache_.emplace_back(epoch, perm);
  return perm;
}

}  // namespace accel::train
