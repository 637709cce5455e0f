// Dataset: the trainer's view of its data (spec/training.md, section Data). A token stream (llm.c token
// file, byte-level text, or the built-in synthetic stream) cut into windows of seq_len + 1 tokens; the
// first windows train, the last val_fraction of them are held out for evaluation; training windows are
// visited in the sequential or the seeded shuffled order (window_plan.hpp, sample_order.hpp).
// Invariants:
//  - Every batch is a pure function of its arguments and the data identity: there is no cursor, so a
//    checkpoint stores the step, and state()/check_state() guard against resuming on other data.
//  - A step's global batch, its rows concatenated in (micro-step, rank, row) order, is the same for
//    every split of W*B*G over world size, micro batch and accumulation.
//  - Held-out windows never appear in train_batch; val_batch sweeps exactly the held-out windows.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"
#include "trainer/data/data_identity.hpp"
#include "trainer/data/sample_order.hpp"
#include "trainer/data/token_store.hpp"
#include "trainer/data/window_plan.hpp"

namespace accel::train {

// Inputs and targets of one micro batch: int64 tensors [rows, seq_len] on the CPU; y is x shifted by one.
struct Batch {
  at::Tensor x;
  at::Tensor y;
};

class Dataset {
 public:
  // `tokens` must already be checked against the model's vocabulary (make_dataset does). Throws
  // DataError when there is no whole window, or no training window is left after the split.
  Dataset(TokenStore tokens, const config::DataSection& section, int seq_len, uint64_t seed);

  // Micro batch `micro_step` (of `accumulation`) of rank `rank` (of `world`) at optimizer step `step`:
  // row b is training window order.window(((step*G + micro_step)*W + rank)*B + b).
  Batch train_batch(int64_t step, int micro_step, int rank, int world, int micro_batch, int accumulation) const;
  // The window index behind one row of train_batch (for tests and logs).
  int64_t train_window(int64_t step, int micro_step, int rank, int world, int micro_batch, int accumulation,
                       int row) const;

  // Batch `index` of the validation sweep: held-out windows n_train + index*B .. n_train + index*B + B - 1,
  // cut at the last one, so batches 0 .. num_val_batches(B) - 1 cover every held-out window exactly once
  // (only the last may have fewer than B rows). DataError when there is no such batch.
  Batch val_batch(int64_t index, int batch_size) const;
  int64_t num_val_batches(int batch_size) const;

  // Rows for arbitrary windows (any k in [0, num_windows())): x[i] = tokens[k*T, k*T+T), y shifted by one.
  Batch windows(const std::vector<int64_t>& window_indices) const;

  int64_t num_train_windows() const { return split_.num_train; }
  int64_t num_val_windows() const { return split_.num_val; }
  int64_t num_windows() const { return split_.num_windows; }
  int64_t num_tokens() const { return tokens_.size(); }
  int seq_len() const { return seq_len_; }
  const TokenStore& tokens() const { return tokens_; }

  // One line: source, token count and hash, windows and split, order, and where the tokens came from.
  std::string describe() const;
  // How the tokens were made, for describe() (a text file's token cache: its path, built or found).
  void set_origin(std::string origin) { origin_ = std::move(origin); }

  // The data identity to store in a checkpoint, and the check on resume (DataError on a mismatch).
  nlohmann::json state() const { return identity_.to_json(); }
  void check_state(const nlohmann::json& saved) const;

 private:
  TokenStore tokens_;
  int seq_len_;
  WindowSplit split_;
  SampleOrder order_;
  DataIdentity identity_;
  std::string origin_;
};

// Loads the data of `section` (data.kind synthetic: seeded by `seed`, vocab_size tokens; text: bytes,
// vocab 256, or with data.tokenizer the token cache of trainer/text/token_cache.hpp, built by the
// first rank to get its lock; tokens: an llm.c file) and checks every token is below vocab_size. Paths are used as given
// (the config loader has already resolved them against the job file's directory).
std::unique_ptr<Dataset> make_dataset(const config::DataSection& section, int vocab_size, int seq_len, uint64_t seed);

}  // namespace accel::train
