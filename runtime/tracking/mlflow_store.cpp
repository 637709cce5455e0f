#include "runtime/tracking/mlflow_store.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace fs = std::filesystem;

namespace accel::tracking {
namespace {

constexpr const char* kExperimentId = "1";
constexpr const char* kSourceTag = "mlflow.source.name";
constexpr const char* kSourceName = "accel";
// MLflow's RunStatus and SourceType numbers, as its FileStore stores them in meta.yaml.
constexpr int kRunning = 1, kFinished = 3, kFailed = 4, kSourceLocal = 4;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file MLflow reads whole (meta.yaml, a param, a tag), replaced atomically; a symbolic link at
// its name or at the staged one is refused, never followed (safe_file.hpp).
void write_replacing(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  files::refuse_link(path.string());
  const std::string staged = path.string() + ".tmp";
  checkpoint::write_file_synced(staged, text);
  std::error_code ec;
  fs::rename(staged, path, ec);
  if (ec) throw RunError("cannot replace " + path.string() + ": " + ec.message());
}

std::string file_uri(const fs::path& path) { return "file://" + fs::absolute(path).lexically_normal().string(); }

std::string experiment_meta(const std::string& id, const std::string& name, const fs::path& dir, int64_t time_ms) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "artifact_location" << YAML::Value << YAML::DoubleQuoted << file_uri(dir);
  out << YAML::Key << "creation_time" << YAML::Value << time_ms;
  out << YAML::Key << "experiment_id" << YAML::Value << YAML::DoubleQuoted << id;
  out << YAML::Key << "last_update_time" << YAML::Value << time_ms;
  out << YAML::Key << "lifecycle_stage" << YAML::Value << "active";
  out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << name;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 gen((uint64_t(device()) << 32) ^ device());
  char id[33];
  std::snprintf(id, sizeof id, "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return id;
}

// accel's run in the experiment directory: the first (by name) whose source tag says accel.
std::string find_accel_run(const fs::path& experiment_dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(experiment_dir, ec))
    if (entry.is_directory() && read_text(entry.path() / "tags" / kSourceTag) == kSourceName)
      ids.push_back(entry.path().filename().string());
  std::sort(ids.begin(), ids.end());
  return ids.empty() ? "" : ids.front();
}

// A metric line's step, or nullopt when the line is not "<ms> <value> <step>".
std::optional<int64_t> step_of_line(const std::string& line) {
  std::istringstream in(line);
  std::string ms, value, step, extra;
  if (!(in >> ms >> value >> step) || (in >> extra)) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long s = std::strtoll(step.c_str(), &end, 10);
  if (errno || *end) return std::nullopt;
  return int64_t(s);
}

// Keeps the lines of one metric file with step < keep_below (rewritten atomically); a file left
// empty goes, since MLflow refuses a metric file without data.
void keep_metric_lines(const fs::path& path, int64_t keep_below) {
  const std::string text = read_text(path);
  std::string kept;
  size_t start = 0;
  int lineno = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const bool complete = end != std::string::npos;
    if (!complete) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++lineno;
    if (line.empty()) continue;
    const auto step = step_of_line(line);
    if (!step || !complete) {
      if (start >= text.size()) break;  // a last line cut short by a crash
      throw RunError(path.string() + ":" + std::to_string(lineno) +
                     ": not an MLflow metric line (\"<ms> <value> <step>\"); move the file away to resume");
    }
    if (*step < keep_below) kept += line + "\n";
  }
  if (kept.empty()) {
    fs::remove(path);
    return;
  }
  write_replacing(path, kept);
}

std::string metric_value_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // reads back as the same double
  return buf;
}

}  // namespace

std::string MlflowRun::refusal_of_name(const std::string& name) {
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ' ' || c == ':' || c == '/'))
      return "MLflow takes only letters, digits, _ - . space : and / in a name";
  const std::string normal = fs::path(name).lexically_normal().generic_string();
  if (name.empty() || name.front() == '/' || name.back() == '/' || normal != name || normal == "." ||
      normal.rfind("..", 0) == 0)
    return "MLflow keeps a name as a file path, and this one is not a plain relative path "
           "(empty, '.', '..', a leading or trailing '/', or '//')";
  return "";
}

