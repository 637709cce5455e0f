// accel-report: `accel report`'s drawing (runtime/report), a program of its own because it links
// cairo and its libraries, which the launcher `accel` does not load (docs/design/0026). `accel
// report` checks nothing itself and starts this with its arguments; exit codes as accel's.
#include <iostream>

#include "cli/exit_status.hpp"
#include "runtime/diag/build_info.hpp"
#include "runtime/report/report_page.hpp"

int main(int argc, char** argv) {
  auto build = accel::diag::build_info();
  CLI::App app{"accel-report: draws `accel report`'s page and PNGs; run it as `accel report` (see accel report --help)",
               "accel-report"};
  app.set_version_flag("--version", "accel-report " + build.accel_version + " (git " + build.git_revision + ")");
  accel::report::ReportRequest request;
  app.add_option("run_dirs", request.run_dirs, "Run directories")->required();
  app.add_option("-o,--output", request.out_dir, "Where report.html and the PNGs go");
  app.add_option("--command", request.command, "The command line the page quotes");
  app.callback([&request] {
    if (request.command.empty()) request.command = "accel-report";
    const accel::report::ReportResult result = accel::report::write_report(request);
    for (const auto& note : result.notes) std::cerr << "accel report: note: " << note << "\n";
    std::cout << "accel report: wrote " << result.html << " and " << result.pngs.size() << " PNG files in "
              << result.out_dir << "\n";
  });
  return accel::cli::run_and_map_errors(app, argc, argv);
}
