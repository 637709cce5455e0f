// A Hugging Face model folder (model.from_pretrained) as the engine's unit source
// (engine/unit_source.hpp, docs/design/0031): each accel parameter is read through the family's
// table (runtime/hf/hf_family.hpp) from the shard file that holds it, in the element ranges the
// engine asks for, so under zero 3 / FULL_SHARD a rank reads only the bytes of what it keeps.
// A transposed tensor (GPT-2's Conv1D weights, stored [in, out]) is read as one contiguous run per
// stored row, exactly the requested elements, so the bytes read still equal the slice.
// Invariant: the folder was checked against the table at job load (exit 2 there); the readers
// re-check every header they open (engine/format/safetensors.hpp) and throw accel::RunError.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "engine/format/safetensors.hpp"
#include "engine/named_tensors.hpp"
#include "engine/unit_source.hpp"
#include "runtime/config/job.hpp"
#include "runtime/hf/hf_family.hpp"

namespace accel::train {

class HfFolderSource final : public engine::UnitSource {
 public:
  HfFolderSource(const config::ModelSection& section, const std::string& dir);
  void fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) override;
  std::string describe() const override { return "Hugging Face folder '" + dir_ + "'"; }
  // Bytes of tensor data read so far, over every file (headers not counted).
  uint64_t data_bytes_read() const;
  // Fills every parameter of `params` whole (replicated strategies, where each rank holds all).
  void fill_whole(const engine::NamedTensors& params);

 private:
  struct Place {
    hf::TensorMap map;
    engine::SafetensorsReader* reader = nullptr;
  };
  std::string dir_;
  std::map<std::string, std::unique_ptr<engine::SafetensorsReader>> readers_;  // by file name
  std::map<std::string, Place> places_;                                        // by accel name
};

}  // namespace accel::train
