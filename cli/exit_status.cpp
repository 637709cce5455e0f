#include "cli/exit_status.hpp"

#include <yaml-cpp/exceptions.h>

#include <iostream>

#include "runtime/common/errors.hpp"

namespace accel::cli {

int run_and_map_errors(CLI::App& app, int argc, char** argv) {
  return run_and_map_errors(app, std::vector<std::string>(argv, argv + argc));
}

int run_and_map_errors(CLI::App& app, const std::vector<std::string>& argv) {
  try {
    std::vector<std::string> reversed(argv.rbegin(), argv.rend());  // CLI11 takes the words last first
    if (!reversed.empty()) reversed.pop_back();                       // without the program's name
    app.parse(reversed);
    return 0;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, version or the usage error
    return code == 0 ? 0 : 2;
  } catch (const accel::ConfigError& e) {
    std::cerr << e.what() << "\n";
    std::cerr << e.diagnostics().size() << (e.diagnostics().size() == 1 ? " error" : " errors")
              << " in the configuration; nothing was run.\n";
    return 2;
  } catch (const YAML::Exception& e) {
    // Only configuration code reads YAML; a node access the readers did not guard is still bad input.
    std::cerr << "error: in the configuration: " << e.what() << "\n";
    return 2;
  } catch (const accel::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace accel::cli
