// Reslicing arithmetic (see reslice.hpp).
#include "engine/format/reslice.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace accel::engine {

std::vector<ShardPiece> locate_flat_range(const FlatLayout& layout, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > layout.numel())
    throw std::invalid_argument("locate_flat_range: [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                                ") is outside the unit's " + std::to_string(layout.numel()) + " elements");
  std::vector<ShardPiece> out;
  const int64_t S = layout.shard_numel();
  for (int64_t i = begin, end = begin + count; i < end;) {
    const int rank = int(i / S);
    const int64_t offset = i % S, n = std::min(end - i, S - offset);
    out.push_back({rank, offset, i - begin, n});
    i += n;
  }
  return out;
}

}  // namespace accel::engine
