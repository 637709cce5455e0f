// Machine facts for `accel env`, read from /etc/os-release, uname, /proc and the dynamic linker.
// The active BLAS is the library the dynamic linker binds sgemm_ to (what libtorch calls), not
// merely whatever libblas.so.3 points at on disk: both can be mapped, only one wins.
#include "runtime/diag/system_facts.hpp"
#include "runtime/common/strings.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace accel::diag {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string parent_dir_name(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "";
  return basename_of(path.substr(0, slash));
}

std::string resolve(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string os_pretty_name() {
  std::ifstream in("/etc/os-release");
  for (std::string line; std::getline(in, line);) {
    if (!starts_with(line, "PRETTY_NAME=")) continue;
    std::string v = trim(line.substr(12));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    return v.empty() ? "unknown" : v;
  }
  return "unknown";
}

std::string kernel_string() {
  utsname u{};
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == "model name") return trim(line.substr(colon + 1));
  }
  return "unknown";
}

unsigned affinity_cpu_count() {
  // CPU_ALLOC sets handle machines with more CPUs than a fixed cpu_set_t holds.
  for (int ncpus = 1024; ncpus <= (1 << 16); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (!set) return 0;
    const size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    const bool ok = sched_getaffinity(0, size, set) == 0;
    const unsigned count = ok ? static_cast<unsigned>(CPU_COUNT_S(size, set)) : 0;
    CPU_FREE(set);
    if (ok) return count;
    if (errno != EINVAL) return 0;
  }
  return 0;
}

// Reads "Key:   12345 kB" lines from /proc/meminfo, in bytes.
void read_meminfo(SystemFacts& facts) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key, unit;
    std::uint64_t value = 0;
    if (!(fields >> key >> value)) continue;
    fields >> unit;
    const std::uint64_t bytes = unit == "kB" ? value * 1024 : value;
    if (key == "MemTotal:") facts.memory_total_bytes = bytes;
    if (key == "MemAvailable:") facts.memory_available_bytes = bytes;
  }
}

// A CPU BLAS by file name; GPU BLAS libraries (cuBLAS, hipBLAS, rocBLAS) also contain "blas".
bool looks_like_cpu_blas(const std::string& path) {
  const std::string base = lower(basename_of(path));
  if (contains(base, "cublas") || contains(base, "hipblas") || contains(base, "rocblas")) return false;
  return contains(base, "blas") || contains(base, "mkl_rt") || contains(base, "libblis");
}

// Resolved paths of every BLAS-like file mapped into this process, in first-mapped order.
std::vector<std::string> mapped_blas_libraries() {
  std::vector<std::string> found;
  std::ifstream in("/proc/self/maps");
  for (std::string line; std::getline(in, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
      path.resize(path.size() - deleted.size());
    if (!looks_like_cpu_blas(path)) continue;
    path = resolve(path);
    if (std::find(found.begin(), found.end(), path) == found.end()) found.push_back(path);
  }
  return found;
}

// The file the dynamic linker binds sgemm_ to in the global scope, which is what libtorch uses.
std::string sgemm_provider() {
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (!sym || !dladdr(sym, &info) || !info.dli_fname || !*info.dli_fname) return "";
  return resolve(info.dli_fname);
}

// Looks a symbol up in the given library and its dependencies first, then globally.
void* find_symbol(const std::string& library, const char* name) {
  void* sym = nullptr;
  if (void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    sym = dlsym(handle, name);
    dlclose(handle);  // drops the reference RTLD_NOLOAD took; the library stays loaded
  }
  return sym ? sym : dlsym(RTLD_DEFAULT, name);
}

void query_openblas(BlasInfo& blas) {
  using config_fn = char* (*)();
  using int_fn = int (*)();
  if (auto fn = reinterpret_cast<config_fn>(find_symbol(blas.path, "openblas_get_config")))
    if (const char* config = fn()) blas.openblas_config = trim(config);
  if (auto fn = reinterpret_cast<int_fn>(find_symbol(blas.path, "openblas_get_num_threads")))
    blas.openblas_threads = fn();
  if (!blas.classification.variant.empty()) return;
  if (auto fn = reinterpret_cast<int_fn>(find_symbol(blas.path, "openblas_get_parallel"))) {
    const int mode = fn();  // 0 sequential, 1 pthreads, 2 OpenMP
    blas.classification.variant = mode == 2 ? "openmp" : mode == 1 ? "pthread" : "serial";
    blas.classification.description = "OpenBLAS (" + blas.classification.variant + ")";
  }
}

std::string reference_blas_warning() {
#if defined(__aarch64__)
  const std::string alternative = "libblas.so.3-aarch64-linux-gnu";
#else
  const std::string alternative = "libblas.so.3-x86_64-linux-gnu";
#endif
  return "the reference BLAS is active: matmuls are ~20x slower than with OpenBLAS. "
         "Fix: sudo apt-get install libopenblas0-openmp "
         "(or pick it with: sudo update-alternatives --config " + alternative + ")";
}

}  // namespace

SystemFacts collect_system_facts() {
  SystemFacts facts;
  facts.os = os_pretty_name();
  facts.kernel = kernel_string();
  facts.cpu_model = cpu_model_name();
  facts.logical_cores = std::thread::hardware_concurrency();
  facts.usable_cores = affinity_cpu_count();
  read_meminfo(facts);
  return facts;
}

BlasClass classify_blas_path(const std::string& resolved_path) {
  if (resolved_path.empty()) return {"not found", "", "no BLAS library found in this process"};
  const std::string base = lower(basename_of(resolved_path));
  const std::string dir = lower(parent_dir_name(resolved_path));
  // Debian names the directory after the implementation and its threading: openblas-openmp,
  // openblas64-pthread, blis-serial, ...; the suffix after the last '-' is the variant.
  auto variant_of = [&dir](const std::string& family) -> std::string {
    const auto dash = dir.rfind('-');
    return starts_with(dir, family) && dash != std::string::npos ? dir.substr(dash + 1) : "";
  };
  auto named = [](const std::string& name, const std::string& variant) {
    return variant.empty() ? name : name + " (" + variant + ")";
  };
  if (contains(base, "openblas") || starts_with(dir, "openblas")) {
    const std::string v = variant_of("openblas");
    return {"openblas", v, named("OpenBLAS", v)};
  }
  if (contains(base, "mkl")) return {"mkl", "", "Intel MKL"};
  if (contains(base, "blis") || starts_with(dir, "blis")) {
    const std::string v = variant_of("blis");
    return {"blis", v, named("BLIS", v)};
  }
  if (contains(base, "atlas") || starts_with(dir, "atlas")) return {"atlas", "", "ATLAS"};
  if (dir == "blas" || starts_with(base, "libblas.")) return {"reference", "", "reference BLAS (slow)"};
  return {"other", "", "unrecognised BLAS library"};
}

BlasInfo detect_blas() {
  BlasInfo blas;
  blas.loaded = mapped_blas_libraries();
  blas.path = sgemm_provider();
  // No exported sgemm_ (e.g. a BLAS linked into libtorch with hidden symbols): fall back to the
  // first BLAS-like library mapped, if any.
  if (blas.path.empty() && !blas.loaded.empty()) blas.path = blas.loaded.front();
  blas.classification = classify_blas_path(blas.path);
  if (blas.classification.kind == "openblas") query_openblas(blas);
  if (blas.classification.kind == "reference") blas.warning = reference_blas_warning();
  return blas;
}

}  // namespace accel::diag
