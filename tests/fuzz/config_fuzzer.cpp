// libFuzzer target over job loading, the path `accel config validate` and `accel launch` take
// (config::load_job with the file, ACCEL_* variables and --set items). It checks the error
// contract, not only memory safety: an input either loads, or throws ConfigError / UsageError whose
// diagnostics name a key path or a position (tests/support/error_contract.hpp). Any other
// exception (YAML::Exception, std::out_of_range, ...) or a contract violation aborts, so libFuzzer
// records the input as a crash. A DeepSpeed config (kinds 1 and 2) that loads must be JSON, as
// Accelerate's reader requires: YAML that is not JSON loading is a finding too.
//
// Input framing. Byte 0: bits 0-1 pick the kind, bits 2-3 what to do with a job that loads, bits
// 4-5 the GPUs here: 0 none given (`config validate`), else `accel launch` on 0, 1 or 8 GPUs.
//   kind 0  the rest is job.yaml (native or Accelerate YAML; the loader detects which)
//   kind 1  the rest is job.json (DeepSpeed JSON, or whatever the loader detects)
//   kind 2  byte 1 picks the parent (even: a native job, odd: an Accelerate file) that names
//           ds_config.json, and the rest is ds_config.json (the deepspeed.config_file import)
//   kind 3  byte 1 picks a template of config_templates/, the rest is override lines:
//           ACCEL_NAME=value is an environment variable, any other line one --set item
//   then 0: nothing, 1: the resolved dump (`config show --resolved`), 2 and 3: `config convert`
//   to fsdp and to deepspeed (a second load with --set backend=...), besides the plain dumps.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_convert.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/config/schema.hpp"
#include "support/error_contract.hpp"

namespace fs = std::filesystem;
using namespace accel;

namespace {

// A directory of this process for the input's files; emptied before each input. It is made in
// ACCEL_FUZZ_SCRATCH when set (scripts/fuzz.sh makes that directory and removes it however the run
// ends: libFuzzer ends a run with a finding or a timeout by _Exit, past atexit), else in the system's temp
// directory. A normal exit removes it. The path is never destroyed: exit runs handlers and static
// destructors in the reverse order of their registration, and the handler is registered before the
// static is made, so a static path would be freed before the handler reads it.
const fs::path& work_dir() {
  static const fs::path* const dir = [] {
    const char* scratch = std::getenv("ACCEL_FUZZ_SCRATCH");
    fs::path base = scratch && *scratch ? fs::path(scratch) : fs::temp_directory_path();
    std::string pattern = (base / "accel-fuzz-XXXXXX").string();
    if (!mkdtemp(pattern.data())) std::abort();
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(work_dir(), ec);
    });
    return new fs::path(pattern);
  }();
  return *dir;
}

const std::vector<std::string>& templates() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(fs::path(ACCEL_SOURCE_DIR) / "config_templates"))
      if (e.path().extension() == ".yaml") v.push_back(e.path().string());
    std::sort(v.begin(), v.end());  // the same byte picks the same template on every machine
    if (v.empty()) std::abort();
    return v;
  }();
  return files;
}

