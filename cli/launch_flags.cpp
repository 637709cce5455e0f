#include "cli/launch_flags.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "runtime/common/errors.hpp"

namespace accel::cli {
namespace {

namespace fs = std::filesystem;

// Accelerate's flag (its name in `accelerate launch --help`) and the job key it sets.
struct ValueFlag {
  const char* flag;
  const char* key;
  const char* help;
};

constexpr ValueFlag kValueFlags[] = {
    {"num_processes", "num_processes", "Worker processes per machine (num_processes)"},
    {"num_machines", "num_machines", "Machines in the job (num_machines)"},
    {"machine_rank", "machine_rank", "This machine's rank, 0..num_machines-1 (machine_rank)"},
    {"main_process_ip", "main_process_ip", "Address of machine 0 (main_process_ip)"},
    {"main_process_port", "main_process_port", "Rendezvous port on machine 0 (main_process_port)"},
    {"mixed_precision", "mixed_precision", "no | fp16 | bf16 (mixed_precision)"},
    {"max_restarts", "max_restarts", "Elastic restarts after a failure (max_restarts)"},
    {"rdzv_backend", "rdzv_backend", "Elastic jobs' rendezvous: static | etcd (rdzv_backend)"},
    {"rdzv_endpoint", "rdzv_endpoint", "etcd's client addresses, host:port[,host:port...] (rdzv_endpoint)"},
    {"gradient_accumulation_steps", "training.gradient_accumulation_steps",
     "Micro-steps per optimizer step (training.gradient_accumulation_steps)"},
    {"gradient_clipping", "training.max_grad_norm", "Clip gradients to this norm (training.max_grad_norm)"},
    {"zero_stage", "deepspeed.zero_stage", "DeepSpeed ZeRO stage 0-3 (deepspeed.zero_stage)"},
    {"offload_optimizer_device", "deepspeed.offload_optimizer_device",
     "none | cpu | nvme (deepspeed.offload_optimizer_device)"},
    {"offload_param_device", "deepspeed.offload_param_device", "none | cpu | nvme (deepspeed.offload_param_device)"},
    {"fsdp_sharding_strategy", "fsdp.sharding_strategy",
     "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD (fsdp.sharding_strategy)"},
    {"fsdp_backward_prefetch", "fsdp.backward_prefetch", "BACKWARD_PRE | BACKWARD_POST | NO_PREFETCH (fsdp.backward_prefetch)"},
    {"fsdp_state_dict_type", "fsdp.state_dict_type", "FULL_STATE_DICT | SHARDED_STATE_DICT (fsdp.state_dict_type)"},
    {"fsdp_offload_params", "fsdp.offload_params", "true | false (fsdp.offload_params)"},
    {"fsdp_activation_checkpointing", "fsdp.activation_checkpointing", "true | false (fsdp.activation_checkpointing)"},
};

// Accelerate's switches and the key = value each stands for.
struct SwitchFlag {
  const char* flag;
  const char* key;
  const char* value;
  const char* help;
};

constexpr SwitchFlag kSwitchFlags[] = {
    {"use_deepspeed", "backend", "deepspeed", "DeepSpeed semantics (backend: deepspeed)"},
    {"use_fsdp", "backend", "fsdp", "FSDP semantics (backend: fsdp)"},
    {"multi_gpu", "device", "cuda", "Train on this machine's GPUs (device: cuda)"},
    {"cpu", "device", "cpu", "Train on CPU processes (device: cpu)"},
};

// Both spellings: Accelerate's --num_processes and the dashed --num-processes.
std::string names_of(const char* flag) {
  std::string dashed = flag;
  for (char& c : dashed)
    if (c == '_') c = '-';
  return dashed == flag ? "--" + dashed : "--" + std::string(flag) + ",--" + dashed;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The file `name` (no slash) names on PATH, as execvp(3) would find it; empty when none.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return {};
}

}  // namespace

void add_accelerate_flags(CLI::App* launch, const std::shared_ptr<AccelerateFlags>& flags) {
  const std::string group = "Accelerate's flags (each sets the job key named; --set sets any key)";
  launch->add_option("--config_file,--config-file", flags->config_file,
                     "The job file (Accelerate's spelling; the same as naming it first)")
      ->group(group);
  for (const auto& f : kValueFlags) {
    auto* opt = launch->add_option_function<std::string>(
        names_of(f.flag), [flags, name = std::string(f.flag)](const std::string& v) { flags->given.emplace_back(name, v); },
        f.help);
    opt->group(group)->allow_extra_args(false);
  }
  for (const auto& f : kSwitchFlags)
    launch->add_flag_function(
              names_of(f.flag), [flags, name = std::string(f.flag)](int64_t) { flags->given.emplace_back(name, ""); },
              f.help)
        ->group(group);
}

std::vector<config::Assignment> flag_assignments(const AccelerateFlags& flags) {
  std::vector<config::Assignment> out;
  bool deepspeed = false, fsdp = false;
  for (const auto& [name, value] : flags.given) {
    deepspeed = deepspeed || name == "use_deepspeed";
    fsdp = fsdp || name == "use_fsdp";
    for (const auto& f : kValueFlags)
      if (name == f.flag)
        out.push_back({f.key, YAML::Node(value), Location::command_line("--" + name + " " + value)});
    for (const auto& f : kSwitchFlags)
      if (name == f.flag) out.push_back({f.key, YAML::Node(std::string(f.value)), Location::command_line("--" + name)});
  }
  if (deepspeed && fsdp)
    throw UsageError("--use_deepspeed and --use_fsdp name two backends; give one (the job's backend: key, "
                     "or --set backend=deepspeed|fsdp)");
  return out;
}

std::vector<std::string> describe_flags(const AccelerateFlags& flags) {
  std::vector<std::string> lines;
  for (const auto& a : flag_assignments(flags))
    lines.push_back(a.where.detail + " -> " + a.path + ": " + a.value.Scalar());
  return lines;
}

LaunchTarget classify_launch_target(const std::string& arg) {
  if (ends_with(arg, ".py")) return LaunchTarget::PythonScript;
  if (ends_with(arg, ".yaml") || ends_with(arg, ".yml") || ends_with(arg, ".json")) return LaunchTarget::JobFile;
  std::error_code ec;
  if (fs::exists(arg, ec)) return is_executable_file(arg) ? LaunchTarget::Program : LaunchTarget::JobFile;
  if (arg.find('/') == std::string::npos && !find_on_path(arg).empty()) return LaunchTarget::Program;
  return LaunchTarget::NotFound;
}

std::string resolve_program(const std::string& arg) {
  if (arg.find('/') == std::string::npos && !fs::exists(arg)) return find_on_path(arg);
  return fs::absolute(arg).lexically_normal().string();
}

std::vector<std::string> split_program_arguments(const CLI::App& app, const std::vector<std::string>& argv,
                                                 std::vector<std::string>& program_args) {
  const CLI::App* launch = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return a->get_name() == "launch"; }))
    launch = sub;
  size_t i = 1;
  while (i < argv.size() && !argv[i].empty() && argv[i][0] == '-') ++i;  // the app's own flags (--version)
  if (!launch || i >= argv.size() || argv[i] != "launch") return argv;
  auto takes_value = [&](const std::string& token) {
    const std::string name = token.substr(0, token.find('='));
    if (name.size() != token.size()) return false;  // --flag=value carries its value
    for (const CLI::Option* opt : launch->get_options()) {
      if (opt->get_expected_min() == 0) continue;  // a flag: no value follows it
      for (const auto& l : opt->get_lnames())
        if (name == "--" + l) return true;
      for (const auto& s : opt->get_snames())
        if (name == "-" + s) return true;
    }
    return false;
  };
  int positionals = 0;
  for (++i; i < argv.size(); ++i) {
    const std::string& token = argv[i];
    if (token == "--") return argv;  // CLI11's own separator: left to it
    if (token.size() > 1 && token[0] == '-') {
      if (takes_value(token)) ++i;
      continue;
    }
    ++positionals;
    // The first positional is a job file unless it names a program; a second is always the program.
    const LaunchTarget kind = classify_launch_target(token);
    if (positionals == 2 || kind != LaunchTarget::JobFile) {
      program_args.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
      return {argv.begin(), argv.begin() + static_cast<std::ptrdiff_t>(i) + 1};
    }
  }
  return argv;
}

}  // namespace accel::cli
