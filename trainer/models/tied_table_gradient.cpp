// The tied table's lookup that adds its gradient into the head's (see tied_table_gradient.hpp).
#include "trainer/models/tied_table_gradient.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace accel::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TiedTableLookup : public torch::autograd::Function<TiedTableLookup> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& table, const at::Tensor& idx,
                            const TiedTableGradientPtr& tied) {
    ctx->saved_data["idx"] = idx;
    ctx->saved_data["rows"] = table.size(0);
    ctx->saved_data["tied"] = c10::IValue::make_capsule(tied);
    return at::embedding(table, idx);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor idx = ctx->saved_data["idx"].toTensor();
    auto tied = c10::static_intrusive_pointer_cast<TiedTableGradient>(ctx->saved_data["tied"].toCapsule());
    const at::Tensor& grad = grad_outputs[0];
    if (!tied->head_grad.defined())  // no head gradient to add into: at::embedding's own
      return {at::embedding_dense_backward(grad, idx, ctx->saved_data["rows"].toInt(), /*padding_idx=*/-1,
                                           /*scale_grad_by_freq=*/false),
              at::Tensor(), at::Tensor()};
    // Taken out of the slot first, so that the gradient autograd holds is referenced once again when
    // it reaches AccumulateGrad (which then takes it rather than copying it).
    at::Tensor head_grad = std::move(tied->head_grad);
    tied->head_grad = at::Tensor();
    head_grad.index_add_(0, idx.reshape({-1}), grad.reshape({-1, grad.size(-1)}));
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor tied_table_lookup(const at::Tensor& table, const at::Tensor& idx, const TiedTableGradientPtr& tied) {
  return TiedTableLookup::apply(table, idx, tied);
}

}  // namespace accel::train
