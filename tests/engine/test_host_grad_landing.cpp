// HostGradLanding's bookkeeping, on the CPU (the same code path a GPU runs, without the stream):
// landed shards reach their gradients only at settle(), a unit landing twice before settle()
// (gradient accumulation) keeps both contributions, and the staging buffers are reused. The
// asynchronous copies themselves need a GPU: tests/gpu/test_cuda_engine.py runs optimizer offload
// on one and compares it with the run without offload.
#include "tests/support/catch_with_torch.hpp"

#include "engine/sharded/host_grad_landing.hpp"

using accel::engine::HostGradLanding;

TEST_CASE("host grad landing: shards are added at settle, accumulation keeps every contribution", "[offload]") {
  HostGradLanding landing(at::kCPU);
  at::Tensor g0 = at::zeros({4}), g1 = at::zeros({3});
  at::Tensor r0 = at::arange(4, at::kFloat).to(at::kBFloat16);
  landing.land(0, r0, g0);
  landing.land(1, at::ones({3}, at::kBFloat16), g1);
  r0.fill_(100);  // the caller's buffer is reused at once: the landing holds its own copy
  CHECK(landing.pending());
  CHECK(at::equal(g0, at::zeros({4})));  // nothing added before settle
  landing.land(0, at::full({4}, 2.0, at::kBFloat16), g0);  // a second micro-step of unit 0
  landing.settle();
  CHECK_FALSE(landing.pending());
  CHECK(at::equal(g0, at::arange(4, at::kFloat) + 2));
  CHECK(at::equal(g1, at::ones({3})));
  CHECK(landing.staging_bytes() == (4 + 3) * 2);  // one bf16 buffer per unit, reused
  landing.settle();  // nothing pending: no change
  CHECK(at::equal(g1, at::ones({3})));
}
