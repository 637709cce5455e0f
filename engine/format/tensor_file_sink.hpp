// Where a backend's checkpoint files go (Backend::save_state): DirectFileSink writes each file into
// the checkpoint's staging directory before it returns; the asynchronous checkpoint's sink
// (api/checkpoint_staging.hpp, docs/design/0028) takes the tensors into host staging buffers and a
// background thread writes the files.
// Invariants: `file` is a plain name (no '/') inside the checkpoint directory; the tensors given to
// write() may be the backend's live state, so a sink either has finished reading them when write()
// returns (DirectFileSink) or says when it has (the staging sink's fence, before the state changes).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/format/safetensors.hpp"
#include "engine/named_tensors.hpp"

namespace accel::engine {

class TensorFileSink {
 public:
  virtual ~TensorFileSink() = default;
  // `tensors` as one safetensors file named `file` (save_safetensors).
  virtual void write(const std::string& file, const NamedTensors& tensors) = 0;
  // The same, produced one tensor at a time (save_safetensors_streamed): for states kept on disk,
  // which no sink holds in memory at once.
  virtual void write_streamed(const std::string& file, const std::vector<TensorSpec>& specs,
                              const std::function<at::Tensor(size_t)>& produce) = 0;
};

// Writes every file into `dir` at once.
class DirectFileSink final : public TensorFileSink {
 public:
  explicit DirectFileSink(std::string dir) : dir_(std::move(dir)) {}
  void write(const std::string& file, const NamedTensors& tensors) override {
    save_safetensors(dir_ + "/" + file, tensors);
  }
  void write_streamed(const std::string& file, const std::vector<TensorSpec>& specs,
                      const std::function<at::Tensor(size_t)>& produce) override {
    save_safetensors_streamed(dir_ + "/" + file, specs, produce);
  }

 private:
  std::string dir_;
};

}  // namespace accel::engine
