// A micro-step of the sharding engine, replayed (see step_replay.hpp).
#include "runtime/estimate/step_replay.hpp"

#include <algorithm>
#include <deque>

namespace accel::estimate {
namespace {

int64_t padded(int64_t numel, int shards) { return (numel + shards - 1) / shards * shards; }

// engine/sharded/unit_block_allocator.cpp's reuse: a freed unit block is kept (up to 8 of them)
// for the next request of its size; resident though unused until then.
class BlockCache {
 public:
  void allocate(int64_t bytes) {
    for (size_t i = kept_.size(); i-- > 0;)
      if (kept_[i] == bytes) {
        kept_.erase(kept_.begin() + std::ptrdiff_t(i));
        return;
      }
  }
  void free(int64_t bytes) {
    if (bytes > 0 && kept_.size() < kMaxKept) kept_.push_back(bytes);
  }
  void trim() { kept_.clear(); }
  int64_t bytes() const {
    int64_t b = 0;
    for (int64_t k : kept_) b += k;
    return b;
  }

 private:
  static constexpr size_t kMaxKept = 8;
  std::vector<int64_t> kept_;
};

class Replay {
 public:
  Replay(const plan::ResolvedPlan& plan, const StepInput& in, int64_t reduce_bucket_numel)
      : plan_(plan), in_(in), bucket_(reduce_bucket_numel), keeps_(kept_units(plan, in)) {
    for (int64_t n : in.unit_numels) numel_.push_back(padded(n, in.shards));
    // engine/sharded/sharded_engine.cpp's use_layer_buffers: slots of the largest unit but the
    // token one (which is larger, and allocates apart), on a GPU under stages 2-3.
    if (in.device_allocator && shard_grads())
      for (size_t u = 0; u < numel_.size(); ++u)
        if (int(u) != in.token_unit) slot_numel_ = std::max(slot_numel_, numel_[u]);
    state_.assign(numel_.size(), State::released);
    has_grad_.assign(numel_.size(), false);
    grad_alive_.assign(numel_.size(), false);
    reduced_.assign(numel_.size(), false);
    // Kept units are gathered before the step starts (the refresh after the last optimizer step).
    for (size_t u = 0; u < numel_.size(); ++u)
      if (keeps_[u]) {
        state_[u] = State::ready;
        out_.kept += numel_[u] * in.compute_bytes;
        out_.kept_numel += numel_[u];
      } else {
        out_.largest_freed_numel = std::max(out_.largest_freed_numel, numel_[u]);
      }
  }

  // `steps` micro-steps, each followed by an optimizer step; the block cache lives on between them
  // unless `trim_between_steps` (the engine trims at every phase under nvme offload).
  StepReplay run(int steps, bool trim_between_steps) {
    for (int s = 0; s < steps; ++s) {
      micro_step();
      std::fill(has_grad_.begin(), has_grad_.end(), false);
      std::fill(reduced_.begin(), reduced_.end(), false);
      if (trim_between_steps) cache_.trim();
    }
    return out_;
  }

 private:
  void micro_step() {
    const int n = int(numel_.size());
    const bool forward_prefetch = plan_.frees_parameters() && plan_.prefetch.forward;
    const auto backward_prefetch = plan_.frees_parameters() ? plan_.prefetch.backward : plan::PrefetchPolicy::Backward::none;
    // Forward: each unit is gathered (prefetching the next ones), computes, saves its activations
    // and is freed; the head at the end leaves the logits.
    for (int u = 0; u < n; ++u) {
      if (u == in_.token_unit) {  // kept: no boundary of its own
        activations_ += saved(u);
        continue;
      }
      wait(u);
      if (forward_prefetch) prefetch_from(u, +1);
      activations_ += saved(u);
      release(u);
    }
    activations_ += in_.head_activation_bytes;
    measure("the end of the forward");
    // Backward: the head first. Its weight gradient (the tied matrix) waits in autograd for the
    // embedding's; the final norm's gradients open the token unit's buffer.
    if (in_.token_unit >= 0) {
      if (in_.chunked_loss) activations_ -= in_.head_activation_bytes;  // its [V, C] becomes the tied one
      tied_grads_ = in_.tied_weight_numel * in_.compute_bytes;
      measure("the head's backward");
      if (!in_.chunked_loss) activations_ -= in_.head_activation_bytes;
      ensure_grad_buffer(in_.token_unit);
    } else {
      activations_ -= in_.head_activation_bytes;
    }
    for (int u = n - 1; u >= 0; --u) {
      if (u == in_.token_unit) continue;
      ensure_grad_buffer(u);
      wait(u);
      if (backward_prefetch == plan::PrefetchPolicy::Backward::pre) prefetch_from(u, -1);
      measure("unit " + std::to_string(u) + "'s backward");
      activations_ -= saved(u);
      if (backward_prefetch == plan::PrefetchPolicy::Backward::post) prefetch_from(u, -1);
      // Stages 2-3 reduce a unit as its gradients complete (overlap_comm); units below reduce in
      // reverse order, which this loop is.
      if (plan_.overlap_comm && plan_.shards != plan::Shards::none) reduce(u);
      release(u);
    }
    // The embedding's backward: its dense gradient of the tied matrix, and the sum of the two (the
    // chunked loss's lookup adds its rows into the head's gradient instead).
    if (in_.token_unit >= 0) {
      activations_ -= saved(in_.token_unit);  // layers inside the token unit: their backward is done
      tied_grads_ = (in_.chunked_loss ? 1 : 3) * in_.tied_weight_numel * in_.compute_bytes;
      measure("the embedding's backward");
      tied_grads_ = 0;
    }
    // After backward: what has not reduced, in reverse unit order, then every reduction finishes.
    if (plan_.shards != plan::Shards::none)
      for (int u = n - 1; u >= 0; --u) reduce(u);
    while (!pending_.empty()) finish_oldest();
  }

