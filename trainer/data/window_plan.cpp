// Windows, split and global sample index: see window_plan.hpp.
#include "trainer/data/window_plan.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "trainer/data/data_error.hpp"

namespace accel::train {

int64_t num_whole_windows(int64_t num_tokens, int64_t seq_len) {
  if (seq_len < 1 || num_tokens <= seq_len) return 0;
  return (num_tokens - 1) / seq_len;
}

WindowSplit split_windows(int64_t num_tokens, int64_t seq_len, double val_fraction) {
  WindowSplit s;
  s.num_windows = num_whole_windows(num_tokens, seq_len);
  if (val_fraction > 0 && s.num_windows > 0) {
    const auto held = static_cast<int64_t>(std::ceil(val_fraction * static_cast<double>(s.num_windows)));
    s.num_val = std::clamp<int64_t>(held, 1, s.num_windows);
  }
  s.num_train = s.num_windows - s.num_val;
  return s;
}

int64_t global_sample_index(int64_t step, int micro_step, int rank, int world, int micro_batch, int accumulation,
                            int row) {
  auto bad = [](const std::string& what) { throw DataError("train batch: " + what); };
  if (world < 1 || micro_batch < 1 || accumulation < 1)
    bad("world, micro_batch and accumulation must be >= 1 (got " + std::to_string(world) + ", " +
        std::to_string(micro_batch) + ", " + std::to_string(accumulation) + ")");
  if (step < 0) bad("step " + std::to_string(step) + " is negative");
  if (micro_step < 0 || micro_step >= accumulation)
    bad("micro_step " + std::to_string(micro_step) + " is outside [0, " + std::to_string(accumulation) + ")");
  if (rank < 0 || rank >= world)
    bad("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  if (row < 0 || row >= micro_batch)
    bad("row " + std::to_string(row) + " is outside [0, " + std::to_string(micro_batch) + ")");
  return ((step * accumulation + micro_step) * world + rank) * static_cast<int64_t>(micro_batch) + row;
}

}  // namespace accel::train
