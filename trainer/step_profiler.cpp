#include "trainer/step_profiler.hpp"

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::train {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

ProfilerConfig profiler_config() {
  // Operators and kernels with their timing only: shapes, memory events and stacks would make the
  // trace of a step of a large model many times larger.
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/false, /*profile_memory=*/false,
                        /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
}

}  // namespace

struct StepProfiler::Session {
  std::set<ActivityType> activities;
  bool running = false;
  // The current step's span, ProfilerStep#N as torch.profiler's step() names it (TensorBoard's
  // profiler plugin splits a trace into steps by these).
  std::unique_ptr<at::RecordFunction> step_span;
};

ProfileWindow resolve_profile_window(ProfileWindow requested, int64_t start, int64_t max_steps) {
  if (requested.dir.empty()) return requested;
  if (requested.first <= 0) {
    requested.first = std::min(start + 3, max_steps);
    requested.last = std::min(requested.first + 2, max_steps);
  }
  // A resumed run records what is left of the window; none of it left: nothing.
  requested.first = std::max(requested.first, start + 1);
  if (requested.first > requested.last) requested.dir.clear();
  return requested;
}

StepProfiler::StepProfiler(ProfileWindow window, int rank, int cuda_device)
    : window_(std::move(window)), rank_(rank), cuda_device_(cuda_device), session_(std::make_unique<Session>()) {
  session_->activities = {ActivityType::CPU};
  if (cuda_device_ >= 0) session_->activities.insert(ActivityType::CUDA);
  // A CPU rank of a CUDA build: Kineto still asks CUDA for its devices when it writes the trace and
  // logs the failure as an error. Its logger reads KINETO_LOG_LEVEL when the profiler first starts;
  // above its highest level (ERROR) it says nothing. A user's own setting wins.
  if (!window_.dir.empty() && cuda_device_ < 0) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
}

StepProfiler::~StepProfiler() {
  // A step failed inside the window: stop recording, write nothing.
  session_->step_span.reset();
  if (session_->running) {
    try {
      kineto::disableProfiler();
    } catch (...) {
    }
  }
}

void StepProfiler::before_step(int64_t step) {
  if (window_.dir.empty()) return;
  if (step == window_.first && !session_->running) {
    const ProfilerConfig config = profiler_config();
    kineto::prepareProfiler(config, session_->activities);
    kineto::enableProfiler(config, session_->activities);
    session_->running = true;
  }
  if (!session_->running) return;
  session_->step_span = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (session_->step_span->isActive()) session_->step_span->before("ProfilerStep#" + std::to_string(step));
}

std::string StepProfiler::after_step(int64_t step) {
  session_->step_span.reset();  // ends the step's span
  if (!session_->running || step != window_.last) return "";
  // The step's kernels are queued, not finished: wait for them so that the trace holds them all.
  if (cuda_device_ >= 0) at::detail::getCUDAHooks().deviceSynchronize(c10::DeviceIndex(cuda_device_));
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  session_->running = false;
  std::error_code ec;
  std::filesystem::create_directories(window_.dir, ec);
  if (ec) throw RunError("--profile: cannot create " + window_.dir + ": " + ec.message());
  const std::string path = window_.dir + "/rank" + std::to_string(rank_) + ".pt.trace.json";
  // torch writes the trace itself, following links: it writes into a directory of this process's
  // own (mkdtemp, mode 0700, where no one else can plant one), renamed to its name after, which
  // never follows a link there; a link at the name is refused (runtime/common/safe_file.hpp).
  files::refuse_link(path);
  std::string staging = window_.dir + "/.rank" + std::to_string(rank_) + ".XXXXXX";
  if (!::mkdtemp(staging.data()))
    throw RunError("--profile: cannot create a directory in " + window_.dir + ": " + std::strerror(errno));
  const std::string staged = staging + "/trace.json";
  try {
    result->save(staged);
  } catch (...) {
    std::filesystem::remove_all(staging, ec);
    throw;
  }
  std::filesystem::rename(staged, path, ec);
  std::error_code ignored;
  std::filesystem::remove_all(staging, ignored);
  if (ec) throw RunError("--profile: cannot write " + path + ": " + ec.message());
  return path;
}

}  // namespace accel::train
