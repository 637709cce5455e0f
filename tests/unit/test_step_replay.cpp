// The micro-step replay behind the memory estimate's peak (runtime/estimate/step_replay.hpp), on
// small models worked by hand: DeepSpeed's prefetch window and its live bound, FSDP's one unit
// ahead, gathering on demand, the reduce bucket, the kept units, and the fullest moment at the
// embedding's backward. tests/engine/test_step_replay.cpp holds the same replay to the engine's
// own report on a real step.
#include <catch2/catch.hpp>

#include "runtime/estimate/step_replay.hpp"

using namespace accel;
using namespace accel::estimate;

namespace {

constexpr int64_t kBlock = 8;  // values per layer unit; the token unit holds 10

// A token unit (the embedding, kept gathered) and `blocks` layer units, fp32, two shards (no
// padding: every size is even).
StepInput model(int blocks) {
  StepInput in;
  in.unit_numels = {10};
  for (int b = 0; b < blocks; ++b) in.unit_numels.push_back(kBlock);
  in.token_unit = 0;
  in.shards = 2;
  in.compute_bytes = 4;
  return in;
}

plan::ResolvedPlan zero3(int64_t prefetch_bucket, int64_t max_live) {
  plan::ResolvedPlan p;
  p.shards = plan::Shards::parameters;
  p.overlap_comm = true;
  p.prefetch.forward = prefetch_bucket > 0;
  p.prefetch.backward = prefetch_bucket > 0 ? plan::PrefetchPolicy::Backward::pre : plan::PrefetchPolicy::Backward::none;
  p.prefetch.max_prefetch_units = 1 << 30;
  p.prefetch.max_prefetch_numel = prefetch_bucket;
  p.prefetch.max_live_numel = max_live;
  return p;
}

plan::ResolvedPlan full_shard(bool limit_all_gathers) {
  plan::ResolvedPlan p;
  p.shards = plan::Shards::parameters;
  p.overlap_comm = true;
  p.prefetch.forward = true;
  p.prefetch.backward = plan::PrefetchPolicy::Backward::pre;
  p.prefetch.max_prefetch_units = 1;
  p.prefetch.max_live_units = limit_all_gathers ? 2 : 0;
  return p;
}

constexpr int64_t kHuge = 1'000'000'000;

}  // namespace

TEST_CASE("step replay: DeepSpeed's prefetch window grows past its bucket until max_live stops it", "[estimate][replay]") {
  // Bucket of 3 blocks: at h.1 the gathers of h.2-h.4 are issued; at h.2 those are in flight and
  // passed over, so h.5 and h.6 are issued too: five blocks gathered at once.
  const StepInput in = model(6);
  CHECK(replay_step(zero3(3 * kBlock, kHuge), in, kHuge).gathered_peak == 5 * kBlock * 4);
  // stage3_max_live_parameters of 4 blocks: h.6 waits.
  CHECK(replay_step(zero3(3 * kBlock, 4 * kBlock), in, kHuge).gathered_peak == 4 * kBlock * 4);
  // Prefetch off: each unit is gathered when it computes, and freed after.
  CHECK(replay_step(zero3(0, kHuge), in, kHuge).gathered_peak == kBlock * 4);
}

TEST_CASE("step replay: FSDP reaches one unit ahead; limit_all_gathers holds two", "[estimate][replay]") {
  const StepInput in = model(5);
  CHECK(replay_step(full_shard(true), in, kHuge).gathered_peak == 2 * kBlock * 4);
  CHECK(replay_step(full_shard(false), in, kHuge).gathered_peak == 2 * kBlock * 4);
}

TEST_CASE("step replay: gradient buffers stay within the reduce bucket beside the token unit's", "[estimate][replay]") {
  const StepInput in = model(4);
  // A bucket above the model: every unit's buffer waits until backward ends.
  CHECK(replay_step(zero3(0, kHuge), in, kHuge).grad_buffers_peak == (10 + 4 * kBlock) * 4);
  // A bucket of one block: one layer's buffer at a time, beside the token unit's.
  CHECK(replay_step(zero3(0, kHuge), in, kBlock).grad_buffers_peak == (10 + kBlock) * 4);
  // The token unit's buffer counts against the bucket too (it waits through the whole backward):
  // two blocks fit beside it only in a bucket of both and it.
  CHECK(replay_step(zero3(0, kHuge), in, 2 * kBlock).grad_buffers_peak == (10 + kBlock) * 4);
  CHECK(replay_step(zero3(0, kHuge), in, 10 + 2 * kBlock).grad_buffers_peak == (10 + 2 * kBlock) * 4);
}

