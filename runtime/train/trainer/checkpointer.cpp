#include "runtime/train/trainer/checkpointer.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "runtime/common/errors.hpp"
#include "runtime/train/checkpoint/checkpoint_store.hpp"
#include "runtime/train/model/safetensors.hpp"

namespace accel::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTrainerFile = "trainer.json";
constexpr const char* kJobFile = "job.resolved.yaml";

std::string rng_file(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rng_rank_%05d.safetensors", rank);
  return buf;
}

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

Checkpointer::Checkpointer(const config::LoadedJob& job, comm::Communicator& comm, backends::Backend& backend,
                           const Dataset& data, const FaultInjector& faults)
    : job_(job),
      comm_(comm),
      backend_(backend),
      data_(data),
      faults_(faults),
      root_(ckpt::checkpoints_root(job.job.training.output_dir)) {}

std::optional<std::string> Checkpointer::resume_dir() const {
  const std::string& resume = job_.job.training.resume;
  if (resume == "never") return std::nullopt;
  if (resume == "auto") return ckpt::find_latest_checkpoint(root_);
  if (!fs::is_directory(resume))
    throw RunError("training.resume: checkpoint directory " + resume +
                   " does not exist; give a step_N directory under <output_dir>/checkpoints, auto, or never");
  return resume;
}

nlohmann::json Checkpointer::trainer_state(int64_t steps_done, const nlohmann::json& backend_layout,
                                           const nlohmann::json& loop_state) const {
  const auto& j = job_.job;
  const auto& t = j.training;
  return {{"steps_done", steps_done},
          {"max_steps", t.max_steps},
          {"backend", config::to_string(j.backend)},
          {"backend_state", backend_layout},
          {"loop_state", loop_state},
          {"world_size", comm_.size()},
          {"micro_batch_size", t.micro_batch_size},
          {"gradient_accumulation_steps", t.gradient_accumulation_steps},
          {"global_batch_rows", int64_t(comm_.size()) * t.micro_batch_size * t.gradient_accumulation_steps},
          {"seed", t.seed},
          {"data", data_.state()},
          {"model",
           {{"name", config::to_string(j.model.name)},
            {"n_layer", j.model.n_layer},
            {"n_head", j.model.n_head},
            {"n_embd", j.model.n_embd},
            {"vocab_size", j.model.vocab_size},
            {"block_size", j.model.block_size}}}};
}

std::string Checkpointer::save(int64_t steps_done, const nlohmann::json& loop_state) {
  int rank = comm_.rank();
  std::string staging = root_ + "/." + std::string("tmp.") + ckpt::step_dir_name(steps_done);
  if (rank == 0) staging = ckpt::begin_checkpoint(root_, steps_done);
  comm_.barrier()->wait();  // the staging directory exists before anyone writes into it

  nlohmann::json layout = backend_.save_state(staging);
  save_safetensors(staging + "/" + rng_file(rank), {{"torch_cpu", cpu_rng_state()}});
  if (rank == 0) {
    ckpt::write_file_synced(staging + "/" + kTrainerFile, trainer_state(steps_done, layout, loop_state).dump(2) + "\n");
    if (!job_.file.empty()) fs::copy_file(job_.file, staging + "/" + kJobFile, fs::copy_options::overwrite_existing);
  }
  faults_.at("checkpoint_write", steps_done - 1);
  comm_.barrier()->wait();  // every rank's files are complete before the manifest seals them

  std::string final_dir = root_ + "/" + ckpt::step_dir_name(steps_done);
  if (rank == 0)
    final_dir = ckpt::commit_checkpoint(root_, steps_done,
                                        {{"backend", config::to_string(job_.job.backend)}, {"world_size", comm_.size()}});
  comm_.barrier()->wait();  // nobody moves on (or resumes) before `latest` names the new checkpoint
  return final_dir;
}

int64_t Checkpointer::load(const std::string& dir) {
  ckpt::Manifest manifest = ckpt::verify_checkpoint(dir);
  nlohmann::json state;
  {
    std::ifstream in(dir + "/" + kTrainerFile);
    state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (state.is_discarded() || !state.contains("steps_done") || !state.contains("data"))
    throw ckpt::CheckpointError(dir + "/" + kTrainerFile + " is not a trainer state (written by another program?)");
  int64_t steps = state["steps_done"].get<int64_t>();
  if (steps != manifest.step)
    throw ckpt::CheckpointError(dir + "/" + kTrainerFile + " says " + std::to_string(steps) +
                                " steps but the manifest says " + std::to_string(manifest.step));
  data_.check_state(state["data"]);
  backend_.load_state(dir, state.value("backend_state", nlohmann::json::object()));
  loaded_loop_state_ = state.value("loop_state", nlohmann::json::object());
  std::string rng = dir + "/" + rng_file(comm_.rank());
  if (fs::exists(rng)) {
    auto tensors = load_safetensors(rng);
    if (tensors.size() == 1) set_cpu_rng_state(tensors[0].second);
  }
  return steps;
}

}  // namespace accel::train
