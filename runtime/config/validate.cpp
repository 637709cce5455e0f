#include "runtime/config/validate.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/config/elastic_rules.hpp"
#include "runtime/config/job_checker.hpp"
#include "runtime/config/model_section.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/config/schema.hpp"

namespace fs = std::filesystem;

namespace accel::config {
namespace {

void check_world(const JobConfig& j, JobChecker& c) {
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

// llama's own keys: its cross-key rules, Mistral's sliding window where it would mask something,
// and (warnings) llama keys set on another model.
void check_llama_keys(const JobConfig& j, JobChecker& c) {
  static const char* const kLlamaKeys[] = {
      "model.n_kv_head", "model.intermediate_size", "model.head_dim", "model.rope_theta", "model.rope_scaling",
      "model.rope_scaling_factor", "model.rope_scaling_low_freq_factor", "model.rope_scaling_high_freq_factor",
      "model.rope_scaling_original_max_position_embeddings", "model.norm_eps", "model.tie_word_embeddings",
      "model.attention_bias", "model.mlp_bias", "model.sliding_window"};
  if (j.model.name != ModelName::llama) {
    for (const char* key : kLlamaKeys)
      if (c.is_set(key))
        c.warning(key, "applies to model.name llama only; it has no effect on " + to_string(j.model.name),
                  "remove it, or set model.name: llama");
    return;
  }
  for (const auto& d : llama_problems(j.model)) c.error(d.key_path, d.message, d.allowed, d.hint);
  if (j.model.sliding_window > 0 && j.training.seq_len > j.model.sliding_window)
    c.error("model.sliding_window", "sliding-window attention is not implemented; with training.seq_len above the "
            "window it would mask what full causal attention sees",
            "0, or >= training.seq_len (" + std::to_string(j.training.seq_len) + ")",
            c.about("training.seq_len") + "; shorten seq_len to the window (then it masks nothing)");
}

void check_model_and_training(const JobConfig& j, JobChecker& c) {
  check_llama_keys(j, c);
  if (j.model.n_embd % j.model.n_head != 0 && j.model.name != ModelName::llama)
    c.error("model.n_embd", "must be divisible by model.n_head (each head gets n_embd / n_head channels)",
            "a multiple of " + std::to_string(j.model.n_head), c.about("model.n_head"));
  if (j.training.seq_len > j.model.block_size)
    c.error("training.seq_len", j.model.name == ModelName::llama ? "is longer than the longest sequence the model takes"
                                                                  : "is longer than the model's position table",
            "1 .. " + std::to_string(j.model.block_size),
            c.about("model.block_size") + "; raise it or shorten seq_len");
  if (j.data.kind == DataKind::text && j.data.tokenizer.empty() && j.model.vocab_size < 256)
    c.error("model.vocab_size", "byte-level text needs a vocabulary of at least 256", ">= 256", c.about("data.kind"));
  if (j.scheduler.warmup_steps > j.training.max_steps)
    c.warning("scheduler.warmup_steps", "is longer than the run; the learning rate never reaches its peak",
              c.about("training.max_steps"));
  if (j.model.dtype == ParamDtype::bf16 && j.mixed_precision == MixedPrecision::fp16)
    c.error("mixed_precision", "fp16 compute with parameters loaded in bf16 mixes two 16-bit formats",
            "no | bf16 when model.dtype is bf16", c.about("model.dtype"));
  if (j.training.resume != "auto" && j.training.resume != "never" && j.training.resume.empty())
    c.error("training.resume", "must be auto, never or a checkpoint path", "auto | never | PATH", "");
  if (!j.model.from_pretrained.empty() && !j.training.init_from.empty())
    c.error("training.init_from", "and model.from_pretrained both name starting weights", "one of the two",
            c.about("model.from_pretrained"));
  if (j.training.export_format == ExportFormat::hf && j.model.name == ModelName::mlp && j.training.save_weights)
    c.error("training.export_format", "hf writes a Hugging Face folder, which model.name " + to_string(j.model.name) +
            " has no architecture for", "safetensors", c.about("model.name"));
}

// The nearest existing ancestor of `dir` must be a writable directory, so the job can create it.
// Whether the launcher will be able to create `dir` (or write into it), found the way the launcher
// finds it: by trying, without leaving a trace. access(2) alone passes root everywhere, also where
// creating fails (/proc, a read-only or full file system).
bool creatable_dir(const fs::path& dir, std::string& why) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      why = "exists and is not a directory";
      return false;
    }
    // A random part too: on a shared file system other machines' processes may have this pid.
    const std::string probe = (dir / (".accel-validate-probe." + std::to_string(::getpid()) + "." +
                                      std::to_string(std::random_device{}()))).string();
    const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
    const int err = errno;
    if (fd < 0) {
      why = std::string("is not writable (") + std::strerror(err) + ")";
      return false;
    }
    ::close(fd);
    ::unlink(probe.c_str());
    return true;
  }
  fs::path parent = fs::absolute(dir, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec)) parent = parent.parent_path();
  if (parent.empty() || !fs::is_directory(parent, ec)) {
    why = "cannot be created (" + parent.string() + " is not a directory)";
    return false;
  }
  std::string probe = (parent / ".accel-validate-probe.XXXXXX").string();
  if (!::mkdtemp(probe.data())) {
    why = "cannot be created in " + parent.string() + " (" + std::strerror(errno) + ")";
    return false;
  }
  ::rmdir(probe.c_str());
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

