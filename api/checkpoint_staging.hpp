// Host staging for asynchronous checkpoints (docs/design/0028): the sink a backend's save_state
// writes into when training.async_checkpoint is on. write() takes the tensors without writing
// anything: a device tensor's copy into page-locked host memory is queued at once on a side
// stream (it overlaps the next step's forward and backward); a host tensor is only remembered,
// and the background thread copies it (copy_host()) while the training thread runs the next
// forward and backward. The background thread then writes the files from the staging buffers.
// Nothing may change the state handed over before copy_host() returned: the checkpoint engine's
// fence (CheckpointEngine::before_state_changes) waits for it before an optimizer step or a load.
// Invariants: one buffer per file and tensor name, kept from one save to the next while its dtype
// and shape stay (the first save allocates and faults the pages in, later ones reuse them); the
// live tensors are referenced only until copy_host() has finished; files given to write_streamed
// (states kept on disk) are written at once, on the calling thread.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/format/tensor_file_sink.hpp"

namespace accel::api {

class CheckpointStaging final : public engine::TensorFileSink {
 public:
  explicit CheckpointStaging(at::Device device) : device_(device) {}

  // A new save into staging directory `dir`. The previous save must be written (write_files
  // returned): its buffers are reused.
  void begin(const std::string& dir);
  void write(const std::string& file, const engine::NamedTensors& tensors) override;
  void write_streamed(const std::string& file, const std::vector<engine::TensorSpec>& specs,
                      const std::function<at::Tensor(size_t)>& produce) override;

  // Background thread: copies the host tensors into their buffers, waits for the device copies,
  // and lets go of the live tensors. Once it returned, the live state may change.
  void copy_host();
  // Background thread, after copy_host(): writes every file from its buffers into the staging
  // directory and returns the names of all files of this save (written ones and streamed ones).
  std::vector<std::string> write_files();

  // Bytes of staging buffers held (a second copy of the rank's saved state on the host).
  int64_t staging_bytes() const;

 private:
  struct Pending {
    at::Tensor live;     // the state as the backend gave it
    at::Tensor staging;  // its buffer
  };
  at::Tensor buffer_for(const std::string& key, const at::Tensor& like);

  at::Device device_;
  std::string dir_;
  std::map<std::string, at::Tensor> buffers_;           // "<file>/<tensor>" -> staging buffer
  std::vector<std::pair<std::string, engine::NamedTensors>> files_;  // this save's files, in order
  std::vector<std::string> streamed_;                  // this save's files written at once
  std::vector<std::string> used_;                      // buffer keys this save uses
  std::vector<Pending> host_copies_;                   // copied by copy_host()
  std::vector<at::Tensor> device_sources_;             // kept alive until the device copies ran
  std::unique_ptr<c10::Event> device_copied_;          // recorded after the last device copy
};

}  // namespace accel::api
