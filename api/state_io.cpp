#include "api/state_io.hpp"

#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <set>
#include <unordered_set>

#include "engine/format/canonical_state.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"

namespace accel::api {
namespace fs = std::filesystem;
using engine::shape_text;  // canonical_state.hpp
using checkpoint::CheckpointError;

namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The module's tensors in named_parameters() order, each tensor once under its first name (as
// the unit policy names them): those that take gradients (the backend's) or the others.
engine::NamedTensors module_params(torch::nn::Module& model, bool trainable) {
  engine::NamedTensors out;
  std::unordered_set<const void*> seen;
  for (const auto& p : model.named_parameters(/*recurse=*/true))
    if (seen.insert(p.value().unsafeGetTensorImpl()).second && p.value().requires_grad() == trainable)
      out.emplace_back(p.key(), p.value());
  return out;
}

// What the backend does not hold: frozen parameters, then buffers.
engine::NamedTensors module_extras(torch::nn::Module& model) {
  engine::NamedTensors out = module_params(model, /*trainable=*/false);
  for (const auto& b : model.named_buffers(/*recurse=*/true))
    if (b.value().defined()) out.emplace_back(b.key(), b.value());
  return out;
}

Shapes shapes_of(const engine::NamedTensors& tensors) {
  Shapes out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.sizes().vec());
  return out;
}

// "'a' is [4, 8] there and [8, 4] here; no 'b' there; 'c' there is not in the module": the
// differences between a checkpoint's tensors and the module's, at most `limit` of them.
std::vector<std::string> differences(const Shapes& saved, const Shapes& here, size_t limit = 8) {
  std::map<std::string, std::vector<int64_t>> there(saved.begin(), saved.end());
  std::vector<std::string> out;
  std::unordered_set<std::string> named;
  for (const auto& [name, shape] : here) {
    named.insert(name);
    auto it = there.find(name);
    if (it == there.end()) out.push_back("the module's '" + name + "' " + shape_text(shape) + " is not in it");
    else if (it->second != shape)
      out.push_back("'" + name + "' is " + shape_text(it->second) + " there and " + shape_text(shape) + " here");
  }
  for (const auto& [name, shape] : saved)
    if (!named.count(name))
      out.push_back("it holds '" + name + "' " + shape_text(shape) + ", which the module has not");
  if (out.size() > limit) {
    const size_t more = out.size() - limit;
    out.resize(limit);
    out.push_back("and " + std::to_string(more) + " more");
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

std::string object_tensor_name(const std::string& object, size_t i) { return object + "/" + std::to_string(i); }

// The dtypes safetensors files hold (safetensors.hpp).
bool safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble: case at::kFloat: case at::kHalf: case at::kBFloat16: case at::kLong: case at::kInt:
    case at::kShort: case at::kChar: case at::kByte: case at::kBool:
      return true;
    default:
      return false;
  }
}

}  // namespace

StateIo::StateIo(const config::LoadedJob& job, comm::Communicator& comm, comm::Rendezvous* rendezvous)
    : job_(job), comm_(comm), rendezvous_(rendezvous) {}

StateIo::~StateIo() = default;

void StateIo::register_object(const std::string& name, std::function<std::vector<at::Tensor>()> save,
                              std::function<void(const std::vector<at::Tensor>&)> load) {
  if (name.empty() || name.find('/') != std::string::npos)
    throw RunError("accel: register_for_checkpointing: the name '" + name + "' must be non-empty and without '/'");
  if (!save || !load) throw RunError("accel: register_for_checkpointing('" + name + "'): give both save and load");
  if (!objects_.emplace(name, Object{std::move(save), std::move(load)}).second)
    throw RunError("accel: register_for_checkpointing: '" + name + "' is registered already; give each object its "
                   "own name");
}

api::CheckpointEngine& StateIo::engine(const std::string& root, engine::Backend& backend) {
  const std::string own = checkpoint::checkpoints_root(job_.job.training.output_dir);
  const std::string key = root.empty() ? own : root;
  auto& slot = engines_[key];
  // Only the job's own root probes node-local storage (design 0013): a root the program names is
  // taken to be one storage every machine shares.
  if (!slot) slot = std::make_unique<api::CheckpointEngine>(job_, comm_, rendezvous_, backend, key, key == own);
  return *slot;
}

