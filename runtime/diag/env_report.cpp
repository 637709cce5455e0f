// `accel env`: gathers build, machine and default-job facts, with the libtorch, GPU and BLAS facts
// accel-worker collected (torch_report.hpp), into one JSON object and renders it as grouped
// "- key: value" lines. No torch here: the launcher links this.
#include "runtime/diag/env_report.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/diag/build_info.hpp"
#include "runtime/diag/system_facts.hpp"

namespace accel::diag {
namespace {

using nlohmann::json;

json default_job_facts(const std::string& path) {
  json job = {{"path", path}, {"exists", false}, {"contents", "not found"}};
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return job;
  job["exists"] = true;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    job["contents"] = "unreadable (check its permissions)";
    return job;
  }
  std::ostringstream text;
  text << in.rdbuf();
  job["contents"] = text.str();
  return job;
}

// --- rendering helpers: tolerate missing or null fields, so any report JSON renders ---

std::string text(const json& j, const char* key, const std::string& fallback = "unknown") {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>().empty() ? fallback : v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

const json& section(const json& report, const char* key) {
  static const json empty = json::object();
  return report.is_object() && report.contains(key) && report[key].is_object() ? report[key] : empty;
}

std::string gib(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", j[key].get<double>() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string indented(const std::string& body, const std::string& indent) {
  std::ostringstream out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) out << indent << line << "\n";
  return out.str();
}

void render_torch(std::ostringstream& out, const json& torch) {
  if (torch.contains("error")) {
    out << "libtorch\n- unavailable: " << text(torch, "error") << "\n";
    return;
  }
  const bool cuda_built = torch.value("built_with_cuda", false);
  const bool cuda_loaded = torch.value("cuda_library_loaded", false);
  const std::string no_cuda = cuda_built && !cuda_loaded
                                  ? "built with CUDA, but libtorch_cuda is not loaded (accel's CUDA plugin: " +
                                        text(torch, "cuda_plugin", "not tried") + ")"
                                  : "not built with CUDA";
  out << "libtorch\n";
  out << "- libtorch version: " << text(torch, "version") << (cuda_built ? " (CUDA build)" : " (CPU only)") << "\n";
  out << "- libtorch loaded from: " << text(torch, "library_path") << "\n";
  if (torch.contains("cuda_plugin")) out << "- accel CUDA plugin: " << text(torch, "cuda_plugin") << "\n";
  out << "- CUDA runtime: " << text(torch, "cuda_runtime_version", no_cuda) << "\n";
  if (cuda_loaded) {
    out << "- cuDNN: " << text(torch, "cudnn_version", "not built with cuDNN") << "\n";
    out << "- CUDA available: " << text(torch, "cuda_available") << " (" << text(torch, "cuda_device_count", "0")
        << " devices)\n";
  }
  out << "- NCCL: " << text(torch, "nccl_version", cuda_built ? "not loaded" : "not built with CUDA") << "\n";
  out << "- Threads: intra-op " << text(torch, "intra_op_threads") << ", inter-op "
      << text(torch, "inter_op_threads") << "\n";
  out << "- Build settings: BLAS_INFO=" << text(torch, "blas_info") << ", LAPACK_INFO=" << text(torch, "lapack_info")
      << ", " << text(torch, "mkl") << ", " << text(torch, "openmp") << "\n";
}

void render_machine(std::ostringstream& out, const json& sys, const json& blas, const json& gpus) {
  out << "Machine\n";
  out << "- OS: " << text(sys, "os") << "\n";
  out << "- Kernel: " << text(sys, "kernel") << "\n";
  out << "- CPU: " << text(sys, "cpu_model") << "\n";
  out << "- Cores: " << text(sys, "logical_cores") << " logical, " << text(sys, "usable_cores")
      << " usable by this process\n";
  out << "- Memory: " << gib(sys, "memory_total_bytes") << " total, " << gib(sys, "memory_available_bytes")
      << " available\n";
  out << "- BLAS: " << text(blas, "description", "unknown") << " -- " << text(blas, "path", "no library found")
      << "\n";
  if (!text(blas, "openblas_config", "").empty())
    out << "- OpenBLAS config: " << text(blas, "openblas_config") << " (threads: " << text(blas, "openblas_threads")
        << ")\n";
  if (!text(blas, "warning", "").empty()) out << "WARNING: " << text(blas, "warning") << "\n";
  if (!gpus.is_array() || gpus.empty()) {
    out << "- GPUs: none\n";
    return;
  }
  out << "- GPUs: " << gpus.size() << "\n";
  for (const auto& g : gpus) {
    out << "  - cuda:" << text(g, "index") << ": " << text(g, "name") << ", " << gib(g, "total_memory_bytes");
    if (!text(g, "compute_capability", "").empty()) out << ", compute capability " << text(g, "compute_capability");
    out << "\n";
  }
}

}  // namespace

