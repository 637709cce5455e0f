// Tests for `accel env`'s diagnostics: the BLAS classifier as a pure function, the collected
// report's required fields on the machine running the tests, the default-job section, and the
// rendered text (BLAS line, WARNING line for the reference BLAS).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/diag/env_report.hpp"
#include "runtime/diag/system_facts.hpp"
#include "runtime/diag/torch_report.hpp"

namespace fs = std::filesystem;
using accel::diag::classify_blas_path;
using accel::diag::collect_env_report;
using accel::diag::collect_torch_report;
using accel::diag::known_blas_kinds;
using accel::diag::render_env_report;
using nlohmann::json;

namespace {

bool is_known_kind(const std::string& kind) {
  const auto& kinds = known_blas_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("accel_env_test_" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("classify_blas_path recognises Debian's reference BLAS", "[diag][blas]") {
  const auto c = classify_blas_path("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");
  CHECK(c.kind == "reference");
  CHECK(c.variant.empty());
  CHECK(c.description == "reference BLAS (slow)");
}

TEST_CASE("classify_blas_path recognises OpenBLAS and its threading variant", "[diag][blas]") {
  SECTION("openmp: Debian's libblas.so.3 shim in openblas-openmp/") {
    const auto c = classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
    CHECK(c.kind == "openblas");
    CHECK(c.variant == "openmp");
    CHECK(c.description == "OpenBLAS (openmp)");
  }
  SECTION("openmp: the directory wins over the 'p' in libopenblasp") {
    const auto c = classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblasp-r0.3.21.so");
    CHECK(c.kind == "openblas");
    CHECK(c.variant == "openmp");
  }
  SECTION("pthread") {
    const auto c = classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so");
    CHECK(c.kind == "openblas");
    CHECK(c.variant == "pthread");
    CHECK(c.description == "OpenBLAS (pthread)");
  }
  SECTION("64-bit-index serial build") {
    const auto c = classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas64-serial/libblas64.so.3");
    CHECK(c.kind == "openblas");
    CHECK(c.variant == "serial");
  }
  SECTION("no variant in a plain install path") {
    const auto c = classify_blas_path("/opt/OpenBLAS/lib/libopenblas.so.0");
    CHECK(c.kind == "openblas");
    CHECK(c.variant.empty());
    CHECK(c.description == "OpenBLAS");
  }
}

TEST_CASE("classify_blas_path covers the other kinds", "[diag][blas]") {
  CHECK(classify_blas_path("").kind == "not found");
  CHECK(classify_blas_path("/opt/intel/oneapi/mkl/lib/intel64/libmkl_rt.so.2").kind == "mkl");
  CHECK(classify_blas_path("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4").variant == "openmp");
  CHECK(classify_blas_path("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3").kind == "atlas");
  CHECK(classify_blas_path("/usr/lib64/libblas.so.3").kind == "reference");
  CHECK(classify_blas_path("/usr/lib/libsomething.so").kind == "other");
  for (const char* path : {"", "/a/blas/libblas.so.3", "/a/openblas-openmp/libblas.so.3", "/x/libmkl_rt.so",
                           "/a/blis-serial/libblis.so.4", "/a/atlas/libblas.so.3", "/a/libfoo.so"})
    CHECK(is_known_kind(classify_blas_path(path).kind));
}

TEST_CASE("collect_env_report reports a missing default job as not found", "[diag][env]") {
  TempDir dir;
  const std::string path = (dir.path / "missing" / "default.yaml").string();
  const json report = collect_env_report(path, collect_torch_report());
  const json& job = report.at("default_job");
  CHECK(job.at("path") == path);
  CHECK(job.at("exists") == false);
  CHECK(job.at("contents") == "not found");
  CHECK(contains(render_env_report(report), "- " + path + ": not found"));
}

TEST_CASE("collect_env_report includes an existing default job's contents", "[diag][env]") {
  TempDir dir;
  const std::string path = (dir.path / "default.yaml").string();
  const std::string contents = "backend: ddp\nmodel:\n  name: gpt\n";
  std::ofstream(path) << contents;
  const json report = collect_env_report(path, collect_torch_report());
  const json& job = report.at("default_job");
  CHECK(job.at("exists") == true);
  CHECK(job.at("contents") == contents);
  const std::string text = render_env_report(report);
  CHECK(contains(text, "- " + path + ":\n"));
  CHECK(contains(text, "\n    backend: ddp\n    model:\n      name: gpt\n"));  // indented below the path
}

TEST_CASE("collect_env_report fills the fields a bug report needs", "[diag][env]") {
  const json report = collect_env_report("/nonexistent/accel/default.yaml", collect_torch_report());
  for (const char* key : {"accel", "libraries", "torch", "system", "blas", "default_job"})
    REQUIRE(report.at(key).is_object());
  REQUIRE(report.at("gpus").is_array());

  const json& accel = report.at("accel");
  for (const char* key : {"version", "git_revision", "build_type", "compiler"})
    CHECK_FALSE(accel.at(key).get<std::string>().empty());

  const json& torch = report.at("torch");
  const std::string version = torch.at("version").get<std::string>();
  CHECK((version.rfind("1.", 0) == 0 || version.rfind("2.", 0) == 0));
  CHECK(torch.at("intra_op_threads").get<int>() >= 1);
  // CUDA facts are null exactly when there is nothing to report (the CPU-only CI machine).
  if (!torch.at("cuda_library_loaded").get<bool>()) CHECK(torch.at("cuda_runtime_version").is_null());
  CHECK((torch.at("nccl_version").is_null() || torch.at("nccl_version").is_string()));
  if (!torch.at("cuda_available").get<bool>()) CHECK(report.at("gpus").empty());

  const json& sys = report.at("system");
  for (const char* key : {"os", "kernel", "cpu_model"}) CHECK_FALSE(sys.at(key).get<std::string>().empty());
  CHECK(sys.at("logical_cores").get<unsigned>() >= 1);
  CHECK(sys.at("usable_cores").get<unsigned>() >= 1);
  CHECK(sys.at("memory_total_bytes").get<std::uint64_t>() > 0);
  CHECK(sys.at("memory_available_bytes").get<std::uint64_t>() > 0);

  const json& blas = report.at("blas");
  const std::string kind = blas.at("kind").get<std::string>();
  CHECK(is_known_kind(kind));
  CHECK(kind != "not found");  // libtorch links a BLAS; not finding it is a detection bug
  // Only a BLAS linked statically into libtorch (PyTorch's own MKL builds) has no file of its own.
  if (torch.at("blas_info") != "mkl") CHECK_FALSE(blas.at("path").get<std::string>().empty());
  if (kind == "reference") {
    CHECK_FALSE(blas.at("warning").get<std::string>().empty());
  } else {
    CHECK(blas.at("warning").is_null());
  }

  const std::string text = render_env_report(report);
  CHECK(contains(text, "- BLAS: " + blas.at("description").get<std::string>()));
  CHECK(contains(text, "- libtorch version: " + version));
  CHECK(contains(text, "\nWARNING: ") == (kind == "reference"));
}

TEST_CASE("render_env_report flags the reference BLAS with a WARNING line", "[diag][env]") {
  json report = {{"blas",
                  {{"path", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"},
                   {"kind", "reference"},
                   {"description", "reference BLAS (slow)"},
                   {"warning", "the reference BLAS is active: matmuls are ~20x slower"}}}};
  const std::string text = render_env_report(report);
  CHECK(contains(text, "- BLAS: reference BLAS (slow) -- /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0\n"));
  CHECK(contains(text, "\nWARNING: the reference BLAS is active: matmuls are ~20x slower\n"));

  report["blas"]["warning"] = nullptr;
  CHECK_FALSE(contains(render_env_report(report), "WARNING:"));
}

TEST_CASE("a torch report that could not be had is reported with its reason", "[diag][env]") {
  const json report = collect_env_report("/nonexistent/accel/default.yaml",
                                         json{{"torch", {{"error", "accel-worker was not found"}}}});
  CHECK(report.at("torch").at("error") == "accel-worker was not found");
  CHECK(report.at("gpus").empty());
  const std::string text = render_env_report(report);
  CHECK(contains(text, "libtorch\n- unavailable: accel-worker was not found\n"));
  CHECK(contains(text, "- OS: "));  // the launcher's own facts are still there
}

TEST_CASE("render_env_report tolerates a report with missing sections", "[diag][env]") {
  std::string text;
  REQUIRE_NOTHROW(text = render_env_report(json::object()));
  CHECK(contains(text, "- BLAS: unknown"));
}
