// See progress.hpp.
#include "runtime/common/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

#include "runtime/common/human_bytes.hpp"
#include "runtime/common/log.hpp"

namespace accel::progress {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

// The live tasks, innermost last. One mutex guards the list and every task's counters: the writer
// hooks may run on another thread than the task's owner.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Task*>& live_tasks() {
  static std::vector<Task*> tasks;
  return tasks;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 100 ? "%.2f s" : "%.0f s", s);
  return buf;
}

std::string files_text(int64_t n) { return std::to_string(n) + (n == 1 ? " file" : " files"); }

template <typename F>
void with_innermost(F&& f) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!live_tasks().empty()) f(*live_tasks().back());
}

}  // namespace

Display display_from_env() {
  static const Display d = [] {
    const char* v = std::getenv("ACCEL_PROGRESS");
    const std::string value = v ? v : "";
    if (value == "tty") return Display::tty;
    if (value == "off") return Display::off;
    if (value.empty()) return isatty(STDOUT_FILENO) == 1 ? Display::tty : Display::lines;
    if (value != "lines") logging::warn("ACCEL_PROGRESS=" + value + " is not tty, lines or off; using lines");
    return Display::lines;
  }();
  return d;
}

std::string bar(int64_t done, int64_t total) {
  constexpr int kWidth = 20;
  done = std::clamp<int64_t>(done, 0, total > 0 ? total : 0);
  const int filled = total > 0 ? int(kWidth * done / total) : kWidth;
  char pct[32];
  std::snprintf(pct, sizeof pct, "%3lld%% ", static_cast<long long>(total > 0 ? 100 * done / total : 100));
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " + pct;
}

Output Output::standard() {
  Output o;
  o.line = [](const std::string& text) { logging::info(text); };
  o.draw = [](const std::string& text) {
    std::string shown = text;
    struct winsize ws {};
    // A line longer than the terminal wraps, and "\r" then returns only to its last row.
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && shown.size() >= ws.ws_col)
      shown.resize(ws.ws_col - 1);
    std::fputs((shown + "\x1b[K\r").c_str(), stdout);
    std::fflush(stdout);
  };
  return o;
}

Task::Task(std::string what, bool visible, Display display, Output output)
    : what_(std::move(what)),
      visible_(visible && display != Display::off && logging::info_enabled()),
      display_(display),
      output_(std::move(output)),
      start_(Clock::now()),
      uncaught_(std::uncaught_exceptions()) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  live_tasks().push_back(this);
  if (!visible_) return;
  if (display_ == Display::lines) output_.line(what_ + " ...");
  else draw(true);
}

Task::~Task() {
  if (!finished_ && std::uncaught_exceptions() == uncaught_) {
    try {
      finish();
    } catch (...) {  // a failing log write must not end the process from a destructor
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& tasks = live_tasks();
  tasks.erase(std::remove(tasks.begin(), tasks.end(), this), tasks.end());
  if (drawn_) output_.draw("");  // only while an exception unwinds: finish() cleared it otherwise
}

void Task::set_total(int64_t total, std::string noun) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  total_ = total;
  noun_ = std::move(noun);
  draw(false);
}

void Task::set_stage(std::string stage) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  set_stage_locked(std::move(stage));
}

void Task::set_stage_locked(std::string stage) {
  stage_ = std::move(stage);
  draw(true);
}

void Task::advance(int64_t n) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  done_ += n;
  draw(false);
}

void Task::add_bytes(uint64_t bytes) {
  bytes_ += bytes;
  draw(false);
}

void Task::add_file_written() {
  ++files_;
  draw(false);
}

double Task::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string Task::status() const {
  std::string s;
  if (!stage_.empty()) s += " " + stage_;
  if (bytes_total_ > 0 || bytes_ > 0) {
    // Bytes once writing began (they come after any counted part); a bar only when the total is
    // known (expect_bytes), otherwise what is written so far.
    s += " " + (bytes_total_ > 0 ? bar(int64_t(bytes_), int64_t(bytes_total_)) : "") + human_bytes(double(bytes_));
    if (bytes_total_ > 0) s += " of " + human_bytes(double(bytes_total_));
    s += ", " + files_text(files_);
  } else if (total_ > 0) {
    s += " " + bar(done_, total_) + std::to_string(std::min(done_, total_)) + "/" + std::to_string(total_) + " " + noun_;
  }
  return what_ + (s.empty() ? "" : ":" + s) + " | " + seconds_text(seconds());
}

void Task::draw(bool force) {
  if (!visible_ || display_ != Display::tty || finished_) return;
  const auto now = Clock::now();
  if (!force && drawn_ && now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  drawn_ = true;
  output_.draw(status());
}

double Task::finish() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  const double s = seconds();
  if (finished_) return s;
  finished_ = true;
  auto& tasks = live_tasks();  // a finished task counts no more bytes
  tasks.erase(std::remove(tasks.begin(), tasks.end(), this), tasks.end());
  if (drawn_) output_.draw("");
  drawn_ = false;
  if (!visible_) return s;
  std::string details;
  if (total_ > 0) details = std::to_string(done_) + " " + noun_;
  if (files_ > 0) {
    if (!details.empty()) details += ", ";
    details += files_text(files_) + ", " + human_bytes(double(bytes_));
    if (s > 0) details += ", " + human_bytes(double(bytes_) / s) + "/s";
  }
  output_.line(what_ + " took " + seconds_text(s) + (details.empty() ? "" : " (" + details + ")"));
  return s;
}

void expect_bytes(uint64_t bytes) {
  with_innermost([&](Task& t) { t.set_expected_bytes(bytes); });
}
void stage(const std::string& text) {
  with_innermost([&](Task& t) { t.set_stage_locked(text); });
}
void bytes_written(uint64_t bytes) {
  with_innermost([&](Task& t) { t.add_bytes(bytes); });
}
void file_written() {
  with_innermost([](Task& t) { t.add_file_written(); });
}

}  // namespace accel::progress
