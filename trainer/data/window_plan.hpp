// Windows, the validation split and the global sample index (spec/training.md, section Data), as pure
// arithmetic. With N tokens and sequence length T:
//   - window k covers tokens [k*T, k*T + T + 1): x is its first T tokens, y its last T;
//   - the whole windows are k = 0 .. n-1 with k*T + T + 1 <= N, so n = (N - 1) / T (integer division;
//     0 when N <= T); consecutive windows share one token (y's last is the next x's first);
//   - with val_fraction f > 0 the last n_val windows are held out for evaluation, where
//     n_val = ceil(f*n) computed in IEEE double (as Python's math.ceil(f * n); note 0.07*100 rounds to
//     7.000000000000001, so it holds out 8), at most n; f = 0 means n_val = 0;
//     training uses windows 0 .. n_train-1, n_train = n - n_val;
//   - row b of rank r at micro-step m of optimizer step s is global sample i = ((s*G + m)*W + r)*B + b.
//     A step's samples are the contiguous range [s*W*B*G, (s+1)*W*B*G) in (m, r, b) order whatever the
//     split of W*B*G, which is what makes the global batch independent of W, B and G.
// Invariant: these functions are total over valid arguments and never touch tokens.
#pragma once

#include <cstdint>

namespace accel::train {

struct WindowSplit {
  int64_t num_windows = 0;  // n
  int64_t num_train = 0;    // windows [0, num_train)
  int64_t num_val = 0;      // windows [num_train, num_windows)
};

int64_t num_whole_windows(int64_t num_tokens, int64_t seq_len);
WindowSplit split_windows(int64_t num_tokens, int64_t seq_len, double val_fraction);

// The global sample index of one row; throws DataError when an argument is out of range
// (step < 0, micro_step not in [0, G), rank not in [0, W), row not in [0, B)).
int64_t global_sample_index(int64_t step, int micro_step, int rank, int world, int micro_batch, int accumulation,
                            int row);

}  // namespace accel::train
