// The synthetic token stream: see synthetic_tokens.hpp for the exact definition.
#include "trainer/data/synthetic_tokens.hpp"

#include <string>

#include "trainer/data/data_error.hpp"
#include "trainer/data/splitmix.hpp"

namespace accel::train {

std::vector<uint16_t> synthetic_tokens(uint64_t seed, int64_t vocab_size, int64_t count) {
  if (vocab_size < 1 || vocab_size > 65536)
    throw DataError("synthetic data: model.vocab_size " + std::to_string(vocab_size) +
                    " is outside [1, 65536] (tokens are uint16); use a smaller vocabulary");
  if (count < 0) throw DataError("synthetic data: negative token count " + std::to_string(count));
  const auto V = static_cast<uint64_t>(vocab_size);
  constexpr uint64_t K = kSyntheticSuccessors;

  std::vector<uint16_t> succ(V * K);
  SplitMix64 table(stream_key(seed, DataStreamTag::synthetic_successors, 0));
  for (auto& s : succ) s = static_cast<uint16_t>(table.next_below(V));

  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  SplitMix64 rng(stream_key(seed, DataStreamTag::synthetic_tokens, 0));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint64_t a = rng.next();
    const uint64_t b = rng.next();
    if (i > 0 && below(a, kSyntheticFollowDenominator) < kSyntheticFollowNumerator)
      tokens[i] = succ[tokens[i - 1] * K + below(b, K)];
    else
      tokens[i] = static_cast<uint16_t>(below(b, V));
  }
  return tokens;
}

}  // namespace accel::train
