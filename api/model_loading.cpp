// Accelerator::load_model (include/accel/accelerator.hpp), the counterpart of save_model: a
// module's weights from a safetensors file (save_model's) or a folder of safetensors shards
// (model.safetensors.index.json, or model.safetensors), under the module's own parameter names.
// Under strategies that partition parameters the file becomes prepare()'s unit source, so each
// rank reads only the byte ranges of the slices it keeps (docs/design/0023, 0031); otherwise
// every rank holds the whole model and reads it whole.
#include <sys/stat.h>

#include <map>
#include <unordered_set>

#include <accel/accelerator.hpp>

#include "api/accelerator_state.hpp"
#include "api/unit_sink.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/hf/hf_folder.hpp"

namespace accel {
namespace {

// Every tensor of the file or folder at `path`, each with the reader of the file holding it.
class WeightFiles final : public engine::UnitSource {
 public:
  explicit WeightFiles(const std::string& path) : path_(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      hf::FolderContents contents;
      try {
        contents = hf::read_folder(path);
      } catch (const UsageError& e) {
        throw RunError(std::string("accel: load_model(): ") + e.what());
      }
      std::map<std::string, std::shared_ptr<engine::SafetensorsReader>> by_file;
      for (const auto& file : contents.files) by_file[file] = std::make_shared<engine::SafetensorsReader>(path + "/" + file);
      for (const auto& t : contents.tensors) where_[t.name] = by_file.at(t.file);
    } else {
      auto reader = std::make_shared<engine::SafetensorsReader>(path);
      for (const auto& t : reader->tensors()) where_[t.name] = reader;
    }
  }

  const engine::SafetensorsReader::Info* info(const std::string& name) const {
    const auto it = where_.find(name);
    return it == where_.end() ? nullptr : it->second->find(name);
  }
  const std::map<std::string, std::shared_ptr<engine::SafetensorsReader>>& tensors() const { return where_; }
  std::string file_of(const std::string& name) const { return where_.at(name)->path(); }

  void fill(const std::string& name, const at::Tensor& param, int64_t begin, at::Tensor dest) override {
    at::NoGradGuard no_grad;
    dest.view(-1).copy_(where_.at(name)->read_range(name, begin, dest.numel()).to(param.scalar_type()));
  }
  void copy_whole(const std::string& name, const at::Tensor& target) {
    at::NoGradGuard no_grad;
    target.copy_(where_.at(name)->read(name).to(target.scalar_type()));
  }
  std::string describe() const override { return "weights '" + path_ + "'"; }

 private:
  std::string path_;
  std::map<std::string, std::shared_ptr<engine::SafetensorsReader>> where_;
};

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void Accelerator::load_model(torch::nn::Module& model, const std::string& path) {
  State& s = *state_;
  if (s.backend)
    throw RunError("accel: load_model() after prepare(): call it between building the model and prepare() "
                   "(a checkpoint of a prepared model is load_state()'s)");
  if (s.stash && s.stash->units_cut() > 0)
    throw RunError("accel: load_model() on a model built in an accel::ShardedInit scope: build it outside the "
                   "scope; under ZeRO 3 / FULL_SHARD each rank still reads only the slices it keeps");
  auto files = std::make_shared<WeightFiles>(path);
  // The file against the module: every parameter (a tied one once) with its shape; buffers where
  // present; no other name. Every problem in one error.
  std::vector<std::string> problems;
  std::unordered_set<std::string> known;
  std::unordered_set<const void*> seen;
  std::vector<std::pair<std::string, at::Tensor>> direct;  // frozen parameters and buffers: every rank
  std::vector<std::pair<std::string, at::Tensor>> trained;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    known.insert(p.key());
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
    const auto* info = files->info(p.key());
    if (!info)
      problems.push_back("missing tensor '" + p.key() + "' " + shape_str(p.value().sizes()));
    else if (at::IntArrayRef(info->shape) != p.value().sizes())
      problems.push_back("tensor '" + p.key() + "' in " + files->file_of(p.key()) + " has shape " +
                         shape_str(info->shape) + ", the module's is " + shape_str(p.value().sizes()));
    else
      (p.value().requires_grad() ? trained : direct).emplace_back(p.key(), p.value());
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    known.insert(b.key());
    const auto* info = files->info(b.key());
    if (info && b.value().defined() && at::IntArrayRef(info->shape) == b.value().sizes()) direct.emplace_back(b.key(), b.value());
  }
  for (const auto& [name, reader] : files->tensors())
    if (!known.count(name)) problems.push_back("extra tensor '" + name + "' in " + reader->path() + ": the module has no such name");
  if (!problems.empty()) {
    std::string message = "accel: load_model(" + path + "): the weights do not fit the module (" +
                           std::to_string(problems.size()) + " problem" + (problems.size() > 1 ? "s" : "") + "):";
    for (const auto& p : problems) message += "\n  " + p;
    throw RunError(message);
  }
  for (const auto& [name, t] : direct) files->copy_whole(name, t);
  const plan::ResolvedPlan resolved = plan::resolve_plan(s.job.job, plan::ModelFacts::user(api::has_unit_wrappers(model)));
  if (resolved.frees_parameters()) {
    s.loaded_weights = files;  // prepare() fills each rank's slices from it
  } else {
    for (const auto& [name, t] : trained) files->copy_whole(name, t);  // every rank holds the whole
  }
}

}  // namespace accel