TEST_CASE("step replay: kept units are the token unit, persistent units, and every unit below stage 3", "[estimate][replay]") {
  StepInput in = model(2);
  in.unit_numels[2] = 4;  // h.1 under the persistence threshold below
  plan::ResolvedPlan p = zero3(0, kHuge);
  p.persistence_threshold = 5;
  CHECK(kept_units(p, in) == std::vector<bool>{true, false, true});
  const StepReplay r = replay_step(p, in, kHuge);
  CHECK(r.kept == (10 + 4) * 4);
  CHECK(r.kept_numel == 14);
  CHECK(r.gathered_peak == kBlock * 4);  // h.0 alone: h.1 stays gathered, counted as kept
  p.shards = plan::Shards::gradients;
  CHECK(kept_units(p, in) == std::vector<bool>{true, true, true});
  CHECK(replay_step(p, in, kHuge).gathered_peak == 0);
}

TEST_CASE("step replay: the fullest moment is the embedding's backward, with the tied matrix three times", "[estimate][replay]") {
  StepInput in = model(3);
  in.tied_weight_numel = 6;  // V x C inside the token unit's 10 values
  in.unit_activation_bytes = {0, 1, 1, 1};
  in.head_activation_bytes = 2;
  // Prefetch off, a bucket above the model: at the embedding's backward every layer is freed,
  // every buffer (token unit's and layers') waits with its reduce-scatter output (a shard each, the
  // token unit's not issued yet), the activations are gone, and autograd holds the head's
  // gradient of the tied matrix, the embedding's and their sum. The activations are freed, but their
  // pages stay with the allocator: the most they took (3 layers and the head). Of the blocks freed in the step,
  // one layer's gathered block waits in the allocator's cache (each layer's gradient buffer
  // reuses the block the layer before freed, the last one's is left). nvme offload trims the
  // cache between steps, so the second step starts as the first did.
  plan::ResolvedPlan p = zero3(0, kHuge);
  p.optimizer_states = plan::Where::nvme;
  const StepReplay r = replay_step(p, in, kHuge);
  CHECK(r.peak_when == "the embedding's backward");
  CHECK(r.peak_gathered == 0);
  CHECK(r.peak_grad_buffers == (10 + 3 * kBlock) * 4);
  CHECK(r.peak_reduce_outputs == 3 * (kBlock / 2) * 4);
  CHECK(r.peak_tied_grads == 3 * 6 * 4);
  CHECK(r.peak_activations == 3 + 2);
  CHECK(r.peak_cached == kBlock * 4);
  CHECK(r.peak == r.peak_grad_buffers + r.peak_reduce_outputs + r.peak_tied_grads + r.peak_activations + r.peak_cached);
  // Without the trims the blocks the first step's reductions freed are still cached in the
  // second (at most 8 of them).
  const StepReplay kept = replay_step(zero3(0, kHuge), in, kHuge);
  CHECK(kept.peak_cached > r.peak_cached);
  CHECK(kept.peak == r.peak + kept.peak_cached - r.peak_cached);
  // With large activations they are the most of it wherever it falls.
  in.unit_activation_bytes = {0, 10'000, 10'000, 10'000};
  const StepReplay a = replay_step(p, in, kHuge);
  CHECK(a.peak_activations == 30'000 + 2);
  CHECK(a.peak < 30'000 + 2 + r.peak);
}

TEST_CASE("step replay: the chunked loss holds the tied matrix's gradient once, from the head on", "[estimate][replay]") {
  // The chunked loss forms the head's [V, C] gradient in forward (counted among the head's
  // activations), hands it on at the head's backward, and the embedding's lookup adds its rows into
  // it: one copy where the plain loss has three at the embedding's backward.
  StepInput in = model(3);
  in.tied_weight_numel = 6;
  in.unit_activation_bytes = {0, 1000, 1000, 1000};
  in.head_activation_bytes = 500 + 6 * 4;  // one chunk's logits, the hidden states' and the table's gradients
  in.chunked_loss = true;
  in.device_allocator = true;
  const StepReplay gpu = replay_step(zero3(0, kHuge), in, kHuge);
  CHECK(gpu.peak_when == "the end of the forward");  // the head's backward hands its bytes on as the tied gradient
  CHECK(gpu.peak_activations == 3000 + 524);
  CHECK(gpu.peak_tied_grads == 0);
  // A CPU rank keeps the most the activations took, so the backward's buffers decide where the peak
  // falls: with the plain loss's three copies the embedding's backward, with one the token unit's
  // gradient buffer after it, lower by the two copies saved.
  in.device_allocator = false;
  const StepReplay cpu = replay_step(zero3(0, kHuge), in, kHuge);
  in.chunked_loss = false;
  const StepReplay plain = replay_step(zero3(0, kHuge), in, kHuge);
  CHECK(plain.peak_when == "the embedding's backward");
  CHECK(plain.peak_tied_grads == 3 * 6 * 4);
  CHECK(cpu.peak_tied_grads <= 6 * 4);
  CHECK(cpu.peak == plain.peak - 2 * 6 * 4);
}

TEST_CASE("step replay on a GPU: activations count while alive, layer buffer slots once made", "[estimate][replay]") {
  // The caching allocator's allocated bytes. Prefetch off, a reduce bucket of one block: the forward
  // gathers one layer at a time (one slot); each layer's backward holds its gradient buffer and its
  // gathered parameters (two slots), after the previous layer's reduction finished. The token
  // unit's gradient buffer (10 values, larger than a slot) is allocated apart while it lives. The
  // fullest moment is the token unit's reduction after backward: 2 slots, its buffer, and two
  // reduce-scatter outputs (h.0's, still pending, and its own).
  StepInput in = model(3);
  in.device_allocator = true;
  const StepReplay r = replay_step(zero3(0, kHuge), in, kBlock);
  CHECK(r.peak_slots == 2);
  CHECK(r.peak_when == "unit 0's reduction");
  CHECK(r.peak_reduce_outputs == (kBlock / 2 + 5) * 4);
  CHECK(r.peak == 2 * kBlock * 4 + 10 * 4 + r.peak_reduce_outputs);
  CHECK(r.peak_cached == 0);
  // The engine's own figures do not depend on the allocator.
  in.device_allocator = false;
  const StepReplay host = replay_step(zero3(0, kHuge), in, kBlock);
  CHECK(host.gathered_peak == r.gathered_peak);
  CHECK(host.grad_buffers_peak == r.grad_buffers_peak);

  // Activations: on a GPU the head's backward, where every layer's and the head's are alive, is the
  // fullest moment; a CPU rank's allocator keeps their pages, so there the embedding's backward
  // adds the tied gradients on top of the most they held. With the bucket unbounded the first
  // step's backward made 4 slots (three layers' gradient buffers waiting for their reductions and
  // h.0's gathered parameters at its backward); the second step's head's backward finds them made.
  in.tied_weight_numel = 6;
  in.unit_activation_bytes = {0, 1000, 1000, 1000};
  in.head_activation_bytes = 500;
  in.device_allocator = true;
  const StepReplay gpu = replay_step(zero3(0, kHuge), in, kHuge);
  CHECK(gpu.peak_when == "the head's backward");
  CHECK(gpu.peak_activations == 3500);
  CHECK(gpu.peak_slots == 4);
  CHECK(gpu.peak == 3500 + 6 * 4 + 4 * kBlock * 4);
  in.device_allocator = false;
  const StepReplay cpu = replay_step(zero3(0, kHuge), in, kHuge);
  CHECK(cpu.peak_when == "the embedding's backward");
  CHECK(cpu.peak_activations == 3500);
  CHECK(cpu.peak > gpu.peak);
}
