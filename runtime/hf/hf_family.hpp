// One name and layout table per model family: accel's parameter names against a Hugging Face
// model folder's tensor names (docs/design/0031-hf-folders.md). It is the only place that knows
// them; loading (model.from_pretrained), the export and `accel merge-weights --format hf` all go
// through it. No torch: the launcher checks a folder against it before any worker starts.
// Invariant: `transposed` is decided here, by name, never by shape (GPT-2's Conv1D weights are
// stored [in, out]; attn.c_proj is square, so a shape rule would miss it silently).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/config/job.hpp"

namespace accel::hf {

struct TensorMap {
  std::string accel_name;       // "h.0.attn.c_proj.weight"
  std::string hf_name;          // "transformer.h.0.attn.c_proj.weight"
  std::vector<int64_t> shape;   // accel's shape ([out, in] for a linear weight)
  bool transposed = false;      // stored as accel's shape reversed (2-D only)

  std::vector<int64_t> stored_shape() const {
    return transposed ? std::vector<int64_t>{shape[1], shape[0]} : shape;
  }
};

struct Family {
  std::string architecture;               // "GPT2LMHeadModel"
  std::vector<TensorMap> tensors;         // accel's parameter order
  bool head_tied = false;                 // llama: lm_head is embed_tokens (absent from tensors)
  // Names a folder may hold that carry nothing the model needs (the tied head, attention-mask
  // buffers older transformers saved): accepted and skipped when present.
  bool ignorable(const std::string& hf_name) const;
};

// The table of the built-in model `section` describes. Throws accel::UsageError for a model with
// no Hugging Face counterpart (mlp).
Family family_for(const config::ModelSection& section);

// config.json for `section`: what transformers' AutoConfig needs to build the same model, with
// `torch_dtype` the stored dtype name ("float32", "bfloat16", "float16").
nlohmann::ordered_json config_json(const config::ModelSection& section, const std::string& torch_dtype);

// The architectures accel reads, for error messages.
std::vector<std::string> supported_architectures();

}  // namespace accel::hf