namespace {

void refuse_mid_step(const char* what, const LoopPosition& at) {
  const int64_t m = at.micro % at.accumulation;
  if (!at.open && !at.sync_ready && m == 0) return;
  throw RunError(std::string("accel: ") + what + " during optimizer step " + std::to_string(at.steps + 1) + " (" +
                 std::to_string(m + (at.open ? 1 : 0)) + " of " + std::to_string(at.accumulation) +
                 " micro-steps begun" + (at.sync_ready ? ", its gradients reduced and not yet applied" : "") +
                 "): a checkpoint holds no partial gradients; call it right after the prepared optimizer's step()");
}

}  // namespace

std::string StateIo::save(const std::string& root, engine::Backend& backend, torch::nn::Module& model,
                          const LoopPosition& at) {
  refuse_mid_step("save_state()", at);
  api::CheckpointEngine& eng = engine(root, backend);
  const auto& t = job_.job.training;

  // Rank 0's buffers and frozen parameters: broadcast into copies, so every storage writes the same.
  engine::NamedTensors extras;
  {
    at::NoGradGuard no_grad;
    for (auto& [name, value] : module_extras(model)) {
      at::Tensor copy = value.detach().clone().contiguous();
      comm_.broadcast(copy, 0)->wait();
      extras.emplace_back(name, copy);
    }
  }
  engine::NamedTensors objects;
  nlohmann::json object_counts = nlohmann::json::object();
  for (auto& [name, object] : objects_) {
    std::vector<at::Tensor> tensors = object.save();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].defined())
        throw RunError("accel: save_state(): registered object '" + name + "' returned an undefined tensor (#" +
                       std::to_string(i) + ")");
      if (!safetensors_dtype(tensors[i].scalar_type()))  // checked before anything is staged
        throw RunError("accel: save_state(): registered object '" + name + "' returned a " +
                       std::string(c10::toString(tensors[i].scalar_type())) + " tensor (#" + std::to_string(i) +
                       "); checkpoints hold float64/32/16, bfloat16, int64/32/16/8, uint8 and bool tensors");
      // A copy: the program may change its tensors once save_state() returned, before an
      // asynchronous save has written them.
      objects.emplace_back(object_tensor_name(name, i), tensors[i].detach().cpu().clone(at::MemoryFormat::Contiguous));
    }
    object_counts[name] = tensors.size();
  }
  nlohmann::json extras_record = nlohmann::json::array();
  for (const auto& [name, shape] : shapes_of(extras)) extras_record.push_back({{"name", name}, {"shape", shape}});

  api::CheckpointEngine::SaveRequest request;
  request.steps_done = at.steps;
  request.record = format_ ? format_->keys() : nlohmann::json::object();
  request.record.update({{"writer", format_ ? format_->writer : std::string(kApiWriter)},
                         {"micro_batch_size", t.micro_batch_size},
                         {"gradient_accumulation_steps", at.accumulation},
                         {"global_batch_rows", int64_t(comm_.size()) * t.micro_batch_size * at.accumulation},
                         {"seed", t.seed},
                         {"objects", object_counts},
                         {"module_extras", extras_record}});
  if (!at.loss_scaling.empty()) request.record["loss_scaling"] = at.loss_scaling;
  request.write_files = [&](const std::string&, engine::TensorFileSink& files) {
    if (!eng.writes_shared_files()) return;
    if (!extras.empty()) files.write(kModuleExtrasFile, extras);
    if (!objects.empty()) files.write(kObjectsFile, objects);
  };
  if (format_ && format_->after_files)  // may run on the background thread: nothing of this frame
    request.after_files = [this, steps = at.steps](bool in_background) { format_->after_files(steps, in_background); };
  const std::string dir = eng.save(request);
  if (comm_.rank() == 0)
    logging::info(std::string(eng.async() ? "accel: saving " : "accel: saved ") + dir + " (" +
                  std::to_string(at.steps) + " steps)" + (eng.async() ? " in the background" : ""));
  return dir;
}

void StateIo::wait_for_saves() {
  for (auto& [root, eng] : engines_) eng->wait();
}

void StateIo::before_state_changes() {
  for (auto& [root, eng] : engines_) eng->before_state_changes();
}

