// `accel launch JOB`: validates the job before anything is spawned, then starts and supervises
// this machine's workers. With `program:` the workers run the user's program; without it they run
// the built-in trainer (`accel-worker run`, task train). Problems the launcher can see before spawning
// (an option not built yet, a damaged checkpoint to resume from) are reported once, with exit 2.
// A job switched between deepspeed and fsdp prints its translated options first (backend_translation.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/launch_flags.hpp"
#include "cli/launch_support.hpp"
#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/config/backend_translation.hpp"
#include "runtime/config/dump.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/launch/gpu_probe.hpp"
#include "trainer/text/special_tokens.hpp"
#include "trainer/text/token_cache.hpp"
#include "trainer/text/tokenizer.hpp"

namespace accel::cli {
namespace {

Diagnostic diagnostic_for(const config::LoadedJob& loaded, const std::string& key, std::string message,
                          std::string hint) {
  Diagnostic d;
  d.key_path = key;
  auto it = loaded.sources.find(key);
  if (it != loaded.sources.end()) d.where = it->second;
  d.message = std::move(message);
  d.hint = std::move(hint);
  return d;
}

// What the job's plan refuses (not built) is a configuration error at the key that asks for it;
// an accepted key with no effect on this path is a warning naming it.
void check_plan(const config::LoadedJob& loaded) {
  const plan::ResolvedPlan resolved = plan::resolve_plan(loaded, plan::ModelFacts::builtin());
  std::vector<Diagnostic> refused;
  for (const auto& r : resolved.refusals) {
    Diagnostic d = diagnostic_for(loaded, r.key, r.message, r.hint);
    if (const auto* field = config::find_field(r.key)) d.value = config::value_to_yaml(field->get(loaded.job));
    d.allowed = r.allowed;
    refused.push_back(std::move(d));
  }
  if (!refused.empty()) throw ConfigError(refused);
  for (const auto& w : resolved.warnings) std::cerr << "warning: " << plan::describe(w) << "\n";
}

// The run writes logs, metrics and checkpoints under training.output_dir: a directory that cannot
// be created or written (read-only, no permission, a full disk) is found here, before anything
// starts, by writing one byte into it and into its checkpoints directory when there is one.
void check_output_dir_writable(const config::LoadedJob& loaded) {
  namespace fs = std::filesystem;
  const std::string& out = loaded.job.training.output_dir;
  std::string problem;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) problem = "cannot create " + out + ": " + ec.message();
  const std::string checkpoints = checkpoint::checkpoints_root(out);
  for (const std::string& dir : {out, checkpoints}) {
    if (!problem.empty() || !fs::is_directory(dir, ec)) continue;
    // pid and a random part: launchers of other machines (or containers) on a shared output_dir may
    // have the same pid, and all probe at once.
    const std::string probe = dir + "/.accel-write-probe." + std::to_string(::getpid()) + "." +
                              std::to_string(std::random_device{}());
    const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && ::write(fd, "x", 1) == 1 && ::fsync(fd) == 0;
    const int err = errno;
    if (fd >= 0) ok = ::close(fd) == 0 && ok;
    ::unlink(probe.c_str());
    if (!ok) problem = "cannot write into " + dir + ": " + std::strerror(err);
  }
  if (problem.empty()) return;
  auto d = diagnostic_for(loaded, "training.output_dir", problem,
                          "give a writable directory with free space (--set training.output_dir=PATH), or free "
                          "space / fix the permissions or the mount of this one");
  if (d.where.origin == Location::Origin::Default) d.where = Location::in_file(out, 0, 0);
  throw ConfigError(d);
}

// The strategy a checkpoint was written under, from the job record it carries ("deepspeed
// zero_stage 3, world 2"); its manifest's backend name when the record cannot be read.
std::string checkpoint_strategy(const std::string& dir, const checkpoint::Manifest& manifest) {
  std::string label = manifest.extra.value("backend", std::string("unknown backend"));
  try {
    config::LoadOptions options;
    options.file = dir + "/job.resolved.yaml";
    options.check_paths = false;
    label = plan::resolve_plan(config::load_job(options), plan::ModelFacts::builtin()).label;
  } catch (const std::exception&) {
  }
  if (manifest.extra.contains("world_size")) label += ", world " + manifest.extra["world_size"].dump();
  return label;
}

// Whether `dir` holds the built-in trainer's state (its record has the data position), rather than a
// program's Accelerator::save_state, which the trainer refuses with its own message.
bool is_trainer_state(const std::string& dir) {
  std::ifstream in(dir + "/trainer.json");
  const auto record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return record.is_object() && record.contains("data");
}

// What the built-in trainer would refuse at start, found before any worker is spawned. False when
// the checkpoint to resume from already holds every step: nothing is spawned and nothing of the
// finished run is rewritten (its job.resolved.yaml is what `accel report` reads).
bool check_trainer_can_start(const config::LoadedJob& loaded) {
  const auto& j = loaded.job;
  check_plan(loaded);
  // The checkpoint workers will resume from must be whole: say so now, once, naming the file.
  const std::string& resume = j.training.resume;
  if (resume == "never") return true;
  try {
    std::optional<std::string> dir;
    if (resume == "auto")
      dir = checkpoint::find_latest_checkpoint(checkpoint::checkpoints_root(j.training.output_dir));
    else if (std::filesystem::is_directory(resume))
      dir = resume;
    else
      throw checkpoint::CheckpointError("checkpoint directory " + resume + " does not exist");
    if (!dir) return true;
    // Node-local storage (docs/design/0013): this machine needs only the files it holds.
    auto manifest = checkpoint::verify_checkpoint(*dir, j.num_machines > 1 ? j.machine_rank : -1);
    const std::string written = checkpoint_strategy(*dir, manifest);
    const std::string now = plan::resolve_plan(loaded, plan::ModelFacts::builtin()).label + ", world " +
                            std::to_string(j.num_processes);
    // One machine only: the machines of a larger job agree on the step to resume from among them
    // (the oldest `latest`), so this machine's own checkpoint does not decide it alone.
    if (j.num_machines == 1 && manifest.step >= j.training.max_steps && is_trainer_state(*dir)) {
      std::cerr << "accel launch: nothing to train: " << *dir << " already holds " << manifest.step
                << " of training.max_steps " << j.training.max_steps << " steps (written under " << written
                << "); the finished run in " << j.training.output_dir << " is left as it is. To train further raise "
                << "training.max_steps; to start another run give another training.output_dir, or "
                << "--set training.resume=never to train over it\n";
      return false;
    }
    std::cerr << "accel launch: resuming from " << *dir << " (" << manifest.step << " steps done)\n";
    if (written != now)  // another backend, strategy or world size
      std::cerr << "accel launch: the checkpoint was written under " << written << " and resumes under " << now
                << ": its state is resharded into the new layout, and the run's record (job.resolved.yaml) will "
                << "say " << now << " from here on (give another training.output_dir to keep the runs apart)\n";
  } catch (const checkpoint::CheckpointError& e) {
    auto d = diagnostic_for(loaded, "training.resume", e.what(),
                            "set training.resume to another checkpoint directory, or never to start over");
    // At its default (auto) the key has no position of its own: point at the checkpoints instead.
    if (d.where.origin == Location::Origin::Default)
      d.where = Location::in_file(checkpoint::checkpoints_root(j.training.output_dir), 0, 0);
    throw ConfigError(d);
  }
  return true;
}

// `--profile-steps A:B` (1-based, inclusive) against the job's steps; {0, 0} when not given.
std::pair<int64_t, int64_t> profile_steps(const std::string& text, int64_t max_steps) {
  if (text.empty()) return {0, 0};
  const std::string fix = " (fix: --profile-steps A:B with 1 <= A <= B <= training.max_steps, e.g. 3:5)";
  const auto colon = text.find(':');
  int64_t first = 0, last = 0;
  try {
    size_t used_first = 0, used_last = 0;
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    first = std::stoll(text.substr(0, colon), &used_first);
    last = std::stoll(text.substr(colon + 1), &used_last);
    if (used_first != colon || used_last != text.size() - colon - 1) throw std::invalid_argument("trailing text");
  } catch (const std::exception&) {
    throw UsageError("--profile-steps '" + text + "': not two step numbers A:B" + fix);
  }
  if (first < 1 || last < first || last > max_steps)
    throw UsageError("--profile-steps " + text + ": outside the job's steps 1.." + std::to_string(max_steps) + fix);
  return {first, last};
}

// What `accel launch`'s positionals name: the job file (or --config_file) and a program with its
// arguments, which runs as the job's program: (on the command-line layer, so it replaces one in the file).
struct LaunchTargets {
  std::string job_file;
  std::vector<config::Assignment> program;
};

[[noreturn]] void refuse_python_script(const std::string& script) {
  throw UsageError(script + " is a Python script; accel launch runs native programs: the built-in trainer (name a "
                   "job file: accel launch job.yaml) or your own compiled program (accel launch ./my_program args..., "
                   "built against accel's library: docs/library-api.md). Python training scripts run under Hugging "
                   "Face Accelerate (accelerate launch " + script + "); `accel config import` converts its config file");
}

LaunchTargets launch_targets(const std::vector<std::string>& positionals, const std::string& config_file,
                             const std::vector<std::string>& program_args) {
  LaunchTargets t;
  t.job_file = config_file;
  std::string program;
  for (size_t i = 0; i < positionals.size(); ++i) {
    const std::string& arg = positionals[i];
    const LaunchTarget kind = classify_launch_target(arg);
    if (kind == LaunchTarget::PythonScript) refuse_python_script(arg);
    const bool is_job = kind == LaunchTarget::JobFile && program.empty() && i == 0;
    if (is_job && config_file.empty()) {
      t.job_file = arg;
      continue;
    }
    if (is_job)
      throw UsageError("two job files: --config_file " + config_file + " and " + arg +
                       " (fix: name one; a program to run comes after the job file)");
    if (kind == LaunchTarget::NotFound)
      throw UsageError(arg + ": neither a job file nor a program (no such file, and not found on PATH); fix: name a "
                       "job file (.yaml, or a DeepSpeed/Accelerate .json) or an executable program");
    if (kind != LaunchTarget::Program)
      throw UsageError(arg + " is not an executable program (fix: chmod +x it, or name it first if it is the job file)");
    program = arg;
  }
  if (program.empty()) {
    if (!program_args.empty()) throw UsageError("arguments after the job file without a program: name the program first");
    return t;
  }
  YAML::Node words(YAML::NodeType::Sequence);
  words.push_back(resolve_program(program));
  std::string typed = "accel launch " + program;
  for (const auto& a : program_args) {
    words.push_back(a);
    typed += " " + a;
  }
  t.program.push_back({"program", words, Location::command_line(typed)});
  return t;
}

}  // namespace

