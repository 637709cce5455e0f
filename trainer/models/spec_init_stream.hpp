// The spec's initialization (spec_init.hpp) as a stream a rank reads slices from: the values of
// any element range of any parameter, equal bit for bit to what initialize_in_spec_order writes
// into the whole model with the same seed, without the model existing (docs/design/0023).
// The generator is visited as the contract says: normal-initialized parameters in spec order, each
// drawn whole in float64; constant-initialized ones draw nothing. A request for a normal parameter
// after the stream went past it throws: values must not depend on the order units are built in.
// The float64 values are drawn in chunks that give the same numbers as one draw of the whole
// parameter (spec_init_stream.cpp says why), so the memory is one chunk (8 MiB), never a
// parameter's float64 draw; each parameter is drawn once, unless a rank asks for a range behind
// one it already read (then again from the parameter's start).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trainer/models/spec_init.hpp"

namespace accel::train {

struct SpecParam {
  std::string name;            // the spec name ("h.3.attn.c_attn.weight")
  std::vector<int64_t> sizes;  // its shape
  at::ScalarType dtype = at::kFloat;  // the parameter's: values are rounded to it, as the model holds them
};

// Values per chunk of draw_normal_in_chunks: a multiple of 16.
constexpr int64_t kNormalChunk = int64_t(1) << 20;
// Gets each chunk and its offset in the parameter; returns false to stop early.
using ChunkSink = std::function<bool(int64_t offset, const at::Tensor& values)>;

// Draws `numel` normal values (mean 0, `std`) from `generator` in float64 chunks of at most
// kNormalChunk + 15 values: the same values, and the same generator state after the last one, as one
// normal_ over a float64 tensor of `numel` values. `from` (a multiple of kNormalChunk) resumes a
// draw stopped there. Returns where it stopped: the end of the last chunk drawn (`numel` when done).
int64_t draw_normal_in_chunks(at::Generator& generator, int64_t numel, double std, const ChunkSink& sink,
                              int64_t from = 0);

class SpecInitStream {
 public:
  // `params` in spec order (BuiltinModule::spec_parameters()'s names and shapes).
  SpecInitStream(std::vector<SpecParam> params, int n_layer, uint64_t seed);

  // The index of `name` in the spec order; throws std::invalid_argument for an unknown name.
  size_t index_of(const std::string& name) const;

  // Writes elements [begin, begin + dest.numel()) of parameter `index` (flattened, row-major) into
  // `dest` (contiguous, any dtype and device): the float64 draw rounded to float32, then to the
  // parameter's dtype, then to dest's, as a flat buffer built from the whole model holds them.
  void fill(size_t index, int64_t begin, at::Tensor dest);

 private:
  std::vector<SpecParam> params_;
  std::vector<InitRule> rules_;
  at::Generator generator_;
  size_t next_normal_ = 0;   // the first parameter whose normal draw has not been taken
  size_t drawn_ = SIZE_MAX;  // the parameter the generator stands in
  int64_t drawn_at_ = 0;     // where in it: a chunk boundary
  at::Generator start_;      // the generator where the draw of parameter `drawn_` starts
};

}  // namespace accel::train
