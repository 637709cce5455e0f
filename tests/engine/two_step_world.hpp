// Two training steps of the built-in model on a world of two in-process ranks (FakeWorld threads),
// for tests that read what the engine reports afterwards: each rank trains its own token rows, both
// drain their queues, and `on_rank0` sees rank 0's engine and model before the world is torn down.
#pragma once

#include <functional>
#include <memory>

#include "engine/backend.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/catch_with_torch.hpp"
#include "tests/support/prepared_builtin.hpp"
#include "trainer/models/builtin_optimizer.hpp"

namespace accel::test {

// Token rows [rows, 8] over the tiny job's 32 ids, a different batch per offset.
inline at::Tensor token_rows(int rows, int offset) {
  return (at::arange(int64_t(rows) * 8, at::kLong).view({rows, 8}) * 3 + offset) % 32;
}

// `wrap` may put a communicator in front of each rank's (nullptr: the plain one).
inline void train_two_steps_on_two_ranks(
    const config::JobConfig& job, const std::function<void(engine::Backend&, PreparedBuiltin&)>& on_rank0,
    const std::function<std::unique_ptr<comm::Communicator>(std::unique_ptr<comm::Communicator>)>& wrap = nullptr) {
  comm::FakeWorld fake(2);
  auto errors = run_ranks(
      2, [&](int r) -> std::unique_ptr<comm::Communicator> { return wrap ? wrap(fake.communicator(r)) : fake.communicator(r); },
      [&](comm::Communicator& comm) {
        const plan::ResolvedPlan resolved = plan::resolve_plan(job);
        PreparedBuiltin model(job, builtin_module(job.model, 3), [&](std::vector<engine::UnitSpec> specs) {
          return engine::make_backend(resolved, comm, std::move(specs), engine::builtin_optimizer_setup(job.optimizer));
        });
        auto& engine = model.engine();
        for (int step = 0; step < 2; ++step) {
          auto* hooks = engine.begin_micro_step(0, true);
          model.loss(model.forward(token_rows(2, comm.rank() + step), hooks), token_rows(2, comm.rank() + step + 1)).backward();
          engine.end_micro_step(true);
          engine.optimizer_step(1e-3);
        }
        // Both ranks drain their queues (a prefetch of the next step may still be in flight) before
        // either tears its communicator down, so no rank waits on a peer that has left.
        comm.barrier()->wait();
        if (comm.rank() == 0) on_rank0(engine, model);
      });
  REQUIRE(errors == no_errors(2));
}

}  // namespace accel::test
