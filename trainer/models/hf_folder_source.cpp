// Sliced reading of a Hugging Face folder (see hf_folder_source.hpp).
#include "trainer/models/hf_folder_source.hpp"

#include <torch/csrc/autograd/grad_mode.h>

#include "runtime/common/errors.hpp"
#include "runtime/hf/hf_folder.hpp"

namespace accel::train {

HfFolderSource::HfFolderSource(const config::ModelSection& section, const std::string& dir) : dir_(dir) {
  const hf::FolderContents contents = hf::read_folder(dir);
  for (const auto& m : hf::family_for(section).tensors) {
    const hf::StoredTensor* stored = contents.find(m.hf_name);
    if (!stored) throw RunError("Hugging Face folder '" + dir + "': tensor '" + m.hf_name + "' is missing");
    auto& reader = readers_[stored->file];
    if (!reader) reader = std::make_unique<engine::SafetensorsReader>(dir + "/" + stored->file);
    const engine::SafetensorsReader::Info* info = reader->find(m.hf_name);
    if (!info || info->shape != m.stored_shape())
      throw RunError("Hugging Face folder '" + dir + "': tensor '" + m.hf_name + "' in " + stored->file +
                     " does not have the shape config.json gives it");
    places_[m.accel_name] = {m, reader.get()};
  }
}

void HfFolderSource::fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) {
  torch::NoGradGuard no_grad;
  const auto it = places_.find(name);
  if (it == places_.end()) throw RunError(describe() + ": the model's parameter '" + name + "' has no entry in the table");
  const Place& place = it->second;
  at::Tensor out = dest.view(-1);
  const int64_t count = out.numel();
  // As the parameter would hold it (its dtype), then the engine's buffer, in pieces: reading a
  // whole bf16 tensor and converting it at once held 375 MiB beside the buffer for a 32000 x 2048
  // embedding, the start-up peak of a 1B Llama under zero 3 (docs/bench/hf_llama_*).
  if (!place.map.transposed) {
    place.reader->read_range_converted(place.map.hf_name, begin, out, param.scalar_type());
    return;
  }
  // accel [O, I] element k = (o, i) is stored at i * O + o. For each stored row i the wanted o's
  // are one contiguous run: o in [ceil((begin - i) / I), floor((end - 1 - i) / I)].
  const int64_t O = place.map.shape[0], I = place.map.shape[1], end = begin + count;
  for (int64_t i = 0; i < I; ++i) {
    const int64_t o_lo = begin - i <= 0 ? 0 : (begin - i + I - 1) / I;
    const int64_t o_hi = end - 1 - i < 0 ? -1 : (end - 1 - i) / I;
    if (o_hi < o_lo) continue;
    const int64_t n = o_hi - o_lo + 1;
    const int64_t first = o_lo * I + i - begin;  // its first element's place in dest
    place.reader->read_range_converted(place.map.hf_name, i * O + o_lo, out.slice(0, first, first + (n - 1) * I + 1, I),
                                       param.scalar_type());
  }
}

void HfFolderSource::fill_whole(const engine::NamedTensors& params) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    at::Tensor staging = at::empty({p.numel()}, p.options().device(at::kCPU));
    fill(name, p, 0, staging);
    p.copy_(staging.view(p.sizes()));
  }
}

uint64_t HfFolderSource::data_bytes_read() const {
  uint64_t n = 0;
  for (const auto& [file, reader] : readers_) n += reader->data_bytes_read();
  return n;
}

}  // namespace accel::train
