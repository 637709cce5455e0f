// One training micro-step of accel's sharding engine replayed without torch, for the memory
// estimate: which units' gathered parameters and full-gradient buffers are alive at each moment of
// the step, as the engine's schedule makes them, and what they hold together with the step's other
// transients (activations, the tied weight's gradient copies) at its fullest moment.
// Why a replay and not a formula: DeepSpeed's prefetch issues up to stage3_prefetch_bucket_size new
// values at each unit, skipping those already in flight, so the gathered window grows through the
// forward until stage3_max_live_parameters stops it (DeepSpeed's coordinator does the same); the
// gradient buffers waiting for their reduce-scatter follow reduce_bucket_size; and the step's
// fullest moment is where both meet the tied embedding's gradient. Only the schedule gives them.
// The replay follows engine/sharded/sharded_engine.cpp (pre_forward, post_forward, on_backward,
// ensure_grad_buffer, reduce_unit, finish_oldest_reduction) and unit_param_buffers.cpp (issue,
// wait, release, prefetch_from) event for event; tests/engine/test_step_replay.cpp holds it to the
// engine's own memory report on a real step.
// Two micro-steps are replayed: freed unit blocks kept for reuse (unit_block_allocator.hpp) carry
// from one to the next, so the second's fullest moment can be the larger.
// On a GPU (StepInput::device_allocator) the peak is the caching allocator's allocated bytes:
// activations count while they live, and the layer buffer pool's slots from when they are made.
// Model: the built-in models' order (runtime/estimate/model_shape.hpp): the token unit (the root,
// holding the embedding tied with the output head) is used first and last in the forward, then
// backward runs the head, the layers in reverse and the embedding last. Autograd sums the tied
// matrix's two gradients before accumulating them: the head's [V, C] gradient waits from the
// head's backward to the embedding's, whose dense [V, C] gradient and the sum join it there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::estimate {

struct StepInput {
  std::vector<int64_t> unit_numels;  // engine units in order, before padding
  int token_unit = -1;               // the unit used at both ends of the forward; -1: none
  int shards = 1;                    // ranks a unit's flat buffer is split over
  int compute_bytes = 4;             // parameters, gradients, gathers and reduce-scatters
  int64_t tied_weight_numel = 0;     // the matrix shared by the embedding and the head (V x C)
  // Saved by each unit's forward, freed by its backward (parallel to unit_numels; empty: none).
  std::vector<int64_t> unit_activation_bytes;
  int64_t head_activation_bytes = 0;  // the logits and the loss's copies, freed by the head's backward
  // training.loss_chunk_tokens > 0: the head's backward only hands on the gradients its forward
  // formed (counted in head_activation_bytes until then), and the embedding's lookup adds its rows
  // into the head's [V, C] gradient: one copy of the tied matrix's gradient, not three.
  bool chunked_loss = false;
  // Whose memory the peak counts. false: a CPU rank's (malloc keeps freed pages resident, the
  // engine keeps freed unit blocks). true: a GPU's allocated bytes under CUDA's caching allocator
  // (what torch.cuda.max_memory_allocated reports): freed tensors stop counting at once, and under
  // stages 2-3 the transient unit buffers take the layer buffer pool's slots, which stay allocated
  // once made (engine/sharded/layer_buffer_pool.hpp).
  bool device_allocator = false;
};

struct StepReplay {
  // The engine's own figures (its memory report): gathered storage of units that free theirs
  // (live_params_peak), full-gradient buffers (live_grads_peak), and the storage of units that keep
  // theirs gathered (params under stage 3).
  int64_t gathered_peak = 0;
  int64_t grad_buffers_peak = 0;
  int64_t kept = 0;
  int64_t kept_numel = 0;  // their values, padded
  int64_t largest_freed_numel = 0;  // the largest unit that frees its storage, padded (0: none)
  // The fullest moment: gathered + gradient buffers + reduce-scatter outputs + tied gradient copies
  // + activations + cached blocks, and what it was made of.
  int64_t peak = 0;
  int64_t peak_gathered = 0, peak_grad_buffers = 0, peak_reduce_outputs = 0;
  int64_t peak_tied_grads = 0;
  // Activations counted at the fullest moment: on a CPU rank the most held so far (their pages stay
  // resident), on a GPU those alive then.
  int64_t peak_activations = 0;
  int64_t peak_cached = 0;  // freed unit blocks the engine keeps mapped for reuse (at most 8)
  int peak_slots = 0;       // on a GPU: layer buffer slots made so far (each the largest layer unit)
  std::string peak_when;  // "the embedding's backward", "unit 3's backward", "the end of the forward"
};

// The kept units: those the engine never frees (every unit below stage 3; under stage 3 the token
// unit and units under plan.persistence_threshold values).
std::vector<bool> kept_units(const plan::ResolvedPlan& plan, const StepInput& input);

// `reduce_bucket_numel`: the engine's bound on full-gradient values waiting for their reduction
// (plan::engine_units). `plan`: the strategy, prefetch and persistence the engine follows.
StepReplay replay_step(const plan::ResolvedPlan& plan, const StepInput& input, int64_t reduce_bucket_numel);

}  // namespace accel::estimate
