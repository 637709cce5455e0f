// Asynchronous checkpoints (training.async_checkpoint, docs/design/0028): the part of
// CheckpointEngine that runs after save() has staged this rank's state. A background thread copies
// the host state into the staging buffers (the training thread's next optimizer step waits for
// that, not for the write), writes the files, hashes and fsyncs them, and agrees with the other
// ranks through the rendezvous store (runtime/checkpoint/commit_exchange.hpp) before each storage
// group's writer commits: `latest` moves only once every rank's files are written.
#include <time.h>

#include <filesystem>
#include <utility>

#include "api/checkpoint_engine.hpp"
#include "runtime/checkpoint/node_local.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/common/sealed_value.hpp"

namespace accel::api {
namespace fs = std::filesystem;

namespace {

// Asynchronous saves made by this process, over every checkpoint root: the same count on every
// rank, since saves are collective and made in the same order. It keys each save's agreement.
std::atomic<int64_t> async_saves_started{0};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CheckpointEngine::~CheckpointEngine() {
  if (!in_flight_) return;
  if (std::uncaught_exceptions() > 0) {  // the run is failing: nothing is committed after it
    in_flight_->abandon();
    return;
  }
  try {
    wait();
  } catch (const std::exception& e) {
    logging::warn("[rank " + std::to_string(comm_.rank()) + "] " + e.what());
  }
}

void CheckpointEngine::wait() {
  if (!in_flight_) return;
  std::exception_ptr error = in_flight_->join();
  in_flight_.reset();
  async_times_.saves += 1;
  async_times_.background_s += in_flight_times_.background_s;
  async_times_.background_cpu_s += in_flight_times_.background_cpu_s;
  if (error) std::rethrow_exception(error);
}

void CheckpointEngine::before_state_changes() {
  if (!in_flight_) return;
  const auto t0 = std::chrono::steady_clock::now();
  in_flight_->wait_staged();
  const double waited = seconds_since(t0);
  async_times_.fence_wait_s += waited;
  async_times_.fence_waits.back() += waited;
  if (in_flight_->finished()) wait();  // committed: joined; failed: thrown now, not at the next save
}

checkpoint::CommitExchange CheckpointEngine::commit_exchange(int64_t save_number) {
  // The background thread talks to the store through a client of its own: a blocking call on the
  // training thread's client would hold that client's lock.
  if (!background_store_) background_store_ = rendezvous_->store()->clone();
  auto store = background_store_;
  checkpoint::CommitExchange x;
  // Votes and verdicts are sealed under the job secret (runtime/common/sealed_value.hpp); the
  // counters `add` keeps cannot be, and only count arrivals (SECURITY.md).
  x.mailbox.set = [store](const std::string& key, const std::string& value) {
    const std::string sealed = secret::seal(key, value);
    store->set(key, std::vector<uint8_t>(sealed.begin(), sealed.end()));
  };
  x.mailbox.try_get = [store](const std::string& key) -> std::optional<std::string> {
    if (!store->check({key})) return std::nullopt;
    const std::vector<uint8_t> v = store->get(key);
    return secret::unseal(key, std::string(v.begin(), v.end()));
  };
  x.mailbox.add = [store](const std::string& key, int64_t delta) { return store->add(key, delta); };
  x.mailbox.erase = [store](const std::string& key) { store->deleteKey(key); };
  x.base = rendezvous_->prefix() + "async_checkpoint/" + std::to_string(save_number) + "/";
  x.rank = comm_.rank();
  x.world_size = comm_.size();
  x.group_of_rank = rank_storage_.group_of_rank;
  x.writer = writer_;
  x.timeout = std::chrono::seconds(job_.job.collective_timeout_s);
  return x;
}

std::string CheckpointEngine::start_background_save(int64_t steps_done, const std::string& staging,
                                                    std::string record_text, std::function<void(bool)> after_files) {
  std::optional<checkpoint::CommitExchange> exchange;
  if (comm_.size() > 1) exchange = commit_exchange(async_saves_started++);
  // Every rank has finished the previous save (save() joined it before its barrier): its keys go.
  std::optional<checkpoint::CommitExchange> previous = std::exchange(previous_exchange_, exchange);
  in_flight_ = std::make_unique<api::BackgroundSave>(
      [this, steps_done, staging, record_text = std::move(record_text), after_files = std::move(after_files),
       exchange = std::move(exchange), previous = std::move(previous)](api::BackgroundSave& self) {
        try {
          if (previous) previous->forget();
        } catch (const std::exception&) {  // a key left in the store costs bytes, not this save
        }
        write_in_background(self, steps_done, staging, record_text, after_files, exchange);
      });
  return root_ + "/" + checkpoint::step_dir_name(steps_done);
}

void CheckpointEngine::write_in_background(api::BackgroundSave& self, int64_t steps_done, const std::string& staging,
                                           const std::string& record_text, const std::function<void(bool)>& after_files,
                                           const std::optional<checkpoint::CommitExchange>& exchange) {
  const auto started = std::chrono::steady_clock::now();
  const double cpu_started = thread_cpu_seconds();
  in_flight_times_ = {};
  // Read by the training thread once it joined this thread.
  struct Measure {
    AsyncTimes& times;
    std::chrono::steady_clock::time_point started;
    double cpu_started;
    ~Measure() {
      times.background_s = seconds_since(started);
      times.background_cpu_s = thread_cpu_seconds() - cpu_started;
    }
  } measure{in_flight_times_, started, cpu_started};
  // This rank's part: its files written, fsynced and hashed, or what failed.
  checkpoint::RankReport mine;
  // ACCEL_LOG_LEVEL=debug: each phase's wall and CPU seconds.
  auto phase = [&, t = started, cpu = cpu_started](const char* what) mutable {
    if (!logging::debug_enabled()) return;
    char line[160];
    std::snprintf(line, sizeof line, "[rank %d] checkpoint step %lld, background %s: %.3f s (%.3f s of CPU)",
                  comm_.rank(), static_cast<long long>(steps_done), what, seconds_since(t), thread_cpu_seconds() - cpu);
    logging::debug(line);
    t = std::chrono::steady_clock::now();
    cpu = thread_cpu_seconds();
  };
  try {
    staging_->copy_host();
    self.mark_staged();
    phase("staging copy");
    std::vector<std::string> names = staging_->write_files();
    phase("files written");
    if (!record_text.empty()) {
      checkpoint::write_file_synced(staging + "/" + kStateRecordFile, record_text);
      names.push_back(kStateRecordFile);
    }
    if (comm_.rank() == 0 && !job_.file.empty()) {
      fs::copy_file(job_.file, staging + "/" + kJobRecordFile, fs::copy_options::overwrite_existing);
      names.push_back(kJobRecordFile);
    }
    if (after_files) after_files(true);
    mine.files = checkpoint::hash_files(staging, names);
    phase("files hashed");
  } catch (const std::exception& e) {
    mine.error = e.what();
  }
  self.mark_staged();

  const nlohmann::json extra = {{"backend", config::to_string(job_.job.backend)}, {"world_size", comm_.size()}};
  std::string error;
  if (!exchange) {  // one rank: nobody to agree with
    if (!mine.ok()) throw write_failure(steps_done, mine.error, staging, world_.machine_rank);
    try {
      checkpoint::commit_listed(root_, steps_done, extra, mine.files);
    } catch (const std::exception& e) {
      throw write_failure(steps_done, e.what(), staging, world_.machine_rank);
    }
  } else {
    exchange->post_report(mine);
    if (!exchange->writer) {
      const std::optional<std::string> outcome = exchange->wait_outcome(self.abandon_flag());
      if (!outcome) return;  // abandoned: the run is ending
      if (!outcome->empty()) throw checkpoint::CheckpointError(*outcome);
      return;
    }
    std::optional<std::vector<checkpoint::RankReport>> reports;
    try {
      reports = exchange->gather_reports(self.abandon_flag());
    } catch (const std::exception& e) {  // a rank never reported: the group hears it now, not at its own timeout
      const std::string message = write_failure(steps_done, e.what(), staging, world_.machine_rank).what();
      exchange->post_outcome(message);
      throw checkpoint::CheckpointError(message);
    }
    if (!reports) return;
    int failed_rank = -1;
    for (size_t r = 0; r < reports->size() && failed_rank < 0; ++r)
      if (!(*reports)[r].ok()) failed_rank = int(r);
    if (failed_rank >= 0) {
      error = write_failure(steps_done, checkpoint::first_failure(*reports), staging, world_.machine_of(failed_rank)).what();
    } else {
      try {
        const auto groups = checkpoint::files_of_groups(*exchange, int(storage_.groups.size()), *reports);
        if (storage_.shared())
          checkpoint::commit_listed(root_, steps_done, extra, groups.front());
        else
          checkpoint::commit_node_local(root_, steps_done, extra, checkpoint::merge_group_files(storage_, groups),
                                  storage_.num_machines());
      } catch (const std::exception& e) {
        error = write_failure(steps_done, e.what(), staging, world_.machine_rank).what();
      }
    }
    exchange->post_outcome(error);
    if (!error.empty()) throw checkpoint::CheckpointError(error);
  }
  if (comm_.rank() == 0) {
    char took[96];
    std::snprintf(took, sizeof took, "%.2f s (%.2f s of CPU)", seconds_since(started),
                  thread_cpu_seconds() - cpu_started);
    logging::info("accel: committed " + root_ + "/" + checkpoint::step_dir_name(steps_done) + " (" +
                  std::to_string(steps_done) + " steps), written in the background in " + took);
  }
}

}  // namespace accel::api
