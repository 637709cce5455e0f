// The gradient of a token table tied with the head, in one [V, C] tensor (issue 51 item 3).
//
// Under plain autograd the table's two uses each produce a [V, C] gradient: the head's, which waits
// from the start of backward, and the lookup's (dense zeros with the looked-up rows added), and
// autograd adds them out of place into a third (measured: 562 MiB at V 32000, C 1536, fp32; a sparse
// lookup gradient would not help, autograd never adds a sparse one into a dense one in place).
// Here the chunked loss leaves its head gradient in a TiedTableGradient, and the lookup's backward
// adds its rows into that tensor (index_add_) and hands on no gradient of its own: the head's
// gradient, now the whole table's, reaches .grad alone. The lookup's backward always runs after the
// loss's (its input feeds the loss), so the slot is filled when it is read; without a head gradient
// in the slot (a loss that did not use it) the lookup returns its dense gradient as at::embedding does.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

namespace accel::train {

struct TiedTableGradient : torch::CustomClassHolder {
  at::Tensor head_grad;  // [V, C], set by the chunked loss's backward, taken by the lookup's
};
using TiedTableGradientPtr = c10::intrusive_ptr<TiedTableGradient>;

// table[idx] for idx [B, T] int64 (at::embedding's values), whose backward adds into
// tied->head_grad when it holds one (see above).
at::Tensor tied_table_lookup(const at::Tensor& table, const at::Tensor& idx, const TiedTableGradientPtr& tied);

}  // namespace accel::train
