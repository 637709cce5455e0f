#include "runtime/config/validate.hpp"

#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "runtime/config/schema.hpp"

namespace fs = std::filesystem;

namespace accel::config {
namespace {

// Collects problems with the location of the key at fault and a note on the key it conflicts with.
class Checker {
 public:
  Checker(const JobConfig& job, const std::map<std::string, Location>& sources, std::vector<Diagnostic>& errors,
          std::vector<Diagnostic>& warnings)
      : job_(job), sources_(sources), errors_(errors), warnings_(warnings) {}

  std::string value(const std::string& path) const { return value_to_yaml(find_field(path)->get(job_)); }
  Location where(const std::string& path) const { return sources_.at(path); }
  // "deepspeed.zero_stage is 2 (set at job.yaml:4:15)"
  std::string about(const std::string& path) const {
    return path + " is " + value(path) + " (" + (where(path).origin == Location::Origin::Default ? "the default" : "set at " + where(path).str()) + ")";
  }

  void error(const std::string& path, std::string message, std::string allowed, std::string hint) {
    errors_.push_back({path, where(path), std::move(message), value(path), std::move(allowed), std::move(hint)});
  }
  void warning(const std::string& path, std::string message, std::string hint) {
    warnings_.push_back({path, where(path), std::move(message), value(path), "", std::move(hint)});
  }
  bool is_set(const std::string& path) const { return where(path).origin != Location::Origin::Default; }

 private:
  const JobConfig& job_;
  const std::map<std::string, Location>& sources_;
  std::vector<Diagnostic>& errors_;
  std::vector<Diagnostic>& warnings_;
};

void check_world(const JobConfig& j, Checker& c) {
  if (j.num_processes % j.num_machines != 0)
    c.error("num_processes", "must be a multiple of num_machines (each machine runs the same number of workers)",
            "a multiple of " + std::to_string(j.num_machines), c.about("num_machines"));
  if (j.machine_rank >= j.num_machines)
    c.error("machine_rank", "must be smaller than num_machines", "0 .. " + std::to_string(j.num_machines - 1),
            c.about("num_machines"));
  if (j.main_process_port == 0 && j.num_machines > 1)
    c.error("main_process_port", "port 0 (pick a free port) only works on one machine", "1 .. 65535",
            "choose a fixed port every machine can reach; " + c.about("num_machines"));
  if (j.device == Device::cpu && c.is_set("cuda_collectives"))
    c.warning("cuda_collectives", "has no effect on device cpu (CPU workers always use Gloo)", c.about("device"));
}

void check_deepspeed(const JobConfig& j, Checker& c) {
  const auto& ds = j.deepspeed;
  if (ds.offload_param_device != OffloadDevice::none && ds.zero_stage != 3)
    c.error("deepspeed.offload_param_device", "parameter offload needs ZeRO stage 3 (only stage 3 partitions "
            "parameters)", "none when zero_stage < 3", "set deepspeed.zero_stage: 3, or offload_param_device: none; " +
            c.about("deepspeed.zero_stage"));
  if (ds.offload_optimizer_device != OffloadDevice::none && ds.zero_stage == 0)
    c.error("deepspeed.offload_optimizer_device", "optimizer offload needs ZeRO stage 1, 2 or 3",
            "none when zero_stage is 0", "set deepspeed.zero_stage: 1 or higher; " + c.about("deepspeed.zero_stage"));
  if (ds.offload_optimizer_device == OffloadDevice::nvme && ds.offload_optimizer_nvme_path.empty())
    c.error("deepspeed.offload_optimizer_device", "nvme offload needs a directory for its files", "",
            "set deepspeed.offload_optimizer_nvme_path");
  if (ds.offload_param_device == OffloadDevice::nvme && ds.offload_param_nvme_path.empty())
    c.error("deepspeed.offload_param_device", "nvme offload needs a directory for its files", "",
            "set deepspeed.offload_param_nvme_path");
  int per_machine = j.num_processes / std::max(1, j.num_machines);
  if (ds.zero_hpz_partition_size > 1 && (per_machine % ds.zero_hpz_partition_size != 0 || ds.zero_stage != 3))
    c.error("deepspeed.zero_hpz_partition_size", "hierarchical partitioning needs zero_stage 3 and must divide the "
            "processes per machine (" + std::to_string(per_machine) + ")", "1, or a divisor of " +
            std::to_string(per_machine), c.about("deepspeed.zero_stage"));
  if (j.backend == Backend::deepspeed && j.mixed_precision != MixedPrecision::fp16) {
    for (const char* key : {"deepspeed.loss_scale", "deepspeed.initial_scale_power", "deepspeed.loss_scale_window",
                            "deepspeed.hysteresis", "deepspeed.min_loss_scale"})
      if (c.is_set(key)) c.warning(key, "has no effect: loss scaling applies to fp16 only", c.about("mixed_precision"));
  }
}

void check_fsdp(const JobConfig& j, Checker& c) {
  const auto& f = j.fsdp;
  if (f.auto_wrap_policy == AutoWrapPolicy::TRANSFORMER_BASED_WRAP && f.transformer_layer_cls_to_wrap.empty())
    c.error("fsdp.transformer_layer_cls_to_wrap", "TRANSFORMER_BASED_WRAP needs the layer class to wrap",
            j.model.name == ModelName::gpt ? "Block" : "Layer", "name the unit class, or choose another auto_wrap_policy");
  if (j.backend == Backend::fsdp && f.sharding_strategy == ShardingStrategy::HYBRID_SHARD && j.num_machines == 1)
    c.warning("fsdp.sharding_strategy", "HYBRID_SHARD on one machine shards like FULL_SHARD (nothing to replicate "
              "across)", c.about("num_machines"));
}

void check_model_and_training(const JobConfig& j, Checker& c) {
  if (j.model.n_embd % j.model.n_head != 0)
    c.error("model.n_embd", "must be divisible by model.n_head (each head gets n_embd / n_head channels)",
            "a multiple of " + std::to_string(j.model.n_head), c.about("model.n_head"));
  if (j.training.seq_len > j.model.block_size)
    c.error("training.seq_len", "is longer than the model's position table", "1 .. " + std::to_string(j.model.block_size),
            c.about("model.block_size") + "; raise it or shorten seq_len");
  if (j.data.kind == DataKind::text && j.model.vocab_size < 256)
    c.error("model.vocab_size", "byte-level text needs a vocabulary of at least 256", ">= 256", c.about("data.kind"));
  if (j.scheduler.warmup_steps > j.training.max_steps)
    c.warning("scheduler.warmup_steps", "is longer than the run; the learning rate never reaches its peak",
              c.about("training.max_steps"));
  if (j.model.dtype == ParamDtype::bf16 && j.mixed_precision == MixedPrecision::fp16)
    c.error("mixed_precision", "fp16 compute with parameters loaded in bf16 mixes two 16-bit formats",
            "no | bf16 when model.dtype is bf16", c.about("model.dtype"));
  if (j.training.resume != "auto" && j.training.resume != "never" && j.training.resume.empty())
    c.error("training.resume", "must be auto, never or a checkpoint path", "auto | never | PATH", "");
}

// The nearest existing ancestor of `dir` must be a writable directory, so the job can create it.
bool creatable_dir(const fs::path& dir, std::string& why) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      why = "exists and is not a directory";
      return false;
    }
    if (access(dir.c_str(), W_OK) != 0) {
      why = "is not writable";
      return false;
    }
    return true;
  }
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec)) parent = parent.parent_path();
  if (parent.empty() || !fs::is_directory(parent, ec) || access(parent.c_str(), W_OK) != 0) {
    why = "cannot be created (" + parent.string() + " is not a writable directory)";
    return false;
  }
  return true;
}

