// Streaming weights export (see weights_export.hpp).
#include "engine/format/weights_export.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/hf/hf_family.hpp"
#include "runtime/hf/hf_folder.hpp"

namespace accel::engine {
namespace {

namespace fs = std::filesystem;

const char* torch_dtype_name(config::ExportDtype d) {
  switch (d) {
    case config::ExportDtype::bf16: return "bfloat16";
    case config::ExportDtype::fp16: return "float16";
    default: return "float32";
  }
}

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return buf;
}

}  // namespace

at::ScalarType export_scalar_type(config::ExportDtype dtype) {
  switch (dtype) {
    case config::ExportDtype::bf16: return at::kBFloat16;
    case config::ExportDtype::fp16: return at::kHalf;
    default: return at::kFloat;
  }
}

WeightsExport::WeightsExport(std::string path, const std::vector<TensorSpec>& params, const config::ModelSection* model,
                             const ExportOptions& options)
    : path_(std::move(path)), options_(options) {
  const at::ScalarType dtype = export_scalar_type(options.dtype);
  if (options.format == config::ExportFormat::safetensors) {
    std::vector<TensorSpec> specs;
    for (size_t i = 0; i < params.size(); ++i) {
      specs.push_back({params[i].name, dtype, params[i].shape});
      slots_[params[i].name] = {0, i, false};
    }
    files_.push_back(std::make_unique<SafetensorsFileWriter>(path_, std::move(specs)));
    return;
  }
  if (!model) throw RunError("weights export to " + path_ + ": format hf needs the model's section");
  const hf::Family family = hf::family_for(*model);
  // Every accel parameter must be in the table, and the table must cover the model.
  if (family.tensors.size() != params.size())
    throw RunError("weights export to " + path_ + ": the model has " + std::to_string(params.size()) +
                   " parameters, the " + family.architecture + " table " + std::to_string(family.tensors.size()));
  // Shards in the table's order, closed before the tensor that would pass max_shard_size (a
  // tensor larger than it gets a shard of its own), as transformers' save_pretrained splits.
  std::vector<std::vector<TensorSpec>> shards(1);
  std::vector<std::pair<std::string, size_t>> placed;  // accel name -> shard
  std::vector<bool> transposed;
  uint64_t in_shard = 0, total = 0;
  for (const auto& m : family.tensors) {
    bool known = false;
    for (const auto& p : params) known = known || (p.name == m.accel_name && p.shape == m.shape);
    if (!known) throw RunError("weights export to " + path_ + ": the model has no parameter '" + m.accel_name + "' of the shape the table gives");
    uint64_t bytes = uint64_t(c10::elementSize(dtype));
    for (int64_t d : m.shape) bytes *= uint64_t(d);
    if (!shards.back().empty() && in_shard + bytes > uint64_t(options.max_shard_size)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({m.hf_name, dtype, m.stored_shape()});
    slots_[m.accel_name] = {shards.size() - 1, shards.back().size() - 1, m.transposed};
    in_shard += bytes;
    total += bytes;
  }
  // Staged in a fresh folder beside the target, renamed into place by commit().
  files::refuse_link(path_);
  staging_ = path_ + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (!fs::create_directory(staging_, ec) || ec)
    throw RunError("weights export: cannot create " + staging_ + ": " + (ec ? ec.message() : "it exists"));
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shards.size() == 1 ? std::string(hf::kSingleFile) : shard_name(k, shards.size());
    for (const auto& spec : shards[k]) weight_map[spec.name] = name;
    files_.push_back(std::make_unique<SafetensorsFileWriter>(staging_ + "/" + name, std::move(shards[k])));
  }
  index["weight_map"] = std::move(weight_map);
  if (shards.size() > 1) index_text_ = index.dump(2) + "\n";
  config_text_ = hf::config_json(*model, torch_dtype_name(options.dtype)).dump(2) + "\n";
}

WeightsExport::~WeightsExport() {
  files_.clear();  // uncommitted writers remove their staged files
  if (!staging_.empty()) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void WeightsExport::write(const std::string& accel_name, const at::Tensor& value) {
  const auto it = slots_.find(accel_name);
  if (it == slots_.end()) throw RunError("weights export to " + path_ + ": no parameter '" + accel_name + "' was declared");
  const Slot& slot = it->second;
  at::Tensor v = value.detach().to(at::kCPU, export_scalar_type(options_.dtype));
  if (slot.transposed) v = v.t();  // the table says so (GPT-2's Conv1D weights are stored [in, out])
  files_[slot.file]->write(slot.index, v.contiguous());
}

void WeightsExport::commit() {
  for (auto& f : files_) f->commit();
  if (staging_.empty()) return;
  files::write_file_replacing(staging_ + "/" + hf::kConfigFile, config_text_, /*sync=*/true);
  if (!index_text_.empty()) files::write_file_replacing(staging_ + "/" + hf::kIndexFile, index_text_, /*sync=*/true);
  // A folder already at path (an earlier run's export) is replaced.
  std::error_code ec;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) fs::remove_all(path_, ec);
  if (ec || std::rename(staging_.c_str(), path_.c_str()) != 0)
    throw RunError("weights export: cannot move " + staging_ + " to " + path_ + ": " +
                   (ec ? ec.message() : std::string(std::strerror(errno))));
  staging_.clear();
}

}  // namespace accel::engine
