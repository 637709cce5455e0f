// The one pseudo-random generator of accel's data layer: splitmix64 (Steele, Lea, Flood 2014), chosen
// because it is tiny and exactly reproducible in any language (tests/train/data/reference_data.py
// re-implements it). All arithmetic is modulo 2^64.
//   mix64(z):   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//               return z ^ (z >> 31)
//   stream_key(seed, tag, index) = mix64(mix64(seed + tag * 0x9E3779B97F4A7C15) + index)
//   SplitMix64(key).next():  state += 0x9E3779B97F4A7C15; return mix64(state)   (state starts at key,
//                            so the k-th output, k = 1, 2, ..., is mix64(key + k * 0x9E37...))
//   below(x, n) = floor(x * n / 2^64)  (the high 64 bits of the 128-bit product): a value in [0, n).
// Invariant: the output sequence depends only on (seed, tag, index); never on torch, the platform or
// the standard library. Tags separate the independent streams (see DataStreamTag).
#pragma once

#include <cstdint>

namespace accel::train {

// The streams drawn from one training seed. Values are part of the data format: never renumber.
enum class DataStreamTag : uint64_t {
  synthetic_successors = 1,  // the synthetic chain's successor table (index 0)
  synthetic_tokens = 2,      // the synthetic chain's token draws (index 0)
  shuffle_epoch = 3,         // the shuffled order's permutation of epoch e (index e)
};

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr uint64_t stream_key(uint64_t seed, DataStreamTag tag, uint64_t index) {
  return mix64(mix64(seed + static_cast<uint64_t>(tag) * kGoldenGamma) + index);
}

// floor(x * n / 2^64): maps a uniform 64-bit value onto [0, n).
constexpr uint64_t below(uint64_t x, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t key) : state_(key) {}
  constexpr uint64_t next() {
    state_ += kGoldenGamma;
    return mix64(state_);
  }
  // One draw mapped onto [0, n).
  constexpr uint64_t next_below(uint64_t n) { return below(next(), n); }

 private:
  uint64_t state_;
};

}  // namespace accel::train
