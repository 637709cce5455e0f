#include "trainer/evaluation.hpp"

#include <ATen/core/grad_mode.h>

namespace accel::train {

std::optional<double> evaluate(BuiltinModule& model, const Dataset& data, comm::Communicator& comm, int batch_size,
                               progress::Task* progress, int64_t loss_chunk_tokens) {
  int64_t batches = data.num_val_batches(batch_size);
  if (batches == 0) return std::nullopt;
  at::NoGradGuard no_grad;
  double loss_sum = 0, tokens = 0;
  // Every rank runs the same number of forwards (a sharded backend gathers parameters in each):
  // a rank past the last batch repeats batch 0 with weight 0.
  int64_t rounds = (batches + comm.size() - 1) / comm.size();
  if (progress) progress->set_total(rounds, "batches");
  for (int64_t round = 0; round < rounds; ++round) {
    int64_t i = round * comm.size() + comm.rank();
    bool real = i < batches;
    Batch b = data.val_batch(real ? i : 0, batch_size);
    at::Tensor loss = model.loss(b.x.to(comm.device()), b.y.to(comm.device()), loss_chunk_tokens);
    double n = real ? double(b.y.numel()) : 0.0;
    loss_sum += loss.item<double>() * n;
    tokens += n;
    if (progress) progress->advance();
  }
  const std::vector<double> sums = comm::all_reduce_values(comm, {loss_sum, tokens}, comm::ReduceOp::Sum);
  return sums[0] / sums[1];
}

}  // namespace accel::train
