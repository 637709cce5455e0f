// Facts about how this accel binary was built, for `accel env` and `accel --version`.
// Filled in at configure/build time by cmake/build_info.cpp.in (see cmake/BuildInfo.cmake);
// a dependency CMake did not report a version for is an empty string.
#pragma once

#include <string>

namespace accel::diag {

struct BuildInfo {
  std::string accel_version;          // project version, e.g. "0.1.0"
  std::string git_revision;           // short hash, "-dirty" when tracked files changed, or "unknown"
  std::string build_type;             // CMAKE_BUILD_TYPE, e.g. "RelWithDebInfo"
  std::string compiler;               // "<id> <version>", e.g. "GNU 12.2.0"
  std::string yaml_cpp_version;
  std::string cli11_version;
  std::string spdlog_version;
  std::string nlohmann_json_version;
  std::string gloo_version;           // "not found at build time" when CMake found no Gloo package
  std::string torch_cmake_version;    // version of the Torch CMake package found at configure time
  std::string python_env;             // the Python (ACCEL_PYTHON) whose torch CMake used and the tests run
};

BuildInfo build_info();

}  // namespace accel::diag
