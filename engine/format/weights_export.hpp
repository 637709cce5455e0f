// A model's full weights leaving the job (docs/design/0031): accel's one safetensors file under
// its parameter names, or a Hugging Face folder (config.json, safetensors shards of at most
// max_shard_size bytes, model.safetensors.index.json above one shard) that
// transformers.AutoModelForCausalLM.from_pretrained loads. Streamed: every file's header is laid
// out at construction from the names and shapes alone, then each tensor is written to its place
// as it arrives (any order), so a caller gathering one unit at a time never holds the model.
// Invariants: names, layouts and config.json come from the family's table (runtime/hf); values
// are stored in `dtype`, converted from what write() is given; nothing appears at `path` until
// commit() (the folder is staged beside and renamed; a folder already there is replaced).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/format/safetensors.hpp"
#include "engine/named_tensors.hpp"
#include "runtime/config/job.hpp"

namespace accel::engine {

struct ExportOptions {
  config::ExportFormat format = config::ExportFormat::safetensors;
  config::ExportDtype dtype = config::ExportDtype::fp32;
  int64_t max_shard_size = 5'000'000'000;
};

at::ScalarType export_scalar_type(config::ExportDtype dtype);

class WeightsExport {
 public:
  // `params`: every parameter's accel name and shape (values unused: placeholders will do), in
  // the order a safetensors export lists them. `model`: the built-in model's section (format hf).
  WeightsExport(std::string path, const std::vector<TensorSpec>& params, const config::ModelSection* model,
                const ExportOptions& options);
  ~WeightsExport();
  // Parameter `accel_name`'s full value (any device and floating dtype).
  void write(const std::string& accel_name, const at::Tensor& value);
  // Every parameter written: files committed, the index and config.json written, the folder in place.
  void commit();
  size_t files() const { return files_.size(); }

 private:
  struct Slot {
    size_t file = 0, index = 0;
    bool transposed = false;
  };
  std::string path_, staging_;
  ExportOptions options_;
  std::vector<std::unique_ptr<SafetensorsFileWriter>> files_;
  std::map<std::string, Slot> slots_;
  std::string config_text_, index_text_;
};

}  // namespace accel::engine
