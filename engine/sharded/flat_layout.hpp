// The flat layout of one unit's parameters for the sharding engine (ZeRO / FSDP "flat parameter").
// Pure arithmetic, no tensors. The unit's parameters are laid end to end in spec order (numel N),
// padded with zeros to P = W * ceil(N / W) so every rank owns an equal shard of S = P / W elements:
// rank r owns [r*S, (r+1)*S). Padding is never a parameter: it stays zero in gathered buffers and
// its gradient is zero, so norms and updates are unaffected.
// Invariants: param offsets tile [0, N); segments(r) are the intersections of rank r's shard with
// the parameters, in order, and together with the other ranks' segments cover [0, N) exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accel::engine {

struct ShardSegment {
  int param = 0;             // index into the unit's parameter list
  int64_t param_offset = 0;  // first element within the parameter (flattened)
  int64_t shard_offset = 0;  // first element within the rank's shard
  int64_t numel = 0;
};

class FlatLayout {
 public:
  // numels: the unit's parameters in order; world >= 1.
  FlatLayout(std::vector<int64_t> numels, int world);

  int64_t numel() const { return numel_; }          // N
  int64_t padded_numel() const { return padded_; }  // P
  int64_t shard_numel() const { return shard_; }    // S
  int world() const { return world_; }
  int num_params() const { return int(numels_.size()); }
  int64_t param_offset(int i) const { return offsets_[size_t(i)]; }
  int64_t param_numel(int i) const { return numels_[size_t(i)]; }

  // The parameter pieces inside rank `rank`'s shard (padding excluded).
  std::vector<ShardSegment> segments(int rank) const;

 private:
  std::vector<int64_t> numels_, offsets_;
  int world_;
  int64_t numel_ = 0, padded_ = 0, shard_ = 0;
};

}  // namespace accel::engine
