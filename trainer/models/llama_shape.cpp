// The llama family's resolved sizes (see llama_shape.hpp).
#include "trainer/models/llama_shape.hpp"

#include "runtime/config/model_section.hpp"
#include "trainer/models/builtin_ops.hpp"

namespace accel::train {

LlamaShape LlamaShape::of(const config::ModelSection& s) {
  LlamaShape shape;
  shape.n_embd = s.n_embd;
  shape.n_head = s.n_head;
  shape.n_kv_head = config::llama_kv_heads(s);
  shape.head_dim = config::llama_head_dim(s);
  shape.intermediate_size = config::llama_intermediate_size(s);
  shape.norm_eps = s.norm_eps;
  shape.attention_bias = s.attention_bias;
  shape.mlp_bias = s.mlp_bias;
  shape.dtype = to_scalar_type(s.dtype);
  return shape;
}

}  // namespace accel::train
