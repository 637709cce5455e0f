// DataError: the job was valid but its data cannot be used (a corrupt or truncated token file, a token
// outside the model's vocabulary, too few tokens for one window, a resume on different data).
// Invariant: every message names the file (or "synthetic data") and says how to fix the problem.
// It is a RunError, so cli/main.cpp maps it to exit code 1.
#pragma once

#include "runtime/common/errors.hpp"

namespace accel::train {

class DataError : public RunError {
 public:
  using RunError::RunError;
};

}  // namespace accel::train