  enum class State { released, in_flight, ready };

  bool counted(int u) const { return !keeps_[size_t(u)]; }
  int64_t saved(int u) const {
    return size_t(u) < in_.unit_activation_bytes.size() ? in_.unit_activation_bytes[size_t(u)] : 0;
  }

  int64_t gathered() const {
    int64_t b = 0;
    for (size_t u = 0; u < numel_.size(); ++u)
      if (!keeps_[u] && state_[u] != State::released) b += numel_[u] * in_.compute_bytes;
    return b;
  }
  int live_units() const {
    int k = 0;
    for (size_t u = 0; u < numel_.size(); ++u) k += (counted(int(u)) && state_[u] != State::released) ? 1 : 0;
    return k;
  }
  int64_t live_numel() const {
    int64_t v = 0;
    for (size_t u = 0; u < numel_.size(); ++u)
      if (counted(int(u)) && state_[u] != State::released) v += numel_[u];
    return v;
  }

  // Transient unit buffers alive now that take a layer buffer slot (on a GPU, stages 2-3).
  int slot_buffers() const {
    int k = 0;
    for (size_t u = 0; u < numel_.size(); ++u) {
      if (int(u) == in_.token_unit) continue;
      k += (!keeps_[u] && state_[u] != State::released) ? 1 : 0;
      k += grad_alive_[u] ? 1 : 0;
    }
    return k;
  }
  int64_t token_buffers() const {
    if (in_.token_unit < 0) return 0;
    const size_t t = size_t(in_.token_unit);
    return ((!keeps_[t] && state_[t] != State::released) + int(grad_alive_[t])) * numel_[t] * in_.compute_bytes;
  }

  void measure(const std::string& when) {
    const int64_t g = gathered(), b = pending_numel_ * in_.compute_bytes;
    int64_t total = 0, cached = 0;
    if (in_.device_allocator) {
      // The caching allocator counts what is allocated: activations while alive; the slots, once
      // made, for good; the token unit's buffers and the reduce outputs while alive.
      activations_held_ = activations_;
      int64_t buffers = g + b;
      if (slot_numel_ > 0) {
        slots_ = std::max(slots_, slot_buffers());
        buffers = slots_ * slot_numel_ * in_.compute_bytes + token_buffers();
      }
      total = buffers + outputs_ + tied_grads_ + activations_;
    } else {
      // Activations are freed through backward, but malloc keeps their pages: what they took at
      // most stays resident.
      activations_held_ = std::max(activations_held_, activations_);
      cached = cache_.bytes();
      total = g + b + outputs_ + tied_grads_ + activations_held_ + cached;
    }
    if (total <= out_.peak) return;
    out_.peak = total;
    out_.peak_cached = cached;
    out_.peak_gathered = g;
    out_.peak_grad_buffers = b;
    out_.peak_reduce_outputs = outputs_;
    out_.peak_tied_grads = tied_grads_;
    out_.peak_activations = activations_held_;
    out_.peak_slots = slots_;
    out_.peak_when = when;
  }

  void issue(int u) {
    if (state_[size_t(u)] != State::released) return;
    state_[size_t(u)] = State::in_flight;
    if (!keeps_[size_t(u)]) cache_.allocate(numel_[size_t(u)] * in_.compute_bytes);
    if (!keeps_[size_t(u)]) out_.gathered_peak = std::max(out_.gathered_peak, gathered());
    measure("unit " + std::to_string(u) + "'s gather");
  }
  void wait(int u) {
    issue(u);
    state_[size_t(u)] = State::ready;
  }
  void release(int u) {
    if (keeps_[size_t(u)] || state_[size_t(u)] == State::released) return;
    state_[size_t(u)] = State::released;
    cache_.free(numel_[size_t(u)] * in_.compute_bytes);
  }

