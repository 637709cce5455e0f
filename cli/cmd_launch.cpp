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
#include <iostream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
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
    const std::string probe = dir + "/.accel-write-probe." + std::to_string(::getpid());
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

// What the built-in trainer would refuse at start, found before any worker is spawned.
void check_trainer_can_start(const config::LoadedJob& loaded) {
  const auto& j = loaded.job;
  check_plan(loaded);
  // The checkpoint workers will resume from must be whole: say so now, once, naming the file.
  const std::string& resume = j.training.resume;
  if (resume == "never") return;
  try {
    std::optional<std::string> dir;
    if (resume == "auto")
      dir = checkpoint::find_latest_checkpoint(checkpoint::checkpoints_root(j.training.output_dir));
    else if (std::filesystem::is_directory(resume))
      dir = resume;
    else
      throw checkpoint::CheckpointError("checkpoint directory " + resume + " does not exist");
    if (!dir) return;
    // Node-local storage (docs/design/0013): this machine needs only the files it holds.
    auto manifest = checkpoint::verify_checkpoint(*dir, j.num_machines > 1 ? j.machine_rank : -1);
    std::cerr << "accel launch: resuming from " << *dir << " (" << manifest.step << " steps done)\n";
  } catch (const checkpoint::CheckpointError& e) {
    auto d = diagnostic_for(loaded, "training.resume", e.what(),
                            "set training.resume to another checkpoint directory, or never to start over");
    // At its default (auto) the key has no position of its own: point at the checkpoints instead.
    if (d.where.origin == Location::Origin::Default)
      d.where = Location::in_file(checkpoint::checkpoints_root(j.training.output_dir), 0, 0);
    throw ConfigError(d);
  }
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
  text::TokenCacheRequest request;
  request.data_path = data.path;
  request.format = data.format == config::DataFormat::jsonl ? text::DocumentFormat::jsonl : text::DocumentFormat::text;
  request.field = data.field;
  request.tokenizer_path = data.tokenizer;
  request.bos = data.bos;
  request.eos = data.eos;
  request.cache_dir = data.cache_dir;
  const text::TokenCache cache = text::ensure_token_cache(request);
  std::cerr << "accel launch: " << data.path << (cache.built ? " tokenized into " : ": token cache found at ")
            << cache.path << " (" << cache.tokens << " tokens"
            << (cache.built ? " from " + std::to_string(cache.documents) + " documents" : std::string()) << ")\n";
}

void add_launch_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::vector<std::string> overrides;
    bool dry_run = false;
    std::string trace;
    std::string profile;
    std::string profile_steps;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("launch", "Validate a job and run it: one worker per GPU or CPU rank\n\n"
                                           "Examples:\n  accel launch config_templates/quickstart.yaml\n"
                                           "  accel launch job.yaml --set backend=fsdp --set training.max_steps=20\n"
                                           "  accel launch job.yaml --set 'program=[./my_trainer, --epochs, \"3\"]'\n"
                                           "  accel launch ds_config.json --dry-run");
  cmd->add_option("job", o->file, "Job file: native, Accelerate or DeepSpeed JSON (default: the default job)");
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
  cmd->callback([o] {
    auto loaded = load_job_for_cli(o->file, o->overrides, false, true, launch::visible_cuda_gpus());
    const auto& j = loaded.job;
    // The one-key backend switch: say what was carried over from the other backend's block, and what
    // has no equivalent, before anything else (also when the backend then refuses to start).
    for (const auto& line : config::describe_translation(loaded.translation, "accel launch: ")) std::cerr << line << "\n";
    if (!o->dry_run && j.program.empty()) check_trainer_can_start(loaded);
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
}

}  // namespace accel::cli
