// RoPE tables and rotation (see rotary_embedding.hpp).
#include "trainer/models/rotary_embedding.hpp"

#include <cmath>

namespace accel::train {

namespace {

// transformers' _compute_llama3_parameters, op for op on float32 tensors with double scalars:
// wavelengths longer than original/low_freq_factor are divided by factor, shorter than
// original/high_freq_factor kept, and those between blended linearly in original/wavelength.
at::Tensor llama3_scaled(const at::Tensor& inv_freq, const config::ModelSection& s) {
  const double factor = s.rope_scaling_factor;
  const double low = s.rope_scaling_low_freq_factor, high = s.rope_scaling_high_freq_factor;
  const double old_context = double(s.rope_scaling_original_max_position_embeddings);
  const double low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  const at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);  // Python's `2 * math.pi / inv_freq`
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const at::Tensor smooth = (wavelen.reciprocal() * old_context - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = at::logical_not(wavelen < high_freq_wavelen) * at::logical_not(wavelen > low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

}  // namespace

at::Tensor rope_inverse_frequencies(const config::ModelSection& s, int64_t head_dim) {
  // 1.0 / (theta ** (arange(0, dim, 2).float() / dim)); Python's `1.0 / t` is reciprocal(t) * 1.0.
  const at::Tensor exponents = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim;
  at::Tensor inv_freq = at::pow(s.rope_theta, exponents).reciprocal();
  if (s.rope_scaling == config::RopeScaling::llama3) inv_freq = llama3_scaled(inv_freq, s);
  return inv_freq;
}

RopeTables rope_tables(const at::Tensor& inv_freq, int64_t seq_len, at::Device device) {
  const at::Tensor positions = at::arange(seq_len, at::TensorOptions(at::kLong).device(device)).to(at::kFloat);
  const at::Tensor freqs = positions.unsqueeze(-1) * inv_freq.to(device);  // [T, head_dim / 2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

}  // namespace accel::train
