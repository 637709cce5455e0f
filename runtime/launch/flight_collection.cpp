// The launcher's side of the flight recorder; see flight_collection.hpp.
#include "runtime/launch/flight_collection.hpp"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "runtime/common/safe_file.hpp"

namespace accel::launch {
namespace {

constexpr int kDumpSignal = SIGUSR2;  // runtime/comm/flight_registry.hpp's kFlightDumpSignal

bool make_directories(const std::string& dir) {
  std::string path;
  std::istringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    path += part;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return false;
    path += "/";
  }
  return true;
}

// "rank12.json" -> 12; -1 for any other name (temporary files included).
int rank_of_dump(const std::string& name) {
  if (name.rfind("rank", 0) != 0 || name.size() <= 9 || name.substr(name.size() - 5) != ".json") return -1;
  const std::string digits = name.substr(4, name.size() - 9);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(digits);
}

}  // namespace

bool catches_signal(pid_t pid, int signal) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    try {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return signal >= 1 && signal <= 64 && ((mask >> (signal - 1)) & 1ULL) != 0;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

std::string flight_dump_path(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".json"; }

FlightCollection::FlightCollection(std::string dir, std::string diagnosis_file)
    : dir_(std::move(dir)), diagnosis_file_(std::move(diagnosis_file)) {}

std::string FlightCollection::prepare(const std::vector<int>& ranks) const {
  if (!make_directories(dir_)) return "cannot create " + dir_ + ": " + std::strerror(errno);
  for (int rank : ranks) {
    const std::string path = flight_dump_path(dir_, rank);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return "cannot remove " + path + ": " + std::strerror(errno);
  }
  return "";
}

FlightCollection::FileId FlightCollection::identify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return FileId{true, st.st_dev, st.st_ino};
}

void FlightCollection::request(const std::vector<std::pair<int, pid_t>>& live, int64_t now_ns) {
  requested_at_ns_ = now_ns;
  awaited_.clear();
  for (const auto& [rank, pid] : live) {
    if (!catches_signal(pid, kDumpSignal)) continue;
    awaited_[rank] = identify(flight_dump_path(dir_, rank));
    ::kill(pid, kDumpSignal);  // the worker itself: its process group may hold other programs
  }
}

bool FlightCollection::complete() {
  for (auto it = awaited_.begin(); it != awaited_.end();) {
    const FileId now = identify(flight_dump_path(dir_, it->first));
    if (now.exists && !(now == it->second))
      it = awaited_.erase(it);
    else
      ++it;
  }
  return awaited_.empty();
}

std::string FlightCollection::diagnose(const std::vector<flight::RankFacts>& facts, int world) {
  flight::DiagnosisInput input;
  input.world = world;
  input.detected_at_ns = requested_at_ns_;
  input.facts = facts;
  std::string problems;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (rank_of_dump(name) < 0) continue;
      const std::string path = dir_ + "/" + name;
      std::ifstream in(path);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        input.dumps.push_back(flight::rank_dump_from_json(text, path));
      } catch (const std::exception& e) {
        problems += std::string("unreadable flight records: ") + e.what() + "\n";
      }
    }
    ::closedir(d);
  }
  // Workers that recorded nothing (an NCCL communicator, a program that issued no collective) give
  // no diagnosis: "no records" would only be noise under their error.
  const bool any_group = std::any_of(input.dumps.begin(), input.dumps.end(), [](const auto& d) { return !d.groups.empty(); });
  if (!any_group) return "";
  std::sort(input.dumps.begin(), input.dumps.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  std::string text = flight::render(flight::diagnose(input)) + problems;
  // Replaced whole, never through a link planted at its name (safe_file.hpp): the reason is printed.
  std::string where = "records and this diagnosis in " + dir_ + "/";
  try {
    files::write_file_replacing(diagnosis_file_, text);
  } catch (const std::exception& e) {
    where = "records in " + dir_ + "/ (" + e.what() + ")";
  }
  std::string printed;
  std::istringstream lines(text + where + "\n");
  for (std::string line; std::getline(lines, line);) printed += "[flight] " + line + "\n";
  return printed;
}

}  // namespace accel::launch