json collect_env_report(const std::string& default_job_path, const json& torch_report) {
  const SystemFacts sys = collect_system_facts();
  const BuildInfo build = build_info();
  const json& torch = section(torch_report, "torch");
  return {
      {"accel",
       {{"version", build.accel_version},
        {"git_revision", build.git_revision},
        {"build_type", build.build_type},
        {"compiler", build.compiler}}},
      {"libraries",
       {{"libtorch", torch.value("version", build.torch_cmake_version)},
        {"libtorch_cmake_package", build.torch_cmake_version},
        {"gloo", build.gloo_version},
        {"python_env", build.python_env},
        {"yaml_cpp", build.yaml_cpp_version},
        {"spdlog", build.spdlog_version},
        {"cli11", build.cli11_version},
        {"nlohmann_json", build.nlohmann_json_version}}},
      {"torch", torch},
      {"system",
       {{"os", sys.os},
        {"kernel", sys.kernel},
        {"cpu_model", sys.cpu_model},
        {"logical_cores", sys.logical_cores},
        {"usable_cores", sys.usable_cores},
        {"memory_total_bytes", sys.memory_total_bytes},
        {"memory_available_bytes", sys.memory_available_bytes}}},
      {"blas", section(torch_report, "blas")},
      {"gpus", torch_report.is_object() && torch_report.contains("gpus") ? torch_report["gpus"] : json::array()},
      {"default_job", default_job_facts(default_job_path)},
  };
}

std::string render_env_report(const json& report) {
  const json& accel = section(report, "accel");
  const json& libs = section(report, "libraries");
  const json& job = section(report, "default_job");
  std::ostringstream out;
  out << "Copy-and-paste the text below into your bug report.\n\n";
  out << "accel\n";
  out << "- accel version: " << text(accel, "version") << " (git " << text(accel, "git_revision") << ")\n";
  out << "- Build type: " << text(accel, "build_type") << "\n";
  out << "- Compiler: " << text(accel, "compiler") << "\n\n";
  render_torch(out, section(report, "torch"));
  out << "\n";
  render_machine(out, section(report, "system"), section(report, "blas"),
                 report.is_object() && report.contains("gpus") ? report["gpus"] : json::array());
  out << "\nLibraries\n";
  out << "- libtorch (CMake package): " << text(libs, "libtorch_cmake_package") << "\n";
  out << "- Python environment (build, tests, scripts): " << text(libs, "python_env") << "\n";
  out << "- Gloo: " << text(libs, "gloo") << "\n";
  out << "- yaml-cpp: " << text(libs, "yaml_cpp") << "\n";
  out << "- spdlog: " << text(libs, "spdlog") << "\n";
  out << "- CLI11: " << text(libs, "cli11") << "\n";
  out << "- nlohmann_json: " << text(libs, "nlohmann_json") << "\n\n";
  out << "Default job file\n";
  const bool exists = job.value("exists", false);
  out << "- " << text(job, "path", "(no path)") << (exists ? ":" : ": not found") << "\n";
  if (exists) out << indented(text(job, "contents", "(empty file)"), "    ");
  return out.str();
}

}  // namespace accel::diag
