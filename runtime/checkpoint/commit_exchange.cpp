// The store-based agreement of asynchronous checkpoints (see the header and docs/design/0028).
#include "runtime/checkpoint/commit_exchange.hpp"

#include <nlohmann/json.hpp>

#include <thread>

#include "runtime/checkpoint/node_local.hpp"

namespace accel::checkpoint {
namespace {

// Short enough that a commit follows the last report promptly, long enough that a background
// thread waiting for minutes costs nothing measurable.
constexpr std::chrono::milliseconds kPoll{5};

std::string rank_key(const CommitExchange& x, int r) { return x.base + "rank/" + std::to_string(r); }
std::string count_key(const CommitExchange& x) { return x.base + "reported"; }
std::string outcome_key(const CommitExchange& x, int g) { return x.base + "commit/" + std::to_string(g); }

[[noreturn]] void timed_out(const CommitExchange& x, const std::string& what, const std::string& missing) {
  throw CheckpointError(what + ": no answer from " + missing + " within collective_timeout_s (" +
                        std::to_string(x.timeout.count() / 1000) + " s); a rank is stuck writing its files, or its "
                        "disk is; raise collective_timeout_s if writing a checkpoint takes longer");
}

// Polls `keys` until all are set (their values, in order), `abandon` (nullopt) or the timeout.
std::optional<std::vector<std::string>> wait_all(const CommitExchange& x, const std::vector<std::string>& keys,
                                                 const std::atomic<bool>& abandon,
                                                 const std::function<std::string(size_t)>& who,
                                                 const std::string& what) {
  std::vector<std::optional<std::string>> got(keys.size());
  const auto deadline = std::chrono::steady_clock::now() + x.timeout;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!got[i]) got[i] = x.mailbox.try_get(keys[i]);
      all = all && got[i].has_value();
    }
    if (all) break;
    if (abandon.load()) return std::nullopt;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!got[i]) missing += (missing.empty() ? "" : ", ") + who(i);
      timed_out(x, what, missing);
    }
    std::this_thread::sleep_for(kPoll);
  }
  std::vector<std::string> values;
  for (auto& v : got) values.push_back(std::move(*v));
  return values;
}

}  // namespace

void CommitExchange::post_report(const RankReport& report) const {
  mailbox.set(rank_key(*this, rank), report_to_text(report));
  mailbox.add(count_key(*this), 1);
}

std::optional<std::vector<RankReport>> CommitExchange::gather_reports(const std::atomic<bool>& abandon) const {
  // One counter polled, not a key per rank: at thousands of ranks the store serves the writers'
  // polls, not the ranks' reports.
  const std::string what = "checkpoint commit (rank " + std::to_string(rank) + " waiting for every rank's files)";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (mailbox.add(count_key(*this), 0) < world_size) {
    if (abandon.load()) return std::nullopt;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      int listed = 0;
      for (int r = 0; r < world_size; ++r)
        if (!mailbox.try_get(rank_key(*this, r)) && listed++ < 8) missing += (missing.empty() ? "rank " : ", ") + std::to_string(r);
      timed_out(*this, what, listed > 8 ? missing + " and " + std::to_string(listed - 8) + " more" : missing);
    }
    std::this_thread::sleep_for(kPoll);
  }
  std::vector<RankReport> reports;
  for (int r = 0; r < world_size; ++r) {
    const auto text = mailbox.try_get(rank_key(*this, r));
    reports.push_back(text ? report_from_text(*text) : RankReport{{}, "its report is missing from the store"});
  }
  return reports;
}

void CommitExchange::forget() const {
  mailbox.erase(rank_key(*this, rank));
  if (writer) mailbox.erase(outcome_key(*this, group(rank)));
  if (rank == 0) mailbox.erase(count_key(*this));
}

void CommitExchange::post_outcome(const std::string& error) const {
  mailbox.set(outcome_key(*this, group(rank)), error.empty() ? "committed" : "failed\n" + error);
}

std::optional<std::string> CommitExchange::wait_outcome(const std::atomic<bool>& abandon) const {
  const int g = group(rank);
  auto texts = wait_all(*this, {outcome_key(*this, g)}, abandon,
                        [g](size_t) { return "storage group " + std::to_string(g) + "'s writer"; },
                        "checkpoint commit (rank " + std::to_string(rank) + " waiting for the commit)");
  if (!texts) return std::nullopt;
  const std::string& text = texts->front();
  if (text == "committed") return std::string();
  const std::string prefix = "failed\n";
  return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : "unreadable commit outcome: " + text;
}

std::string first_failure(const std::vector<RankReport>& reports) {
  std::string first;
  int others = 0;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].ok()) continue;
    if (first.empty()) first = "rank " + std::to_string(r) + ": " + reports[r].error;
    else ++others;
  }
  if (others > 0) first += " (and " + std::to_string(others) + " more rank" + (others > 1 ? "s" : "") + " failed)";
  return first;
}

std::vector<std::vector<FileEntry>> files_of_groups(const CommitExchange& exchange, int num_groups,
                                                    const std::vector<RankReport>& reports) {
  std::vector<std::vector<FileEntry>> out(size_t(std::max(1, num_groups)));
  for (size_t r = 0; r < reports.size(); ++r)
    for (const auto& f : reports[r].files) out.at(size_t(exchange.group(int(r)))).push_back(f);
  return out;
}

std::string report_to_text(const RankReport& report) {
  return nlohmann::json{{"error", report.error}, {"files", nlohmann::json::parse(files_to_text(report.files))}}.dump();
}

RankReport report_from_text(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j.contains("files"))
    return {{}, "unreadable report in the rendezvous store: " + text.substr(0, 80)};
  return {files_from_text(j["files"].dump()), j["error"].get<std::string>()};
}

}  // namespace accel::checkpoint