void check_paths(const JobConfig& j, JobChecker& c) {
  std::error_code ec;
  if (j.data.kind != DataKind::synthetic) {
    if (j.data.path.empty())
      c.error("data.kind", "needs a data file", "", "set data.path to the " + std::string(j.data.kind == DataKind::text ? "text" : "token (.bin)") + " file");
    else if (!fs::is_regular_file(j.data.path, ec))
      c.error("data.path", "file does not exist", "", "check the path; relative paths resolve against the job file's directory");
  } else if (!j.data.path.empty()) {
    c.warning("data.path", "has no effect with data.kind synthetic", "set data.kind: text or tokens to use the file");
  }
  if (!j.data.tokenizer.empty() && j.data.kind != DataKind::text)
    c.error("data.tokenizer", "is only used with data.kind text", "", "set data.kind: text, or remove data.tokenizer");
  else if (!j.data.tokenizer.empty() && !fs::is_regular_file(j.data.tokenizer, ec))
    c.error("data.tokenizer", "file does not exist", "", "point it at a tokenizer.json; relative paths resolve against the job file's directory");
  if (j.data.tokenizer.empty() && j.data.format == DataFormat::jsonl)
    c.error("data.format", "jsonl needs a tokenizer", "text without data.tokenizer", "set data.tokenizer to a tokenizer.json");
  if (!j.training.init_from.empty() && !fs::is_regular_file(j.training.init_from, ec))
    c.error("training.init_from", "file does not exist", "", "point it at a safetensors weights file");
  if (j.training.resume != "auto" && j.training.resume != "never" && !fs::is_directory(j.training.resume, ec))
    c.error("training.resume", "checkpoint directory does not exist", "auto | never | PATH", "");
  if (!j.program.empty() && !find_executable(j.program.front()))
    c.error("program", "the program is not an executable file" + std::string(j.program.front().find('/') == std::string::npos ? " on PATH" : ""),
            "", "give the path of an executable (relative paths resolve against the job file's directory, "
            "or the working directory on the command line)");
  std::string why;
  if (!creatable_dir(j.training.output_dir, why)) c.error("training.output_dir", "directory " + why, "", "choose another directory");
  if (j.deepspeed.offload_optimizer_device == OffloadDevice::nvme && !j.deepspeed.offload_optimizer_nvme_path.empty() &&
      !creatable_dir(j.deepspeed.offload_optimizer_nvme_path, why))
    c.error("deepspeed.offload_optimizer_nvme_path", "directory " + why, "", "choose a directory on a fast local disk");
  if (j.deepspeed.offload_param_device == OffloadDevice::nvme && !j.deepspeed.offload_param_nvme_path.empty() &&
      !creatable_dir(j.deepspeed.offload_param_nvme_path, why))
    c.error("deepspeed.offload_param_nvme_path", "directory " + why, "", "choose a directory on a fast local disk");
}

// MLflow files the run under an experiment of this name; it takes any text but an empty one.
void check_tracking(const JobConfig& j, JobChecker& c) {
  const auto& names = j.tracking.log_with;
  const bool mlflow = std::find(names.begin(), names.end(), "mlflow") != names.end() ||
                      std::find(names.begin(), names.end(), "all") != names.end();
  if (mlflow && j.tracking.project_name.empty())
    c.error("tracking.project_name", "is empty, and MLflow needs an experiment name", "a non-empty name",
            c.about("tracking.log_with") + "; set a name, or leave the key out for 'accel'");
}

}  // namespace

void validate_job(const JobConfig& job, const std::map<std::string, Location>& sources, bool paths,
                  std::vector<Diagnostic>& errors, std::vector<Diagnostic>& warnings) {
  JobChecker c(job, sources, errors, warnings);
  check_world(job, c);
  check_elastic(job, c);
  // Every dialect's block, whatever backend: names (a block translated from another is checked
  // where it was written; docs/design/0005), in the registry's order.
  for (const std::string& name : plan::dialect_names())
    if (const plan::Dialect* dialect = plan::find_dialect(name); dialect->check_block) dialect->check_block(job, c);
  check_model_and_training(job, c);
  check_tracking(job, c);
  if (paths) check_paths(job, c);
}

}  // namespace accel::config
