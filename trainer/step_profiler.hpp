// `accel launch --profile DIR`: torch's profiler (Kineto) around a window of the trainer's steps,
// one Chrome trace per rank, DIR/rank<r>.pt.trace.json (TensorBoard's profiler plugin and
// chrome://tracing / Perfetto read it; scripts/profile_gpu_step.py --trace sums it by kernel kind).
// It records the operators every thread of the rank runs and, on a GPU, the CUDA kernels and
// memory copies (CUPTI), as torch.profiler does for a Python loop.
// The window skips the first steps of the run by default: the first step allocates the engine's
// buffers and, on a GPU, selects kernels, so it is not the step a run repeats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace accel::train {

struct ProfileWindow {
  std::string dir;      // where the traces go (absolute); empty: no profiling
  int64_t first = 0;    // 1-based step numbers, inclusive; 0: the default window
  int64_t last = 0;
};

// The window of a run from step `start` (steps done) to `max_steps`: the requested one, or else 3
// steps after 2 of warm-up, clamped to the steps the run has; from step start + 1 on when it
// resumed inside the window, and none (an empty dir) when the window was done before the resume.
ProfileWindow resolve_profile_window(ProfileWindow requested, int64_t start, int64_t max_steps);

class StepProfiler {
 public:
  // `cuda_device`: the GPU the rank computes on (its kernels are recorded too); -1 on a CPU.
  StepProfiler(ProfileWindow window, int rank, int cuda_device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around step `step` (1-based): starts the profiler before the window's first step and writes
  // the trace after its last. after_step returns the trace's path once written, else "".
  void before_step(int64_t step);
  std::string after_step(int64_t step);

 private:
  struct Session;
  ProfileWindow window_;
  int rank_;
  int cuda_device_;
  std::unique_ptr<Session> session_;
};

}  // namespace accel::train
