// The construction stash of accel::ShardedInit (see construction_stash.hpp).
#include "api/construction_stash.hpp"

#include <vector>

#include "engine/placeholder.hpp"
#include "engine/sharded/flat_layout.hpp"
#include "runtime/common/errors.hpp"

namespace accel::api {

namespace {

const char* kFix =
    "fix: make each accel::Unit<> its own engine unit (deepspeed zero_stage 3, or fsdp auto_wrap_policy "
    "TRANSFORMER_BASED_WRAP naming the wrapped classes), or construct the model outside accel::ShardedInit";

}  // namespace

void ConstructionStash::take(torch::nn::Module& unit) {
  const std::string name = unit.name() + " #" + std::to_string(units_seen_++);
  // The unit's trainable parameters in the order the engine lays them out, each tensor once, less
  // those of a wrapper nested in it (built, and so claimed, first: the inner wrapper is its own unit).
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : unit.parameters(/*recurse=*/true))
    if (p.requires_grad() && claimed_.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  const engine::FlatLayout layout(numels, layout_.shards);
  // Strategies that keep parameters whole, and units under the persistence threshold, keep the unit
  // as built: prepare() broadcasts rank 0's values as it does for any model.
  if (params.empty() || !layout_.partitions || layout.numel() < layout_.persistence_threshold) return;
  std::vector<const engine::ShardSegment*> segment_of(params.size(), nullptr);
  const std::vector<engine::ShardSegment> segments = layout.segments(layout_.shard_rank);
  for (const auto& seg : segments) segment_of[size_t(seg.param)] = &seg;
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < params.size(); ++k) {
    at::Tensor& p = params[k];
    // Rank 0's values (as prepare() would broadcast them), one parameter at a time on the ranks' device.
    at::Tensor whole = p.detach().to(comm_.device()).contiguous();
    comm_.broadcast(whole, 0)->wait();
    Piece piece{name, 0, 0, at::Tensor(), false};
    if (const engine::ShardSegment* seg = segment_of[k]) {
      piece.begin = seg->param_offset;
      piece.numel = seg->numel;
      piece.values = whole.reshape(-1).narrow(0, seg->param_offset, seg->numel).clone();
      bytes_held_ += piece.numel * int64_t(piece.values.element_size());
    }
    p.set_data(engine::make_placeholder(p.sizes(), p.options()));
    pieces_.emplace(p.unsafeGetTensorImpl(), std::move(piece));
  }
  ++units_cut_;
}

void ConstructionStash::fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) {
  at::NoGradGuard no_grad;
  const auto it = pieces_.find(param.unsafeGetTensorImpl());
  if (it == pieces_.end()) {
    if (engine::is_placeholder(param))
      throw RunError("accel::ShardedInit: parameter '" + name + "' has no values (a placeholder the scope did not "
                     "make); build it inside an accel::Unit<> or outside any placeholder");
    dest.copy_(param.detach().reshape(-1).narrow(0, begin, dest.numel()));
    return;
  }
  Piece& piece = it->second;
  if (piece.used || begin != piece.begin || dest.numel() != piece.numel)
    throw RunError("accel::ShardedInit: parameter '" + name + "' of " + piece.unit + " was kept as elements [" +
                   std::to_string(piece.begin) + ", " + std::to_string(piece.begin + piece.numel) + ") for one unit "
                   "per wrapper, but the engine asks for [" + std::to_string(begin) + ", " +
                   std::to_string(begin + dest.numel()) + ")" + (piece.used ? " a second time" : "") +
                   ": its units are not the wrappers one to one; " + kFix);
  dest.copy_(piece.values);
  bytes_held_ -= piece.numel * int64_t(piece.values.element_size());
  piece.values = at::Tensor();  // the engine's buffer holds it now
  piece.used = true;
}

std::string ConstructionStash::describe() const {
  return "rank 0's values of " + std::to_string(units_cut_) + " accel::Unit<>s cut at construction (accel::ShardedInit)";
}

void ConstructionStash::check_consumed() const {
  for (const auto& [impl, piece] : pieces_)
    if (piece.numel > 0 && !piece.used)
      throw RunError("accel::ShardedInit: the engine never asked for the slice of " + piece.unit + " kept at "
                     "construction: its units are not the wrappers one to one; " + std::string(kFix));
}

}  // namespace accel::api
