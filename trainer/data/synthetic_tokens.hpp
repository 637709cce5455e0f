// The built-in synthetic token stream (data.kind: synthetic): no file, deterministic from the seed,
// learnable (a small GPT's loss visibly falls within ~50 steps). tests/train/data/reference_data.py
// reproduces it exactly. Definition, with splitmix64, stream_key and below() from splitmix.hpp,
// V = vocab_size, K = 4 successors, N = 2^20 tokens:
//   1. Successor table: rng = SplitMix64(stream_key(seed, synthetic_successors = 1, 0));
//      for t in 0..V-1, for j in 0..K-1: succ[t][j] = rng.next_below(V)   (duplicates allowed).
//   2. Tokens: rng = SplitMix64(stream_key(seed, synthetic_tokens = 2, 0)); for i in 0..N-1 draw
//      exactly two values a = rng.next(), b = rng.next(); then
//        if i > 0 and below(a, 8) < 7:  tok[i] = succ[tok[i-1]][below(b, K)]   (a preferred successor)
//        else:                          tok[i] = below(b, V)                    (uniform noise)
// So each token follows its predecessor with one of 4 fixed successors with probability 7/8 and is
// uniform otherwise: for V = 256 the conditional entropy is about 2.2 nats against ln 256 = 5.55.
// Invariant: the stream depends only on (seed, vocab_size, count); it is identical on every machine.
#pragma once

#include <cstdint>
#include <vector>

namespace accel::train {

constexpr int64_t kSyntheticTokens = int64_t{1} << 20;
constexpr int kSyntheticSuccessors = 4;
constexpr int kSyntheticFollowNumerator = 7;    // follow a preferred successor with probability 7/8
constexpr int kSyntheticFollowDenominator = 8;

// The first `count` tokens of the stream for (seed, vocab_size); vocab_size in [1, 65536] (tokens are
// uint16), else DataError. A shorter count is a prefix of a longer one.
std::vector<uint16_t> synthetic_tokens(uint64_t seed, int64_t vocab_size, int64_t count = kSyntheticTokens);

}  // namespace accel::train
