// Evaluation loss on the held-out split (spec/training.md: eval_loss on evaluation steps).
// The mean token cross-entropy over every held-out window, in val_batch order; the batches are dealt
// round-robin over ranks (rank r takes batches r, r+W, ...; every rank runs the same number of
// forwards), and the token-weighted sums are all-reduced in fp64, so the value does not depend on
// the world size beyond rounding.
#pragma once

#include <optional>

#include "backends/backend.hpp"
#include "runtime/train/data/dataset.hpp"

namespace accel::train {

// Collective. Returns nullopt when the data has no held-out window (val_fraction 0).
std::optional<double> evaluate(Model& model, backends::Backend& backend, const Dataset& data, comm::Communicator& comm,
                               int batch_size);

}  // namespace accel::train