// Text data through a tokenizer.json (docs/text-data.md): the tokenizer is checked here, so an
// unsupported one exits 2 naming its JSON path before any worker starts, and the token cache is
// built here once (the workers find it; docs/design/0032). --dry-run only checks the tokenizer.
static void prepare_text_data(const config::DataSection& data, bool dry_run) {
  if (data.kind != config::DataKind::text || data.tokenizer.empty()) return;
  if (dry_run) {
    const text::Tokenizer tokenizer = text::Tokenizer::from_file(data.tokenizer);
    text::resolve_boundaries(tokenizer.spec(), data.bos, data.eos);
    return;
  }
  const text::TokenCache cache = text::ensure_token_cache(text::token_cache_request(data));
  std::cerr << "accel launch: " << data.path << (cache.built ? " tokenized into " : ": token cache found at ")
            << cache.path << " (" << cache.tokens << " tokens"
            << (cache.built ? " from " + std::to_string(cache.documents) + " documents" : std::string()) << ")\n";
}

std::shared_ptr<std::vector<std::string>> add_launch_command(CLI::App& app) {
  auto program_args = std::make_shared<std::vector<std::string>>();
  auto flags = std::make_shared<AccelerateFlags>();
  struct Options {
    std::vector<std::string> positionals;
    std::vector<std::string> overrides;
    bool dry_run = false;
    std::string trace;
    std::string profile;
    std::string profile_steps;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("launch", "Validate a job and run it: one worker per GPU or CPU rank\n\n"
                                           "Usage: accel launch [options] [JOB] [PROGRAM [ARGS...]]\n\n"
                                           "Examples:\n  accel launch config_templates/quickstart.yaml\n"
                                           "  accel launch job.yaml --set backend=fsdp --set training.max_steps=20\n"
                                           "  accel launch --num_processes 2 --use_fsdp job.yaml\n"
                                           "  accel launch --config_file job.yaml ./my_trainer --epochs 3\n"
                                           "  accel launch ds_config.json --dry-run");
  cmd->add_option("job", o->positionals,
                  "The job file (native, Accelerate or DeepSpeed JSON; default: the default job), then optionally "
                  "a program to run with every argument after it")
      ->expected(0, 2);
  add_accelerate_flags(cmd, flags);
  add_set_option(cmd, o->overrides);
  cmd->add_flag("--dry-run", o->dry_run, "Validate and print the resolved job, then stop");
  cmd->add_option("--trace", o->trace,
                  "Write the sharding schedule (gathers, reshards, reductions per unit) as a Chrome trace: "
                  "FILE for rank 0, FILE with .rankN before its extension for the others");
  cmd->add_option("--profile", o->profile,
                  "Record a window of the built-in trainer's steps with torch's profiler (operators, and CUDA "
                  "kernels on a GPU): one Chrome trace per rank, DIR/rank<r>.pt.trace.json");
  cmd->add_option("--profile-steps", o->profile_steps,
                  "The steps --profile records, A:B (1-based, inclusive; default: 3 steps after 2 of warm-up)");
  cmd->callback([o, flags, program_args] {
    LaunchTargets targets = launch_targets(o->positionals, flags->config_file, *program_args);
    auto assignments = flag_assignments(*flags);
    assignments.insert(assignments.end(), targets.program.begin(), targets.program.end());
    // A program given here needs no job file: the default job (or only defaults) around it.
    auto loaded = load_job_for_cli(targets.job_file, o->overrides, !targets.program.empty(), true,
                                   launch::visible_cuda_gpus(), std::move(assignments));
    const auto& j = loaded.job;
    for (const auto& line : describe_flags(*flags)) std::cerr << "accel launch: " << line << "\n";
    // The one-key backend switch: say what was carried over from the other backend's block, and what
    // has no equivalent, before anything else (also when the backend then refuses to start).
    for (const auto& line : config::describe_translation(loaded.translation, "accel launch: ")) std::cerr << line << "\n";
    if (!o->dry_run && j.program.empty() && !check_trainer_can_start(loaded)) return;
    if (!o->profile_steps.empty() && o->profile.empty())
      throw UsageError("--profile-steps needs --profile DIR (where the traces go)");
    if (!o->profile.empty() && !j.program.empty())
      throw UsageError("--profile records the built-in trainer's steps; a job with program: runs your own loop "
                       "(fix: profile it there with torch's profiler, or drop program: to run the trainer)");
    const auto [profile_first, profile_last] = profile_steps(o->profile_steps, j.training.max_steps);
    std::cerr << "accel launch: " << (loaded.file.empty() ? "defaults" : loaded.file) << " ("
              << config::to_string(loaded.format) << ") is valid: backend " << config::to_string(j.backend) << ", "
              << j.num_processes << " process(es) on " << j.num_machines << " machine(s), device "
              << config::to_string(j.device) << ", mixed precision " << config::to_string(j.mixed_precision) << "\n";
    if (j.program.empty()) prepare_text_data(j.data, o->dry_run);
    if (o->dry_run) {
      if (const std::string problem = launch_secret_problem(loaded); !problem.empty())
        std::cerr << "accel launch: warning: the launch itself would stop here (exit 2): " << problem << "\n";
      std::cout << config::dump_job(j, loaded.sources, config::DumpStyle::WithSources);
      return;
    }
    check_output_dir_writable(loaded);
    if (!j.program.empty()) {
      launch_job(loaded, j.program, {});
      return;
    }
    nlohmann::json options = {{"progress", isatty(STDOUT_FILENO) == 1}};
    if (!o->trace.empty()) options["trace"] = std::filesystem::absolute(o->trace).string();
    if (!o->profile.empty()) {
      options["profile"] = std::filesystem::absolute(o->profile).string();
      options["profile_first"] = profile_first;
      options["profile_last"] = profile_last;
    }
    launch_worker_task(loaded, "train", options.dump());
  });
  return program_args;
}

}  // namespace accel::cli
