// The spec init as a stream of slices (see spec_init_stream.hpp).
#include "trainer/models/spec_init_stream.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <stdexcept>

#include <sys/mman.h>

#include <new>

namespace accel::train {
namespace {

// A draw gets pages of its own, returned to the kernel when it is freed: in the malloc heap a freed
// draw stays resident between the engine's long-lived shards, and the engine's unit-block pool
// would keep it for a reuse that never comes (each parameter's size differs).
at::Tensor mapped_empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  const size_t bytes = std::max<size_t>(1, size_t(numel) * c10::elementSize(dtype));
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  return at::from_blob(data, sizes, [bytes](void* p) { ::munmap(p, bytes); }, at::TensorOptions(dtype));
}

}  // namespace

SpecInitStream::SpecInitStream(std::vector<SpecParam> params, int n_layer, uint64_t seed)
    : params_(std::move(params)), generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {
  for (const auto& p : params_) rules_.push_back(spec_init_rule(p.name, n_layer));
}

size_t SpecInitStream::index_of(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return i;
  throw std::invalid_argument("spec init: no parameter '" + name + "' in the model");
}

void SpecInitStream::fill(size_t index, int64_t begin, at::Tensor dest) {
  torch::NoGradGuard no_grad;
  const SpecParam& p = params_.at(index);
  const InitRule& rule = rules_[index];
  int64_t numel = 1;
  for (int64_t s : p.sizes) numel *= s;
  if (begin < 0 || begin + dest.numel() > numel)
    throw std::out_of_range("spec init: elements [" + std::to_string(begin) + ", " + std::to_string(begin + dest.numel()) +
                            ") of '" + p.name + "', which has " + std::to_string(numel));
  if (rule.kind == InitRule::Kind::zeros) {
    dest.zero_();
    return;
  }
  if (rule.kind == InitRule::Kind::ones) {
    dest.fill_(1.0);
    return;
  }
  if (index != drawn_) {
    if (index < next_normal_)
      throw std::logic_error("spec init: '" + p.name + "' was asked for after the stream went past it; units must "
                             "be built in spec order");
    // Every normal parameter before this one draws (and is dropped), as in the whole-model init.
    draw_ = at::Tensor();
    for (size_t k = next_normal_; k <= index; ++k) {
      if (rules_[k].kind != InitRule::Kind::normal) continue;
      at::Tensor draw = mapped_empty(params_[k].sizes, at::kDouble);
      draw.normal_(0.0, rules_[k].std, generator_);
      if (k == index) draw_ = draw.reshape(-1);
    }
    next_normal_ = index + 1;
    drawn_ = index;
  }
  // The range only, in chunks (no range-sized temporary): float64 -> float32 -> the parameter's
  // dtype -> dest's.
  constexpr int64_t kChunk = 1 << 20;
  at::Tensor out = dest.view(-1);
  for (int64_t at = 0; at < out.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, out.numel() - at);
    out.narrow(0, at, n).copy_(draw_.narrow(0, begin + at, n).to(at::kFloat).to(p.dtype));
  }
}

}  // namespace accel::train