nlohmann::json StateIo::async_times() const {
  api::CheckpointEngine::AsyncTimes sum;
  for (const auto& [root, eng] : engines_) {
    const auto& t = eng->async_times();
    sum.saves += t.saves;
    sum.fence_wait_s += t.fence_wait_s;
    sum.background_s += t.background_s;
    sum.background_cpu_s += t.background_cpu_s;
    sum.fence_waits.insert(sum.fence_waits.end(), t.fence_waits.begin(), t.fence_waits.end());
  }
  return {{"saves", sum.saves}, {"fence_wait", sum.fence_wait_s}, {"fence_waits", sum.fence_waits},
          {"background", sum.background_s}, {"background_cpu", sum.background_cpu_s}};
}

void StateIo::check_fits(const std::string& dir, const nlohmann::json& record, torch::nn::Module& model,
                         const engine::OptimizerSetup& optimizer) const {
  const std::string file = dir + "/" + api::kStateRecordFile;
  const std::string writer = record.value("writer", std::string("the accel trainer"));
  if (format_) {
    format_->check(dir, record);  // names what it does not recognise first (the trainer: "not a trainer state")
    if (writer != format_->writer)
      throw CheckpointError(file + ": written by " + writer + ", not by " + format_->writer +
                            ": its loop state does not describe this one's; resume it with the program that saved it, "
                            "or set training.resume: never");
  } else if (writer != kApiWriter)
    throw CheckpointError(file + ": written by " + writer + " (model " +
                          record.value("model", nlohmann::json::object()).value("name", std::string("?")) +
                          "), not by Accelerator::save_state: its loop state does not describe your program's; "
                          "export its weights with `accel merge-weights " + dir + " -o weights.safetensors` and "
                          "load those into your module instead");
  // The parameters the backend trains, names and shapes: the zero layout record lists them (so
  // no shard file is opened: on node-local storage some are on other machines); a replicated
  // checkpoint's are its model file's header, which every storage holds.
  const nlohmann::json layout = record.value("backend_state", nlohmann::json::object());
  Shapes saved;
  std::vector<std::string> saved_kinds;
  if (layout.value("layout", "") == "zero" && layout.value("format", 1) >= engine::kZeroLayoutFormat) {
    for (const auto& unit : layout.value("units", nlohmann::json::array()))
      for (const auto& p : unit.value("params", nlohmann::json::array()))
        saved.emplace_back(p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>());
    saved_kinds = layout.value("state_kinds", std::vector<std::string>{});
  } else {
    const auto canonical = engine::CanonicalState::open(dir, layout);
    for (const auto& p : canonical->params()) saved.emplace_back(p.name, p.shape);
    saved_kinds = canonical->state_kinds();
  }
  // The optimizer's states (the same rule as the engines': AdamW's moments, SGD's momentum if any
  // group uses it), checked here because a same-layout load reads the shard files as they are.
  std::vector<std::string> kinds;
  if (optimizer.kind == config::OptimizerName::adamw) kinds = {"exp_avg", "exp_avg_sq"};
  else if (optimizer.keeps_momentum()) kinds = {"momentum"};
  using KindSet = std::set<std::string>;
  if (KindSet(saved_kinds.begin(), saved_kinds.end()) != KindSet(kinds.begin(), kinds.end()))
    throw CheckpointError("accel: load_state(): checkpoint " + dir + " holds optimizer state " +
                          engine::describe_state_kinds(saved_kinds) + " but the prepared optimizer keeps " +
                          engine::describe_state_kinds(kinds) + "; prepare the optimizer the saving program used "
                          "(AdamW/Adam, or SGD with or without momentum)");
  std::vector<std::string> diff = differences(saved, shapes_of(module_params(model, /*trainable=*/true)));
  // Frozen parameters and buffers, from the record.
  Shapes saved_extras;
  for (const auto& e : record.value("module_extras", nlohmann::json::array()))
    saved_extras.emplace_back(e.at("name").get<std::string>(), e.at("shape").get<std::vector<int64_t>>());
  for (auto& d : differences(saved_extras, shapes_of(module_extras(model)))) diff.push_back("buffers/frozen: " + d);
  if (!diff.empty())
    throw CheckpointError("accel: load_state(): checkpoint " + dir + " does not fit the prepared module (trained "
                          "parameters from " + file + "'s backend_state, buffers and frozen parameters from its "
                          "module_extras):" + joined(diff) +
                          "\nload it into the same module (classes, sizes, which parameters are frozen) as the "
                          "program that saved it, or start afresh (training.resume: never)");
  // Registered objects: the same names on both sides.
  std::vector<std::string> objects_diff;
  const nlohmann::json saved_objects = record.value("objects", nlohmann::json::object());
  for (const auto& [name, _] : objects_)
    if (!saved_objects.contains(name)) objects_diff.push_back("'" + name + "' is registered but not in the checkpoint");
  for (const auto& [name, _] : saved_objects.items())
    if (!objects_.count(name)) objects_diff.push_back("'" + name + "' is in the checkpoint but not registered");
  if (!objects_diff.empty())
    throw CheckpointError("accel: load_state(): the objects registered for checkpointing differ from those " + file +
                          " lists:" + joined(objects_diff) +
                          "\nregister_for_checkpointing() the same names as the program that saved it, before "
                          "load_state()");
  const auto& t = job_.job.training;
  const int64_t rows = int64_t(comm_.size()) * t.micro_batch_size * t.gradient_accumulation_steps;
  if (record.value("global_batch_rows", rows) != rows && comm_.rank() == 0)
    logging::warn("accel: load_state(): " + dir + " was trained with a global batch of " +
                  std::to_string(record.value("global_batch_rows", rows)) + " rows, this run has " +
                  std::to_string(rows) + " (world size x training.micro_batch_size x gradient_accumulation_steps): "
                  "it resumes, and trains differently from the saving run from here on");
}

