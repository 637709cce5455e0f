// Evaluation loss on the held-out split (spec/training.md: eval_loss on evaluation steps).
// The mean token cross-entropy over every held-out window, in val_batch order; the batches are dealt
// round-robin over ranks (rank r takes batches r, r+W, ...; every rank runs the same number of
// forwards), and the token-weighted sums are all-reduced in fp64, so the value does not depend on
// the world size beyond rounding.
#pragma once

#include <optional>

#include "runtime/comm/communicator.hpp"
#include "runtime/common/progress.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/models/builtin_module.hpp"

namespace accel::train {

// Collective. `model` is prepared: a no-grad forward outside a micro-step runs under the engine's
// evaluation hooks (gather, release). Returns nullopt when the data has no held-out window
// (val_fraction 0). `progress`, when given, counts this rank's batches. `loss_chunk_tokens`: as
// BuiltinModule::loss (training.loss_chunk_tokens).
std::optional<double> evaluate(BuiltinModule& model, const Dataset& data, comm::Communicator& comm, int batch_size,
                               progress::Task* progress = nullptr, int64_t loss_chunk_tokens = 0);

}  // namespace accel::train
