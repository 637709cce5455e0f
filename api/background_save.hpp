// The background thread of one asynchronous checkpoint (docs/design/0028), and what the training
// thread waits on: the end of the staging copies (the live state may change after it), and the
// end of the whole save (committed, or failed with an error rethrown on the training thread).
// Invariants: the work runs exactly once, on its own thread; mark_staged() is implied when the work
// ends early (an error), so a waiter never hangs on it; the destructor abandons the work and joins
// it (a wait in the work sees abandoned() and returns without committing).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace accel::api {

class BackgroundSave {
 public:
  using Work = std::function<void(BackgroundSave&)>;
  explicit BackgroundSave(Work work);
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Called by the work: its copies of the live state are done.
  void mark_staged();
  // Set by abandon(); the work's waits poll it.
  const std::atomic<bool>& abandon_flag() const { return abandon_; }

  // Training thread: returns once the work marked staged or ended.
  void wait_staged();
  // Whether the work has ended (without blocking).
  bool finished() const;
  // Waits for the work to end; its exception, if it threw (null otherwise).
  std::exception_ptr join();
  // Asks the work to stop at its next wait (nothing committed), then joins.
  void abandon();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool staged_ = false;
  bool finished_ = false;
  std::exception_ptr error_;
  std::atomic<bool> abandon_{false};
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace accel::api