std::optional<int64_t> StateIo::load(const std::string& dir, engine::Backend& backend, torch::nn::Module& model,
                                     const LoopPosition& at) {
  refuse_mid_step("load_state()", at);
  wait_for_saves();  // a save in flight reads the state this replaces, and may be the one to load
  api::CheckpointEngine& own = engine("", backend);
  std::optional<std::string> source;
  if (dir.empty()) {
    source = own.resume_dir();  // training.resume: auto, never, or a directory
  } else if (fs::exists(fs::path(dir) / checkpoint::kManifestName)) {
    source = dir;
  } else if (fs::exists(fs::path(dir) / checkpoint::kLatestName)) {
    source = engine(dir, backend).latest();
  } else {
    throw CheckpointError("accel: load_state(" + dir + "): neither a checkpoint (no " + dir + "/" +
                          checkpoint::kManifestName + ") nor a checkpoints root (no " + dir + "/" +
                          checkpoint::kLatestName + "); give the directory save_state() returned, or the root "
                          "given to it");
  }
  if (!source) return std::nullopt;
  const nlohmann::json record =
      own.load(*source, [&](const nlohmann::json& r) { check_fits(*source, r, model, backend.optimizer_setup()); });
  backend.wait_parameters();  // the sharded engines re-gather the restored masters
  loaded_record_ = record;

  at::NoGradGuard no_grad;
  if (!record.value("module_extras", nlohmann::json::array()).empty()) {
    const std::string path = *source + "/" + kModuleExtrasFile;
    std::map<std::string, at::Tensor> saved;
    for (auto& [name, t] : engine::load_safetensors(path)) saved.emplace(name, t);
    for (auto& [name, value] : module_extras(model)) {
      auto it = saved.find(name);
      if (it == saved.end() || it->second.sizes() != value.sizes())
        throw CheckpointError(path + " has no tensor '" + name + "' of shape " + shape_text(value.sizes().vec()) +
                              " though its state record lists it: the checkpoint is inconsistent; save it afresh");
      value.copy_(it->second);
    }
  }
  std::map<std::string, std::vector<at::Tensor>> by_object;
  const nlohmann::json counts = record.value("objects", nlohmann::json::object());
  if (!counts.empty()) {
    const std::string path = *source + "/" + kObjectsFile;
    std::map<std::string, at::Tensor> saved;
    for (auto& [name, t] : engine::load_safetensors(path)) saved.emplace(name, t);
    for (const auto& [name, count] : counts.items())
      for (size_t i = 0; i < count.get<size_t>(); ++i) {
        auto it = saved.find(object_tensor_name(name, i));
        if (it == saved.end())
          throw CheckpointError(path + " has no tensor '" + object_tensor_name(name, i) + "' of object '" + name +
                                "' though its state record lists it: the checkpoint is inconsistent; save it afresh");
        by_object[name].push_back(it->second);
      }
  }
  for (auto& [name, object] : objects_) object.load(by_object[name]);
  const int64_t steps = record["steps_done"].get<int64_t>();
  if (comm_.rank() == 0) logging::info("accel: loaded " + *source + " (" + std::to_string(steps) + " steps)");
  return steps;
}

}  // namespace accel::api
