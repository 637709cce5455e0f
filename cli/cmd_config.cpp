// `accel config`: the questionnaire (no subcommand), and show / validate / import / convert / keys.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/launch_support.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/config/dump.hpp"
#include "runtime/config/job_convert.hpp"
#include "runtime/config/paths.hpp"
#include "runtime/config/questionnaire.hpp"

namespace accel::cli {
namespace {

struct ConfigOptions {
  std::string file, output, to;
  std::vector<std::string> overrides;
  bool sources = false, resolved = false, defaults = false, markdown = false, force = false;
};

UsageError exists_error(const std::string& path) {
  return UsageError("accel config: " + path + " already exists; add --force to replace it, or write elsewhere with -o PATH");
}

// Accelerate's habit: a written job never replaces an existing file unless --force says so. Checked
// before any question is asked, and again when the file is put in place (it may appear meanwhile).
void refuse_to_replace(const std::string& path, bool force) {
  std::error_code ec;
  if (!force && std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found)
    throw exists_error(path);
}

void write_file(const std::string& path, const std::string& text, bool force) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  // Write beside the target, then rename: a reader never sees half a job file. The staged file
  // is created afresh, never through a link planted at its name (runtime/common/safe_file.hpp).
  std::string tmp = path + ".tmp";
  const int fd = files::create_fresh(tmp);
  try {
    files::write_all(fd, text, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) throw RunError("cannot write " + tmp + ": " + std::strerror(errno));
  if (force) {
    std::filesystem::rename(tmp, path);
    return;
  }
  // link() never replaces: it fails with EEXIST when the name is taken, where rename() would not.
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int error = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && error == EEXIST) throw exists_error(path);
  if (linked != 0) throw RunError("cannot write " + path + ": " + std::strerror(error));
}

std::string summary(const config::LoadedJob& j) {
  return config::to_string(j.job.backend) + ", " + std::to_string(j.job.num_processes) + " process" +
         (j.job.num_processes == 1 ? "" : "es") + " on " + std::to_string(j.job.num_machines) + " machine" +
         (j.job.num_machines == 1 ? "" : "s") + ", " + config::to_string(j.job.mixed_precision) + " mixed precision";
}

void print_notes(const config::LoadedJob& j) {
  for (const auto& n : j.notes) std::cerr << "note: " << n << "\n";
}

void print_translation(std::ostream& out, const config::LoadedJob& j) {
  for (const auto& line : config::describe_translation(j.translation)) out << line << "\n";
}

void run_questionnaire_command(const ConfigOptions& o) {
  const std::string path = o.output.empty() ? config::default_job_path() : o.output;
  refuse_to_replace(path, o.force);
  config::QuestionnaireOptions q;
  q.use_defaults = o.defaults;
  q.echo_answers = !isatty(STDIN_FILENO);
  if (!o.defaults)
    std::cout << "accel config: answer each question, or press Enter for the default shown in [brackets].\n";
  auto answers = config::run_questionnaire(std::cin, std::cout, q);

  config::LoadOptions load;
  load.set_overrides = answers;
  load.check_paths = false;  // the job may be meant for another machine; `accel config validate` checks paths
  auto loaded = config::load_job(load);
  for (const auto& w : loaded.warnings) std::cerr << w.render("warning") << "\n";
  std::string text = "# accel job written by `accel config`; see config_templates/ for commented examples.\n" +
                     config::dump_job(loaded.job, loaded.sources, config::DumpStyle::ExplicitOnly);
  write_file(path, text, o.force);
  std::cout << "wrote " << path << " (" << summary(loaded) << ")\nrun it with: accel launch " << path << "\n";
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto o = std::make_shared<ConfigOptions>();
  auto* cmd = app.add_subcommand("config", "Write a job file by answering questions, or inspect one\n\n"
                                           "Examples:\n"
                                           "  accel config                       # questionnaire -> ~/.config/accel/default.yaml\n"
                                           "  accel config -o job.yaml --defaults\n"
                                           "  accel config show job.yaml --sources\n"
                                           "  accel config validate job.yaml\n"
                                           "  accel config import accelerate_config.yaml -o job.yaml\n"
                                           "  accel config convert ds_job.yaml --to fsdp -o fsdp_job.yaml");
  cmd->add_option("-o,--output", o->output, "Where to write the job (default: " + config::default_job_path() + ")");
  cmd->add_flag("--defaults", o->defaults, "Ask nothing; write a job with every default");
  cmd->add_flag("--force", o->force, "Replace the output file if it exists (without it, an existing file is an error)");
  cmd->require_subcommand(0, 1);

  auto* show = cmd->add_subcommand("show", "Print the resolved job (defaults < file < ACCEL_* < --set)\n\n"
                                           "Examples:\n  accel config show job.yaml --sources\n"
                                           "  accel config show job.yaml --set training.max_steps=20\n"
                                           "  accel config show ds_job.yaml --set backend=fsdp --resolved");
  show->add_option("file", o->file, "Job file: native, Accelerate or DeepSpeed JSON (default: the default job)");
  show->add_flag("--sources", o->sources, "Say where each value came from");
  show->add_flag("--resolved", o->resolved,
                 "Only what the selected backend runs with: options translated from the other backend's block "
                 "(and those with no equivalent) listed, other backends' blocks left out, sources shown");
  add_set_option(show, o->overrides);
  show->callback([o] {
    auto loaded = load_job_for_cli(o->file, o->overrides, /*allow_none=*/true);
    print_notes(loaded);
    if (o->resolved) {
      std::cout << config::dump_resolved_job(loaded);
      return;
    }
    std::cout << config::dump_job(loaded.job, loaded.sources,
                                  o->sources ? config::DumpStyle::WithSources : config::DumpStyle::Full);
  });

  auto* validate = cmd->add_subcommand("validate", "Check a job file without running it; exit 2 if it is invalid\n\n"
                                                   "Examples:\n  accel config validate job.yaml\n"
                                                   "  accel config validate ds_config.json");
  validate->add_option("file", o->file, "Job file: native, Accelerate or DeepSpeed JSON")->required();
  add_set_option(validate, o->overrides);
  validate->callback([o] {
    auto loaded = load_job_for_cli(o->file, o->overrides);
    print_notes(loaded);
    std::cout << "ok: " << o->file << " is a valid " << config::to_string(loaded.format) << " (" << summary(loaded)
              << ")\n";
    print_translation(std::cout, loaded);
    if (const std::string problem = launch_secret_problem(loaded); !problem.empty())
      std::cerr << "warning: `accel launch` in this environment would refuse this job (exit 2): " << problem << "\n";
  });

  auto* import = cmd->add_subcommand("import", "Translate an Accelerate config or DeepSpeed JSON into a native job\n\n"
                                               "Examples:\n  accel config import default_config.yaml -o job.yaml\n"
                                               "  accel config import ds_config.json -o job.yaml");
  import->add_option("file", o->file, "Accelerate YAML or DeepSpeed JSON")->required();
  import->add_option("-o,--output", o->output, "Where to write the native job (default: standard output)");
  import->add_flag("--force", o->force, "Replace the output file if it exists");
  import->callback([o] {
    if (!o->output.empty()) refuse_to_replace(o->output, o->force);
    auto loaded = load_job_for_cli(o->file, {});
    print_notes(loaded);
    std::string text = "# accel job imported from " + o->file + " (" + config::to_string(loaded.format) + ")\n" +
                       config::dump_job(loaded.job, loaded.sources, config::DumpStyle::ExplicitOnly);
    if (o->output.empty()) {
      std::cout << text;
    } else {
      write_file(o->output, text, o->force);
      std::cerr << "wrote " << o->output << " (" << summary(loaded) << ")\n";
    }
  });

  auto* convert = cmd->add_subcommand(
      "convert", "Switch a job to the other backend: translate its deepspeed or fsdp block into the other one and "
                 "write the result as a native job (docs/design/0005-backend-switch.md)\n\n"
                 "Examples:\n  accel config convert config_templates/deepspeed_zero3.yaml --to fsdp -o fsdp_job.yaml\n"
                 "  accel config convert fsdp_job.yaml --to deepspeed");
  convert->add_option("file", o->file, "Job file: native, Accelerate or DeepSpeed JSON")->required();
  convert->add_option("--to", o->to, "The backend to switch to")->required()->check(CLI::IsMember({"fsdp", "deepspeed"}));
  convert->add_option("-o,--output", o->output, "Where to write the converted job (default: standard output)");
  convert->add_flag("--force", o->force, "Replace the output file if it exists");
  add_set_option(convert, o->overrides);
  convert->callback([o] {
    if (!o->output.empty()) refuse_to_replace(o->output, o->force);
    auto overrides = o->overrides;
    overrides.push_back("backend=" + o->to);
    auto loaded = load_job_for_cli(o->file, overrides);
    print_notes(loaded);
    std::string text = config::converted_job_text(loaded, o->file);
    if (o->output.empty()) {
      std::cout << text;
      return;
    }
    write_file(o->output, text, o->force);
    print_translation(std::cerr, loaded);
    std::cerr << "wrote " << o->output << " (" << summary(loaded) << ")\n";
  });

  auto* keys = cmd->add_subcommand("keys", "List every job key with its type, default, allowed values and meaning\n\n"
                                           "Examples:\n  accel config keys\n  accel config keys --markdown");
  keys->add_flag("--markdown", o->markdown, "Print a markdown table (docs/config-reference.md is this output)");
  keys->callback([o] { std::cout << config::describe_keys(o->markdown); });

  cmd->callback([o, cmd] {
    if (cmd->get_subcommands().empty()) run_questionnaire_command(*o);
  });
}

}  // namespace accel::cli
