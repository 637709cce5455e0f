// The background thread of one asynchronous checkpoint (see the header).
#include "api/background_save.hpp"

namespace accel::api {

BackgroundSave::BackgroundSave(Work work)
    : thread_([this, work = std::move(work)] {
        std::exception_ptr error;
        try {
          work(*this);
        } catch (...) {
          error = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mu_);
        error_ = error;
        staged_ = finished_ = true;
        cv_.notify_all();
      }) {}

BackgroundSave::~BackgroundSave() { abandon(); }

void BackgroundSave::mark_staged() {
  std::lock_guard<std::mutex> lock(mu_);
  staged_ = true;
  cv_.notify_all();
}

void BackgroundSave::wait_staged() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return staged_; });
}

bool BackgroundSave::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::exception_ptr BackgroundSave::join() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void BackgroundSave::abandon() {
  abandon_ = true;
  join();
}

}  // namespace accel::api
