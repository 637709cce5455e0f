// `accel report RUN_DIR [RUN_DIR...] [-o OUT_DIR]`: a run's curves and per-rank figures as one
// self-contained HTML page and PNGs, several runs overlaid. The drawing links cairo, which the
// launcher does not load (it stays a few MiB and milliseconds, docs/design/0021): the launcher
// binds the arguments and hands the command to accel-report (cli/report/main.cpp), whose output
// and exit code are the command's (docs/design/0026).
#include "cli/commands.hpp"
#include "runtime/launch/worker_program.hpp"

namespace accel::cli {

constexpr const char* kReportProgramName = "accel-report";
constexpr const char* kReportProgramEnv = "ACCEL_REPORT_PROGRAM";

void add_report_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> runs;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report",
      "Draw a run's loss, evaluation loss, lr, throughput, step time and peak memory over the steps, its memory "
      "per rank beside accel estimate-memory, its communication per step by collective and where its time went: "
      "one self-contained HTML page (report.html) and a PNG per chart; several runs are overlaid\n\n"
      "Examples:\n"
      "  accel report runs/quickstart                       # -> runs/quickstart/report/report.html\n"
      "  accel report runs/zero3 runs/fsdp -o compare       # two runs on the same axes -> compare/report.html");
  cmd->add_option("run_dirs", o->runs, "Run directories (training.output_dir of each run: metrics.jsonl, report/, "
                                       "job.resolved.yaml)")
      ->required();
  cmd->add_option("-o,--output", o->out,
                  "Where report.html and the PNGs go (default with one run: RUN_DIR/report; required with several)");
  cmd->callback([o] {
    std::vector<std::string> args = o->runs;
    if (!o->out.empty()) args.insert(args.end(), {"--output", o->out});
    std::string command = "accel report";
    for (const auto& r : o->runs) command += " " + r;
    if (!o->out.empty()) command += " -o " + o->out;
    args.insert(args.end(), {"--command", command});
    launch::exec_program(launch::companion_program_path(kReportProgramName, kReportProgramEnv), args);
  });
}

}  // namespace accel::cli
