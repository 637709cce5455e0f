// Dataset and make_dataset: see dataset.hpp.
#include "trainer/data/dataset.hpp"

#include <algorithm>
#include <sstream>

#include "trainer/data/data_error.hpp"
#include "trainer/data/synthetic_tokens.hpp"
#include "trainer/data/text_tokens.hpp"
#include "trainer/data/token_file.hpp"
#include "trainer/text/token_cache.hpp"

namespace accel::train {

namespace {

std::string source_name(const config::DataSection& section) {
  if (section.kind == config::DataKind::synthetic) return "synthetic data";
  return config::to_string(section.kind) + " file '" + section.path + "'";
}

WindowSplit checked_split(const TokenStore& tokens, const config::DataSection& section, int seq_len) {
  const std::string source = source_name(section);
  if (seq_len < 1) throw DataError(source + ": training.seq_len " + std::to_string(seq_len) + " must be >= 1");
  if (section.val_fraction < 0 || section.val_fraction >= 1)
    throw DataError(source + ": data.val_fraction " + std::to_string(section.val_fraction) + " is outside [0, 1)");
  const WindowSplit split = split_windows(tokens.size(), seq_len, section.val_fraction);
  if (split.num_windows == 0)
    throw DataError(source + ": " + std::to_string(tokens.size()) + " tokens, fewer than seq_len + 1 = " +
                    std::to_string(seq_len + 1) + ", so not one whole window; use more data or a shorter "
                    "training.seq_len");
  if (split.num_train == 0)
    throw DataError(source + ": only " + std::to_string(split.num_windows) + " window(s) of seq_len " +
                    std::to_string(seq_len) + " and data.val_fraction holds out all of them; lower "
                    "data.val_fraction or training.seq_len, or use more data");
  return split;
}

// The token cache of a text file with a tokenizer (trainer/text/token_cache.hpp): built by the first
// rank (or run) to get its lock, found by every other.
text::TokenCache tokenized_text(const config::DataSection& section) {
  return text::ensure_token_cache(text::token_cache_request(section));
}

}  // namespace

Dataset::Dataset(TokenStore tokens, const config::DataSection& section, int seq_len, uint64_t seed)
    : tokens_(std::move(tokens)),
      seq_len_(seq_len),
      split_(checked_split(tokens_, section, seq_len)),
      order_(section.order, split_.num_train, seed) {
  identity_.kind = config::to_string(section.kind);
  identity_.path = section.kind == config::DataKind::synthetic ? "" : section.path;
  identity_.num_tokens = tokens_.size();
  identity_.content_hash = tokens_.fnv1a64();
  identity_.order = config::to_string(section.order);
  identity_.seed = seed;
  identity_.val_fraction = section.val_fraction;
  identity_.seq_len = seq_len;
}

int64_t Dataset::train_window(int64_t step, int micro_step, int rank, int world, int micro_batch, int accumulation,
                              int row) const {
  return order_.window(global_sample_index(step, micro_step, rank, world, micro_batch, accumulation, row));
}

Batch Dataset::train_batch(int64_t step, int micro_step, int rank, int world, int micro_batch,
                           int accumulation) const {
  std::vector<int64_t> ks(static_cast<size_t>(std::max(micro_batch, 0)));
  for (int b = 0; b < micro_batch; ++b)
    ks[b] = train_window(step, micro_step, rank, world, micro_batch, accumulation, b);
  if (ks.empty()) global_sample_index(step, micro_step, rank, world, micro_batch, accumulation, 0);  // throws
  return windows(ks);
}

int64_t Dataset::num_val_batches(int batch_size) const {
  if (batch_size < 1) throw DataError("validation batch: batch_size " + std::to_string(batch_size) + " must be >= 1");
  return (split_.num_val + batch_size - 1) / batch_size;
}

Batch Dataset::val_batch(int64_t index, int batch_size) const {
  const int64_t count = num_val_batches(batch_size);
  if (index < 0 || index >= count)
    throw DataError("validation batch " + std::to_string(index) + " does not exist: " +
                    std::to_string(split_.num_val) + " held-out windows make " + std::to_string(count) +
                    " batches of " + std::to_string(batch_size) +
                    (split_.num_val == 0 ? " (data.val_fraction is 0: evaluation is off)" : ""));
  const int64_t first = index * batch_size;
  const int64_t rows = std::min<int64_t>(batch_size, split_.num_val - first);
  std::vector<int64_t> ks(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) ks[b] = split_.num_train + first + b;
  return windows(ks);
}

Batch Dataset::windows(const std::vector<int64_t>& window_indices) const {
  const auto rows = static_cast<int64_t>(window_indices.size());
  const int64_t T = seq_len_;
  Batch batch{at::empty({rows, T}, at::kLong), at::empty({rows, T}, at::kLong)};
  int64_t* x = batch.x.data_ptr<int64_t>();
  int64_t* y = batch.y.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = window_indices[r];
    if (k < 0 || k >= split_.num_windows)
      throw DataError("window " + std::to_string(k) + " is outside [0, " + std::to_string(split_.num_windows) + ")");
    for (int64_t t = 0; t < T; ++t) {
      x[r * T + t] = tokens_[k * T + t];
      y[r * T + t] = tokens_[k * T + t + 1];
    }
  }
  return batch;
}

std::string Dataset::describe() const {
  std::ostringstream s;
  if (identity_.kind == "synthetic")
    s << "synthetic data (seed " << identity_.seed << ")";
  else
    s << identity_.kind << " file '" << identity_.path << "'";
  s << ": " << num_tokens() << " tokens (fnv1a64 " << hex64(identity_.content_hash) << "); seq_len " << seq_len_
    << ": " << split_.num_windows << " windows, " << split_.num_train << " train + " << split_.num_val
    << " validation (val_fraction " << identity_.val_fraction << "); order " << identity_.order;
  if (order_.order() == config::DataOrder::shuffled) s << " (seed " << identity_.seed << ")";
  if (!origin_.empty()) s << "; " << origin_;
  return s.str();
}

void Dataset::check_state(const nlohmann::json& saved) const {
  check_same_data(DataIdentity::from_json(saved), identity_);
}

std::unique_ptr<Dataset> make_dataset(const config::DataSection& section, int vocab_size, int seq_len,
                                      uint64_t seed) {
  TokenStore tokens;
  std::string origin;
  switch (section.kind) {
    case config::DataKind::synthetic:
      tokens = TokenStore::owned(synthetic_tokens(seed, vocab_size));
      break;
    case config::DataKind::text:
      if (!section.tokenizer.empty()) {
        const text::TokenCache cache = tokenized_text(section);
        tokens = read_token_file(cache.path, 0);
        origin = "tokenized by '" + section.tokenizer + "' into " + cache.path +
                 (cache.built ? " (built here from " + std::to_string(cache.documents) + " documents)" : " (found)");
      } else {
        tokens = read_text_tokens(section.path);
      }
      check_vocabulary(tokens, vocab_size, source_name(section));
      break;
    case config::DataKind::tokens:
      tokens = read_token_file(section.path, vocab_size);
      break;
  }
  auto dataset = std::make_unique<Dataset>(std::move(tokens), section, seq_len, seed);
  dataset->set_origin(std::move(origin));
  return dataset;
}

}  // namespace accel::train