  // unit_param_buffers.cpp's prefetch_from: units already on their way are passed over without
  // counting against the reach, as DeepSpeed's coordinator passes over parameters in flight.
  void prefetch_from(int u, int direction) {
    const plan::PrefetchPolicy& p = plan_.prefetch;
    int reached = 0;
    int64_t ahead = 0;
    for (int v = u + direction; v >= 0 && v < int(numel_.size()) && reached < p.max_prefetch_units; v += direction) {
      if (state_[size_t(v)] != State::released) continue;
      if (p.max_prefetch_numel > 0 && ahead + numel_[size_t(v)] > p.max_prefetch_numel) return;
      if (counted(v)) {
        if (p.max_live_units > 0 && live_units() + 1 > p.max_live_units) return;
        if (p.max_live_numel > 0 && live_numel() + numel_[size_t(v)] > p.max_live_numel) return;
      }
      issue(v);
      ahead += numel_[size_t(v)];
      ++reached;
    }
  }

  bool shard_grads() const { return plan_.shards == plan::Shards::gradients || plan_.shards == plan::Shards::parameters; }

  // The engine's ensure_grad_buffer: a unit's full-gradient buffer before its first gradient,
  // after older reductions finish while the bucket would overflow.
  void ensure_grad_buffer(int u) {
    if (!shard_grads() || has_grad_[size_t(u)] || reduced_[size_t(u)]) return;
    while (!pending_.empty() && pending_numel_ + numel_[size_t(u)] > bucket_) finish_oldest();
    pending_numel_ += numel_[size_t(u)];
    cache_.allocate(numel_[size_t(u)] * in_.compute_bytes);
    has_grad_[size_t(u)] = true;
    grad_alive_[size_t(u)] = true;
    out_.grad_buffers_peak = std::max(out_.grad_buffers_peak, pending_numel_ * in_.compute_bytes);
    measure("unit " + std::to_string(u) + "'s gradient buffer");
  }

  // Stages 2-3: the buffer is reduce-scattered into a new shard-sized output; both live until the
  // reduction is finished. (Stages 0-1 reduce in the persistent gradients: nothing transient.)
  void reduce(int u) {
    if (reduced_[size_t(u)]) return;
    ensure_grad_buffer(u);  // before the flag, as the engine's reduce_unit (a unit without backward)
    reduced_[size_t(u)] = true;
    if (!shard_grads()) return;
    outputs_ += numel_[size_t(u)] / in_.shards * in_.compute_bytes;
    cache_.allocate(numel_[size_t(u)] / in_.shards * in_.compute_bytes);
    pending_.push_back(u);
    measure("unit " + std::to_string(u) + "'s reduction");
  }
  void finish_oldest() {
    const int u = pending_.front();
    pending_.pop_front();
    pending_numel_ -= numel_[size_t(u)];
    grad_alive_[size_t(u)] = false;
    outputs_ -= numel_[size_t(u)] / in_.shards * in_.compute_bytes;
    // The reduction's record goes: its output first, then the gradient buffer.
    cache_.free(numel_[size_t(u)] / in_.shards * in_.compute_bytes);
    cache_.free(numel_[size_t(u)] * in_.compute_bytes);
  }

  const plan::ResolvedPlan& plan_;
  const StepInput& in_;
  const int64_t bucket_;
  const std::vector<bool> keeps_;
  std::vector<int64_t> numel_;
  std::vector<State> state_;
  std::vector<bool> has_grad_, reduced_, grad_alive_;
  std::deque<int> pending_;
  BlockCache cache_;
  int64_t pending_numel_ = 0, outputs_ = 0, tied_grads_ = 0, activations_ = 0, activations_held_ = 0;
  int64_t slot_numel_ = 0;  // > 0: transient buffers take layer buffer slots of this many values
  int slots_ = 0;           // slots made so far
  StepReplay out_;
};

}  // namespace

std::vector<bool> kept_units(const plan::ResolvedPlan& plan, const StepInput& in) {
  std::vector<bool> keeps(in.unit_numels.size(), true);
  if (!plan.frees_parameters()) return keeps;
  for (size_t u = 0; u < keeps.size(); ++u)
    keeps[u] = int(u) == in.token_unit || in.unit_numels[u] < plan.persistence_threshold;
  return keeps;
}

StepReplay replay_step(const plan::ResolvedPlan& plan, const StepInput& input, int64_t reduce_bucket_numel) {
  return Replay(plan, input, reduce_bucket_numel).run(2, plan.optimizer_states == plan::Where::nvme);
}

}  // namespace accel::estimate