MlflowRun::MlflowRun(const std::string& root, const std::string& experiment_name, const std::string& run_name,
                     int64_t keep_below)
    : run_name_(run_name), start_time_ms_(now_ms()) {
  const fs::path store(root);
  fs::create_directories(store / ".trash");
  const fs::path default_dir = store / "0";
  if (!fs::exists(default_dir / "meta.yaml"))
    write_replacing(default_dir / "meta.yaml", experiment_meta("0", "Default", default_dir, start_time_ms_));
  const fs::path experiment = store / kExperimentId;
  experiment_dir_ = experiment.string();
  write_replacing(experiment / "meta.yaml", experiment_meta(kExperimentId, experiment_name, experiment, start_time_ms_));

  run_id_ = find_accel_run(experiment);
  if (run_id_.empty()) run_id_ = random_run_id();
  const fs::path run = experiment / run_id_;
  run_dir_ = run.string();
  fs::create_directories(run / "metrics");
  fs::create_directories(run / "artifacts");
  std::vector<fs::path> metric_files;
  for (const auto& entry : fs::recursive_directory_iterator(run / "metrics")) {
    files::refuse_link(entry.path().string());  // a planted link is neither read through nor kept
    if (entry.is_regular_file()) metric_files.push_back(entry.path());
  }
  for (const auto& path : metric_files) {
    if (keep_below > 0) keep_metric_lines(path, keep_below);
    else fs::remove(path);
  }
  const char* user = std::getenv("USER");
  user_ = user && *user ? user : "unknown";
  write_replacing(run / "tags" / "mlflow.runName", run_name_);
  write_replacing(run / "tags" / kSourceTag, kSourceName);
  write_replacing(run / "tags" / "mlflow.user", user_);
  set_params({});
  write_run_meta(kRunning, -1);
}

MlflowRun::~MlflowRun() {
  for (auto& [key, file] : metric_files_) std::fclose(file);
  try {
    write_run_meta(std::uncaught_exceptions() > 0 ? kFailed : kFinished, now_ms());
  } catch (const std::exception&) {
    // A destructor must not throw; the run then stays RUNNING, as after a crash.
  }
}

void MlflowRun::write_run_meta(int status, int64_t end_time_ms) {
  const fs::path run(run_dir_);
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "artifact_uri" << YAML::Value << YAML::DoubleQuoted << file_uri(run / "artifacts");
  out << YAML::Key << "end_time" << YAML::Value;
  if (end_time_ms < 0) out << YAML::Null;
  else out << end_time_ms;
  out << YAML::Key << "entry_point_name" << YAML::Value << YAML::DoubleQuoted << "";
  out << YAML::Key << "experiment_id" << YAML::Value << YAML::DoubleQuoted << kExperimentId;
  out << YAML::Key << "lifecycle_stage" << YAML::Value << "active";
  out << YAML::Key << "run_id" << YAML::Value << YAML::DoubleQuoted << run_id_;
  out << YAML::Key << "run_name" << YAML::Value << YAML::DoubleQuoted << run_name_;
  out << YAML::Key << "run_uuid" << YAML::Value << YAML::DoubleQuoted << run_id_;  // MLflow 1.x-2.x's name
  out << YAML::Key << "source_name" << YAML::Value << YAML::DoubleQuoted << "";
  out << YAML::Key << "source_type" << YAML::Value << kSourceLocal;
  out << YAML::Key << "source_version" << YAML::Value << YAML::DoubleQuoted << "";
  out << YAML::Key << "start_time" << YAML::Value << start_time_ms_;
  out << YAML::Key << "status" << YAML::Value << status;
  out << YAML::Key << "tags" << YAML::Value << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
  out << YAML::Key << "user_id" << YAML::Value << YAML::DoubleQuoted << user_;
  out << YAML::EndMap;
  write_replacing(run / "meta.yaml", std::string(out.c_str()) + "\n");
}

void MlflowRun::set_params(const std::vector<std::pair<std::string, std::string>>& params) {
  const fs::path dir = fs::path(run_dir_) / "params";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [key, value] : params) {
    if (const std::string why = refusal_of_name(key); !why.empty())
      throw RunError("mlflow: param '" + key + "': " + why);
    write_replacing(dir / key, value);
  }
}

void MlflowRun::log_metrics(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  const std::string ms = std::to_string(now_ms());
  for (const auto& [key, v] : values) {
    auto it = metric_files_.find(key);
    if (it == metric_files_.end()) {
      if (const std::string why = refusal_of_name(key); !why.empty())
        throw RunError("mlflow: metric '" + key + "': " + why);
      const fs::path path = fs::path(run_dir_) / "metrics" / key;
      fs::create_directories(path.parent_path());
      std::FILE* file = files::fopen_for_write(path.string(), files::WriteMode::append);  // never through a link
      it = metric_files_.emplace(key, file).first;
    }
    const std::string line = ms + " " + metric_value_text(v) + " " + std::to_string(step) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), it->second) != line.size() || std::fflush(it->second) != 0)
      throw RunError("cannot write " + run_dir_ + "/metrics/" + key + ": " + std::strerror(errno));
  }
}

}  // namespace accel::tracking
