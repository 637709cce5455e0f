// The spec init as a stream of slices (see spec_init_stream.hpp).
#include "trainer/models/spec_init_stream.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <stdexcept>

#include <mutex>

namespace accel::train {

// ATen fills a float64 tensor of 16 or more values with uniforms in order, turns each block of 16
// into normals, and when the size is not a multiple of 16 redraws the last 16; so chunks of a
// multiple of 16 values, the last one holding the remainder and at least 16, visit the generator
// exactly as one draw of the whole does (tests/train/model/test_spec_init_stream.cpp checks it).
int64_t draw_normal_in_chunks(at::Generator& generator, int64_t numel, double std, const ChunkSink& sink,
                              int64_t from) {
  at::Tensor chunk = at::empty({std::min(numel, kNormalChunk + 15)}, at::kDouble);
  for (int64_t at = from; at < numel;) {
    int64_t n = std::min(kNormalChunk, numel - at);
    if (numel - at - n < 16) n = numel - at;  // the remainder joins the last chunk
    at::Tensor values = chunk.narrow(0, 0, n);
    values.normal_(0.0, std, generator);
    at += n;
    if (!sink(at - n, values)) return at;
  }
  return numel;
}

namespace {

int64_t numel_of(const SpecParam& p) {
  int64_t n = 1;
  for (int64_t s : p.sizes) n *= s;
  return n;
}

const ChunkSink kDiscard = [](int64_t, const at::Tensor&) { return true; };

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
  const int64_t numel = numel_of(p);
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
    // The rest of the parameter drawn last, then every normal parameter before this one, are drawn
    // and dropped, as in the whole-model init; the stream then stands at this one's start.
    if (drawn_ != SIZE_MAX) draw_normal_in_chunks(generator_, numel_of(params_[drawn_]), rules_[drawn_].std, kDiscard, drawn_at_);
    for (size_t k = next_normal_; k < index; ++k)
      if (rules_[k].kind == InitRule::Kind::normal) draw_normal_in_chunks(generator_, numel_of(params_[k]), rules_[k].std, kDiscard);
    {
      std::lock_guard<std::mutex> lock(generator_.mutex());
      start_ = generator_.clone();
    }
    next_normal_ = index + 1;
    drawn_ = index;
    drawn_at_ = 0;
  }
  // Drawn on from where the stream stands in this parameter when the range lies ahead (the usual
  // case: one range per parameter and rank), else again from the parameter's start; each chunk's
  // overlap with the range goes float64 -> float32 -> the parameter's dtype -> dest's.
  at::Tensor out = dest.view(-1);
  const int64_t end = begin + out.numel();
  auto copy_range = [&](int64_t at, const at::Tensor& values) {
    const int64_t lo = std::max(at, begin);
    const int64_t hi = std::min(at + values.numel(), end);
    if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(values.narrow(0, lo - at, hi - lo).to(at::kFloat).to(p.dtype));
    return at + values.numel() < end;
  };
  if (begin >= drawn_at_) {
    drawn_at_ = draw_normal_in_chunks(generator_, numel, rule.std, copy_range, drawn_at_);
  } else {
    at::Generator again = start_.clone();
    draw_normal_in_chunks(again, numel, rule.std, copy_range);
  }
}

}  // namespace accel::train