std::string write(const std::string& name, const std::string& text) {
  auto path = (work_dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

[[noreturn]] void finding(const std::string& what, const config::LoadOptions& o) {
  std::fprintf(stderr, "\n=== error contract broken: %s\n=== file: %s, %zu --set items, %zu ACCEL_* variables\n",
               what.c_str(), o.file.c_str(), o.set_overrides.size(), o.environment.size());
  std::abort();
}

// A job that loads holds only values its schema allows: ranges, list lengths, enum spellings.
// (An integer that fits the parser's int64 but not the field's int would wrap and break this.)
std::string schema_violation(const config::JobConfig& job) {
  for (const auto& f : config::schema()) {
    if (!f.alias_of.empty()) continue;
    auto v = f.get(job);
    auto out_of_range = [&](double x) {
      return (f.min && x < *f.min) || (f.max && (f.max_exclusive ? x >= *f.max : x > *f.max));
    };
    bool bad = false;
    if (auto* i = std::get_if<int64_t>(&v)) bad = out_of_range(double(*i));
    if (auto* d = std::get_if<double>(&v); d && f.type == config::FieldType::Float) bad = out_of_range(*d);
    if (auto* l = std::get_if<std::vector<double>>(&v))
      bad = (f.list_size && l->size() != f.list_size) || std::any_of(l->begin(), l->end(), out_of_range);
    if (auto* s = std::get_if<std::string>(&v); s && f.type == config::FieldType::Enum) {
      const auto allowed = f.allowed_values();
      bad = std::find(allowed.begin(), allowed.end(), *s) == allowed.end();
    }
    if (bad) return f.path + " = " + config::value_to_yaml(v) + ", outside " + f.allowed_text();
  }
  return {};
}

// Loads, and on success exercises the writers the CLI runs on a loaded job. Returns false when
// the job does not load (a well-formed ConfigError or UsageError).
bool load_checked(const config::LoadOptions& o, config::LoadedJob& loaded) {
  try {
    loaded = config::load_job(o);
    if (auto why = schema_violation(loaded.job); !why.empty()) finding("loaded a value the schema forbids: " + why, o);
    return true;
  } catch (const ConfigError& e) {
    if (auto why = test::contract_violation(e); !why.empty()) finding(why, o);
  } catch (const UsageError&) {
  } catch (const std::exception& e) {
    finding(std::string("escaped ") + typeid(e).name() + ": " + e.what(), o);
  } catch (...) {
    finding("escaped a non-std exception", o);
  }
  return false;
}

// The DeepSpeed config text of a kind 1 or 2 input; nothing for the others.
std::optional<std::string> deepspeed_text(uint8_t kind, const uint8_t* data, size_t size) {
  std::string rest(reinterpret_cast<const char*>(data), size);
  if (kind == 1) return rest;
  if (kind == 2) return rest.empty() ? rest : rest.substr(1);
  return std::nullopt;
}

config::LoadOptions options_for(uint8_t kind, const uint8_t* data, size_t size) {
  config::LoadOptions o;
  o.check_paths = true;  // as `accel config validate` does; the checks only look, never create
  std::string rest(reinterpret_cast<const char*>(data), size);
  switch (kind) {
    case 0: o.file = write("job.yaml", rest); break;
    case 1: o.file = write("job.json", rest); break;
    case 2: {
      bool accelerate = !rest.empty() && (rest[0] & 1);
      if (!rest.empty()) rest.erase(0, 1);
      write("ds_config.json", rest);
      o.file = write("job.yaml", accelerate ? "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                              "deepspeed_config:\n  deepspeed_config_file: ds_config.json\n"
                                            : "backend: deepspeed\ndeepspeed:\n  config_file: ds_config.json\n");
      break;
    }
    default: {
      const auto& t = templates();
      o.file = t[rest.empty() ? 0 : uint8_t(rest[0]) % t.size()];
      if (!rest.empty()) rest.erase(0, 1);
      size_t start = 0;
      while (start < rest.size()) {
        size_t end = rest.find('\n', start);
        if (end == std::string::npos) end = rest.size();
        std::string line = rest.substr(start, end - start);
        start = end + 1;
        if (line.rfind("ACCEL_", 0) == 0) {
          auto eq = line.find('=');
          o.environment.emplace_back(line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 1));
        } else {
          o.set_overrides.push_back(line);
        }
      }
    }
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(work_dir(), ec)) fs::remove_all(e.path(), ec);

  uint8_t kind = data[0] & 3, then = (data[0] >> 2) & 3, gpus = (data[0] >> 4) & 3;
  auto options = options_for(kind, data + 1, size - 1);
  if (gpus) options.gpus_here = config::GpuCount{gpus == 1 ? 0 : gpus == 2 ? 1 : 8, gpus == 1 ? "no driver" : ""};
  config::LoadedJob loaded;
  if (!load_checked(options, loaded)) return 0;
  if (auto text = deepspeed_text(kind, data + 1, size - 1); text && !nlohmann::json::accept(*text))
    finding("a DeepSpeed config that is not JSON loaded", options);

  try {  // the writers run on a loaded job and must not throw at all
    config::dump_job(loaded.job, loaded.sources, config::DumpStyle::Full);
    config::dump_job(loaded.job, loaded.sources, config::DumpStyle::WithSources);
    config::dump_job(loaded.job, loaded.sources, config::DumpStyle::ExplicitOnly);
    if (then == 1) config::dump_resolved_job(loaded);
  } catch (const std::exception& e) {
    finding(std::string("a writer threw ") + typeid(e).name() + ": " + e.what(), options);
  }
  if (then >= 2) {  // `accel config convert --to fsdp|deepspeed`: the CLI appends --set backend=...
    options.set_overrides.push_back(then == 2 ? "backend=fsdp" : "backend=deepspeed");
    config::LoadedJob converted;
    if (!load_checked(options, converted)) return 0;
    try {
      config::converted_job_text(converted, options.file);
    } catch (const std::exception& e) {
      finding(std::string("converted_job_text threw ") + typeid(e).name() + ": " + e.what(), options);
    }
  }
  return 0;
}
