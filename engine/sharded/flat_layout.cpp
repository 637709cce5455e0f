#include "engine/sharded/flat_layout.hpp"

#include <algorithm>
#include <stdexcept>

namespace accel::engine {

FlatLayout::FlatLayout(std::vector<int64_t> numels, int world) : numels_(std::move(numels)), world_(world) {
  if (world < 1) throw std::invalid_argument("FlatLayout: world must be >= 1");
  for (int64_t n : numels_) {
    if (n < 0) throw std::invalid_argument("FlatLayout: negative numel");
    offsets_.push_back(numel_);
    numel_ += n;
  }
  shard_ = (numel_ + world - 1) / world;
  padded_ = shard_ * world;
}

std::vector<ShardSegment> FlatLayout::segments(int rank) const {
  if (rank < 0 || rank >= world_) throw std::invalid_argument("FlatLayout: rank out of range");
  int64_t begin = int64_t(rank) * shard_, end = begin + shard_;
  std::vector<ShardSegment> out;
  for (size_t i = 0; i < numels_.size(); ++i) {
    int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + numels_[i]);
    if (lo < hi) out.push_back({int(i), lo - offsets_[i], lo - begin, hi - lo});
  }
  return out;
}

}  // namespace accel::engine
