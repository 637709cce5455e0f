// Helpers for the data tests: a DataSection in one line, datasets over counting tokens (token i has
// value i, so a row's first x token divided by T names its window), and the Python reference runner.
#pragma once

#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "tests/support/run_command.hpp"
#include "trainer/data/dataset.hpp"

namespace accel::test {

inline config::DataSection data_section(config::DataKind kind, std::string path = "",
                                        config::DataOrder order = config::DataOrder::sequential,
                                        double val_fraction = 0.0) {
  config::DataSection s;
  s.kind = kind;
  s.path = std::move(path);
  s.order = order;
  s.val_fraction = val_fraction;
  return s;
}

inline std::vector<uint16_t> counting_tokens(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), uint16_t{0});
  return t;
}

// A dataset over tokens 0 .. n-1 (n <= 65536), as if read from a token file.
inline train::Dataset counting_dataset(int64_t n, int seq_len, double val_fraction = 0.0,
                                       config::DataOrder order = config::DataOrder::sequential,
                                       uint64_t seed = 1337) {
  return train::Dataset(train::TokenStore::owned(counting_tokens(n)),
                        data_section(config::DataKind::tokens, "counting.bin", order, val_fraction), seq_len, seed);
}

// The window of every row of a counting dataset's batch (x[r][0] / T), checking x and y are that window.
inline std::vector<int64_t> windows_of(const train::Batch& batch) {
  std::vector<int64_t> ks;
  const int64_t T = batch.x.size(1);
  for (int64_t r = 0; r < batch.x.size(0); ++r) {
    const int64_t first = batch.x[r][0].item<int64_t>();
    const bool whole = first % T == 0 &&
                       batch.x[r].equal(at::arange(first, first + T, at::kLong)) &&
                       batch.y[r].equal(at::arange(first + 1, first + T + 1, at::kLong));
    ks.push_back(whole ? first / T : -1);
  }
  return ks;
}

inline const char* kPython = ACCEL_TEST_PYTHON;

// Runs tests/train/data/reference_data.py with `args`; exit_code -1 when Python is missing.
inline CommandResult run_reference(const std::string& args) {
  if (!std::ifstream(kPython)) return {};
  // Appended piece by piece: GCC 12 misreads `std::string(literal) + ...` chains of long literals as
  // copies past a string's end (-Warray-bounds).
  std::string script = ACCEL_SOURCE_DIR;
  script.append("/tests/train/data/reference_data.py");
  std::string command = kPython;
  command.append(" ").append(shell_quote(script)).append(" ").append(args);
  return run_command(command);
}

}  // namespace accel::test
