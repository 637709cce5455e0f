// Where a range of a unit's flat buffer lives among the ranks' shards: the arithmetic that lets a
// checkpoint written at one world size be read at another (docs/design/0006). Pure, no tensors.
// With a layout of world W (shard S, flat_layout.hpp), flat element i lives in rank i / S's shard
// at offset i % S; a range [begin, begin + count) of real elements (below N, never padding) is
// therefore a run of consecutive pieces, one per rank it touches.
// Invariants: the pieces are in flat order, their dest_offsets tile [0, count) and each lies
// inside one rank's [0, S). Rank r of a new layout is rebuilt by locating each of its segments
// (FlatLayout::segments) in the old layout: that covers every real element of the new shard once
// and never reads or writes padding.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sharded/flat_layout.hpp"

namespace accel::engine {

struct ShardPiece {
  int rank = 0;              // whose shard holds it
  int64_t shard_offset = 0;  // first element within that shard
  int64_t dest_offset = 0;   // first element within the requested range
  int64_t numel = 0;
};

// The pieces of the shards of `layout` holding flat elements [begin, begin + count).
// std::invalid_argument when the range leaves [0, numel()) (padding is never read).
std::vector<ShardPiece> locate_flat_range(const FlatLayout& layout, int64_t begin, int64_t count);

}  // namespace accel::engine
