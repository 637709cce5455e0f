// The canonical, layout-independent form of a checkpoint's training state (docs/design/0006):
// per parameter (spec name, shape), full fp32 tensors of its weights and of each optimizer state
// kind, plus its step count and the optimizer's step count. A CanonicalState presents a checkpoint
// written in any layout ("replicated" by ddp / zero_stage 0, "zero" by the sharding engine at any
// world size) in that form, so any backend at any world size can resume from it and
// `accel merge-weights` can export it.
// Memory: open() reads only safetensors headers; read() reads exactly the requested elements
// (ranged reads from the shard files), so a reader never holds more than what it asked for.
// Invariants: params() lists every parameter once, in the order the writer stored them (spec
// order); read() of kind kParamKind returns the weights the writer trains on (zero: the fp32
// masters, which equal the parameters in fp32 runs), of a state kind the optimizer's moments
// element for element, always as fp32; a checkpoint whose files disagree with its layout record
// is a RunError naming the file, raised by open() before anything is read.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sharded/flat_layout.hpp"

namespace accel::engine {

// The weights' kind in read(); the optimizer state kinds are "exp_avg", "exp_avg_sq" (adamw) and
// "momentum" (sgd with momentum).
inline constexpr const char* kParamKind = "param";
// "format" of the zero layout record; records without it (format 1) predate parameter records.
inline constexpr int kZeroLayoutFormat = 2;

// "zero_rank_00003.safetensors": rank r's shard file in the zero layout.
std::string zero_shard_file(int rank);

// "[3, 4]": a tensor shape as the checkpoint errors print it.
std::string shape_text(const std::vector<int64_t>& shape);

struct ParamRecord {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

struct ZeroUnitRecord {
  std::string unit;
  FlatLayout layout;                // at the writer's world size
  std::vector<ParamRecord> params;  // in flat-buffer order
};

// The zero layout record kept in trainer.json (backend_state):
//   {layout: "zero", format: 2, world_size, policy, state_kinds: [...], dtype: "F32" (the masters'
//    dtype: "BF16" under fsdp precision_mode low; readers convert every value to fp32),
//    units: [{unit, numel, padded_numel, shard_numel, params: [{name, shape, offset, numel}]}]}
nlohmann::json zero_layout_json(const std::string& policy, int world, const std::vector<ZeroUnitRecord>& units,
                                const std::vector<std::string>& state_kinds, const std::string& dtype = "F32");

// "{exp_avg, exp_avg_sq} (adamw)": state kinds for messages.
std::string describe_state_kinds(const std::vector<std::string>& kinds);

class CanonicalState {
 public:
  // Opens checkpoint directory `dir` (verified by the checkpoint store) whose backend layout
  // record (trainer.json backend_state) is `layout`. RunError naming the file for a layout this
  // accel does not know, a missing file, or files that disagree with the record.
  static std::unique_ptr<CanonicalState> open(const std::string& dir, const nlohmann::json& layout);
  virtual ~CanonicalState() = default;

  const std::string& dir() const { return dir_; }
  const std::string& describe() const { return description_; }  // "zero layout, 2 ranks, 4 units"
  const std::vector<ParamRecord>& params() const { return params_; }
  const ParamRecord* find(const std::string& name) const;
  const std::vector<std::string>& state_kinds() const { return kinds_; }
  // Updates parameter `name` has received, and optimizer steps taken (the largest of them).
  int64_t step(const std::string& name) const;
  int64_t step_count() const { return step_count_; }

  // Elements [begin, begin + count) of the flattened fp32 tensor of `kind` (kParamKind or one of
  // state_kinds()) of parameter `name`, as a new 1-D fp32 tensor. RunError for an unknown name
  // or kind, or a range outside the parameter.
  at::Tensor read(const std::string& name, const std::string& kind, int64_t begin, int64_t count) const;
  at::Tensor read_full(const std::string& name, const std::string& kind) const;

 protected:
  explicit CanonicalState(std::string dir) : dir_(std::move(dir)) {}
  void add_param(ParamRecord p, int64_t step);
  // read() after its checks: `index` into params(), the range inside the parameter.
  virtual at::Tensor read_checked(size_t index, const std::string& kind, int64_t begin, int64_t count) const = 0;

  std::string dir_, description_;
  std::vector<std::string> kinds_;
  int64_t step_count_ = 0;

 private:
  std::vector<ParamRecord> params_;
  std::vector<int64_t> steps_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace accel::engine
