// The feed-forward network of a gpt Block (see feed_forward.hpp).
#include "trainer/models/feed_forward.hpp"

#include <ATen/ATen.h>

namespace accel::train {

FeedForward::FeedForward(int64_t n_embd, at::ScalarType dtype) {
  c_fc_ = register_module("c_fc", std::make_shared<LinearLayer>(n_embd, 4 * n_embd, dtype));
  c_proj_ = register_module("c_proj", std::make_shared<LinearLayer>(4 * n_embd, n_embd, dtype));
}

at::Tensor FeedForward::forward(const at::Tensor& x) const {
  return c_proj_->forward(at::gelu(c_fc_->forward(x), "tanh"));
}

}  // namespace accel::train