// A name with a slash is a path; a bare name is looked up on PATH, as execvp does.
bool find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 && !fs::is_directory(name);
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return true;
    start = end + 1;
  }
  return false;
}

void check_paths(const JobConfig& j, Checker& c) {
  std::error_code ec;
  if (j.data.kind != DataKind::synthetic) {
    if (j.data.path.empty())
      c.error("data.kind", "needs a data file", "", "set data.path to the " + std::string(j.data.kind == DataKind::text ? "text" : "token (.bin)") + " file");
    else if (!fs::is_regular_file(j.data.path, ec))
      c.error("data.path", "file does not exist", "", "check the path; relative paths resolve against the job file's directory");
  } else if (!j.data.path.empty()) {
    c.warning("data.path", "has no effect with data.kind synthetic", "set data.kind: text or tokens to use the file");
  }
  if (!j.training.init_from.empty() && !fs::is_regular_file(j.training.init_from, ec))
    c.error("training.init_from", "file does not exist", "", "point it at a safetensors weights file");
  if (j.training.resume != "auto" && j.training.resume != "never" && !fs::is_directory(j.training.resume, ec))
    c.error("training.resume", "checkpoint directory does not exist", "auto | never | PATH", "");
  if (!j.program.empty() && !find_executable(j.program.front()))
    c.error("program", "the program is not an executable file" + std::string(j.program.front().find('/') == std::string::npos ? " on PATH" : ""),
            "", "give the path of an executable (relative paths resolve against the working directory)");
  std::string why;
  if (!creatable_dir(j.training.output_dir, why)) c.error("training.output_dir", "directory " + why, "", "choose another directory");
  if (j.deepspeed.offload_optimizer_device == OffloadDevice::nvme && !j.deepspeed.offload_optimizer_nvme_path.empty() &&
      !creatable_dir(j.deepspeed.offload_optimizer_nvme_path, why))
    c.error("deepspeed.offload_optimizer_nvme_path", "directory " + why, "", "choose a directory on a fast local disk");
  if (j.deepspeed.offload_param_device == OffloadDevice::nvme && !j.deepspeed.offload_param_nvme_path.empty() &&
      !creatable_dir(j.deepspeed.offload_param_nvme_path, why))
    c.error("deepspeed.offload_param_nvme_path", "directory " + why, "", "choose a directory on a fast local disk");
}

}  // namespace

void validate_job(const JobConfig& job, const std::map<std::string, Location>& sources, bool paths,
                  std::vector<Diagnostic>& errors, std::vector<Diagnostic>& warnings) {
  Checker c(job, sources, errors, warnings);
  check_world(job, c);
  check_deepspeed(job, c);
  check_fsdp(job, c);
  check_model_and_training(job, c);
  if (paths) check_paths(job, c);
}

}  // namespace accel::config
