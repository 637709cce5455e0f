// DataIdentity: what a checkpoint records about its data. Batches are pure functions of (step,
// micro-step, rank, ...) and of this identity, so a checkpoint stores the step plus this record, and
// resuming checks that the data would produce the same batches.
// Fields: kind, path (informational: a moved file with the same content is the same data), num_tokens,
// content_fnv1a64 (token_store.hpp, as "0x" + 16 hex digits), order, seed, val_fraction, seq_len.
// Invariant: check_same_data refuses exactly the differences that change some batch: kind, token count,
// content hash, order, seq_len, val_fraction, and the seed when the order is shuffled (a synthetic
// stream's seed is already in its content hash; sequential file data does not depend on the seed).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace accel::train {

struct DataIdentity {
  std::string kind;   // synthetic | text | tokens
  std::string path;   // empty for synthetic
  int64_t num_tokens = 0;
  uint64_t content_hash = 0;
  std::string order;  // sequential | shuffled
  uint64_t seed = 0;
  double val_fraction = 0;
  int64_t seq_len = 0;

  nlohmann::json to_json() const;
  // Throws DataError naming the missing or mistyped field.
  static DataIdentity from_json(const nlohmann::json& state);
};

// Throws DataError listing every batch-changing difference between a checkpoint's data (`saved`) and
// this run's (`now`), with the fix.
void check_same_data(const DataIdentity& saved, const DataIdentity& now);

}  // namespace accel::train
