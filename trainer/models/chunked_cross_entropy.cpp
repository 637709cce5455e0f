// The head and the token cross-entropy over token chunks (see chunked_cross_entropy.hpp).
#include "trainer/models/chunked_cross_entropy.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

namespace accel::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::string sizes_of(const at::Tensor& t) { return c10::str(t.sizes()); }

at::Tensor take_saved(AutogradContext* ctx, const std::string& key) {
  auto it = ctx->saved_data.find(key);
  if (it == ctx->saved_data.end())
    throw std::logic_error("chunked cross-entropy: its backward ran twice (retain_graph is not supported: the "
                           "gradients it computed in forward are handed on once)");
  at::Tensor t = it->second.isTensor() ? it->second.toTensor() : at::Tensor();
  ctx->saved_data.erase(key);
  return t;
}

class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk_tokens, double gradient_scale,
                            bool want_hidden, bool want_weight, const TiedTableGradientPtr& tied) {
    const at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
    const at::Tensor t = targets.reshape({-1});
    const int64_t tokens = h.size(0);
    at::Tensor grad_hidden = want_hidden ? at::empty_like(hidden, at::MemoryFormat::Contiguous) : at::Tensor();
    const at::Tensor grad_h = want_hidden ? grad_hidden.view({tokens, h.size(1)}) : at::Tensor();
    at::Tensor grad_weight;
    at::Tensor loss_sum = at::zeros({}, h.options().dtype(at::kFloat));
    // d(mean loss)/d(logit) = (softmax - onehot(target)) / tokens, times the expected incoming gradient.
    const double per_token = gradient_scale / double(tokens);
    for (int64_t start = 0; start < tokens; start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, tokens - start);
      const at::Tensor hc = h.narrow(0, start, n);
      const at::Tensor tc = t.narrow(0, start, n).unsqueeze(1);
      at::Tensor logits = at::mm(hc, weight.t());  // [n, V] in the weight's dtype
      if (logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);
      const at::Tensor lse = at::logsumexp(logits, {1}, /*keepdim=*/true);  // [n, 1]
      loss_sum.add_((lse - logits.gather(1, tc)).sum());
      if (!want_hidden && !want_weight) continue;
      logits.sub_(lse).exp_();                                            // softmax, in place
      logits.scatter_add_(1, tc, at::full({n, 1}, -1.0, logits.options()));  // - onehot(target)
      logits.mul_(per_token);
      const at::Tensor g = logits.to(weight.scalar_type());  // the same tensor when the weight is fp32
      if (want_hidden) {
        at::Tensor rows = grad_h.narrow(0, start, n);
        at::mm_out(rows, g, weight);
      }
      if (want_weight) grad_weight = grad_weight.defined() ? grad_weight.addmm_(g.t(), hc) : at::mm(g.t(), hc);
    }
    ctx->saved_data["grad_hidden"] = grad_hidden;
    ctx->saved_data["grad_weight"] = grad_weight;
    ctx->saved_data["gradient_scale"] = gradient_scale;
    if (tied) ctx->saved_data["tied"] = c10::IValue::make_capsule(tied);
    return loss_sum.div_(double(tokens));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    at::Tensor grad_hidden = take_saved(ctx, "grad_hidden");
    at::Tensor grad_weight = take_saved(ctx, "grad_weight");
    const double gradient_scale = ctx->saved_data["gradient_scale"].toDouble();
    const at::Tensor& incoming = grad_outputs[0];
    // The gradients were formed for an incoming gradient of gradient_scale: rescale to the one that
    // came (in place: nothing else holds them). On the CPU an exact match skips two passes over
    // [V, C]; on a GPU reading the value would wait for the stream, and the pass costs less.
    const bool exact = incoming.device().is_cpu() && incoming.item<float>() == static_cast<float>(gradient_scale);
    if (!exact) {
      const at::Tensor factor = incoming.to(at::kFloat) / gradient_scale;
      if (grad_hidden.defined()) grad_hidden.mul_(factor);
      if (grad_weight.defined()) grad_weight.mul_(factor);
    }
    auto tied = ctx->saved_data.find("tied");
    if (tied != ctx->saved_data.end() && grad_weight.defined())  // the lookup adds into it, then hands it on
      c10::static_intrusive_pointer_cast<TiedTableGradient>(tied->second.toCapsule())->head_grad = grad_weight;
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_token_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                       const ChunkedLossOptions& options) {
  if (hidden.dim() != 3 || weight.dim() != 2 || targets.dim() != 2 || hidden.size(2) != weight.size(1) ||
      hidden.size(0) != targets.size(0) || hidden.size(1) != targets.size(1))
    throw std::invalid_argument("chunked loss: expected hidden [B, T, C], weight [V, C] and targets [B, T], got " +
                                sizes_of(hidden) + ", " + sizes_of(weight) + " and " + sizes_of(targets));
  if (hidden.scalar_type() != weight.scalar_type() || !at::isFloatingType(hidden.scalar_type()))
    throw std::invalid_argument(std::string("chunked loss: hidden and weight must share one floating dtype, got ") +
                                c10::toString(hidden.scalar_type()) + " and " + c10::toString(weight.scalar_type()));
  if (targets.scalar_type() != at::kLong) throw std::invalid_argument("chunked loss: targets must be int64");
  if (hidden.numel() == 0) throw std::invalid_argument("chunked loss: no tokens");
  if (options.chunk_tokens <= 0 || !(options.gradient_scale > 0))
    throw std::invalid_argument("chunked loss: chunk_tokens must be > 0 and gradient_scale > 0, got " +
                                std::to_string(options.chunk_tokens) + " and " + std::to_string(options.gradient_scale));
  // Which gradients to form, decided here: inside forward grad mode is off, and a context without
  // a graph (no grad mode, nothing requiring grad) has no edges to ask.
  const bool grad = at::GradMode::is_enabled();
  return ChunkedCrossEntropy::apply(hidden, weight, targets, options.chunk_tokens, options.gradient_scale,
                                    grad && hidden.requires_grad(), grad && weight.requires_grad(), options.tied_table);
}

}  // namespace accel::train
