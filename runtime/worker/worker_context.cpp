#include "runtime/worker/worker_context.hpp"

#include <unistd.h>

#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>

#include "runtime/comm/bind_address.hpp"
#include "runtime/comm/gloo_communicator.hpp"
#include "runtime/comm/host_staged_communicator.hpp"
#include "runtime/comm/cuda_plugin.hpp"
#include "runtime/comm/nccl_communicator.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/config/default_keys.hpp"

namespace accel::worker {
namespace {

// The GPU this worker binds, made the process's current CUDA device: cuda:LOCAL_RANK (placement
// gave every local rank its own), or round-robin over the GPUs when host-staged collectives let
// ranks share them. Through c10's device-guard registry, so this file needs no CUDA headers; the
// registry has CUDA once accel's CUDA plugin (and with it libtorch_cuda) is loaded.
int bind_gpu(const comm::WorldInfo& world, config::CudaCollectives collectives) {
  std::string why;
  if (comm::load_cuda_plugin(&why) == nullptr) throw RunError("device: cuda, but " + why);
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    throw RunError("device: cuda, but this accel's libtorch has no CUDA; build against the CUDA torch wheel "
                   "(scripts/setup.sh) or use device: cpu");
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const int gpus = static_cast<int>(cuda->deviceCount());
  if (gpus <= 0) throw RunError("device: cuda, but this worker sees no CUDA GPU (check CUDA_VISIBLE_DEVICES)");
  if (world.local_rank >= gpus && collectives == config::CudaCollectives::nccl)
    throw RunError("local rank " + std::to_string(world.local_rank) + " has no GPU of its own (this machine has " +
                   std::to_string(gpus) + "); NCCL needs one GPU per rank");
  const int index = world.local_rank % gpus;
  cuda->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
  return index;
}

}  // namespace

config::LoadedJob load_launched_job() {
  const char* job_file = std::getenv("ACCEL_JOB");
  if (!job_file || !*job_file)
    throw RunError("accel-worker: ACCEL_JOB is not set; workers are started by `accel launch`, not by hand");
  config::LoadOptions options;
  options.file = job_file;
  options.environment = config::accel_environment();
  options.check_paths = false;  // the launcher checked them before spawning
  config::LoadedJob job = config::load_job(options);
  config::restore_default_origins(job);  // the resolved job lists every key; which were the user's
  return job;
}

WorkerContext start_worker() {
  WorkerContext ctx;
  ctx.job = load_launched_job();
  ctx.world = comm::world_info_from_env(comm::process_environment());

  const auto& job = ctx.job.job;
  const bool cuda = job.device == config::Device::cuda;
  const int gpu = cuda ? bind_gpu(ctx.world, job.cuda_collectives) : -1;
  auto timeout = std::chrono::milliseconds(int64_t(job.rendezvous_timeout_s) * 1000);
  ctx.rendezvous = std::make_unique<comm::Rendezvous>(ctx.world, timeout);
  // Gloo advertises the address it binds, so it must be one peers can reach (bind_address.hpp).
  const std::string bind = comm::gloo_bind_address(job.main_process_ip);
  const std::chrono::milliseconds collective_timeout(int64_t(job.collective_timeout_s) * 1000);
  if (cuda && job.cuda_collectives == config::CudaCollectives::nccl) {
    ctx.communicator = comm::make_nccl_communicator(ctx.rendezvous->store(), ctx.world.rank, ctx.world.world_size,
                                                    collective_timeout, gpu, ctx.rendezvous->prefix() + "nccl");
    if (ctx.world.world_size == 1 && comm::nccl_issues_at_world_one()) {
      logging::info("accel: a world of one issues every collective through NCCL, padded "
                    "(ACCEL_NCCL_ISSUE_AT_WORLD_ONE=1, a test switch)");
    }
    return ctx;
  }
  ctx.communicator = comm::make_gloo_communicator(ctx.rendezvous->store(), ctx.world.rank, ctx.world.world_size,
                                                  collective_timeout, bind, ctx.rendezvous->prefix() + "gloo");
  if (ctx.world.rank == 0 && ctx.world.world_size > 1) {
    logging::info("accel: collectives over " + comm::transport_of(*ctx.communicator));
  }
  if (cuda) {
    ctx.communicator = comm::make_host_staged_communicator(
        std::move(ctx.communicator), c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(gpu)));
  }
  return ctx;
}

void apply_thread_count() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp && std::atoi(omp) > 0) at::set_num_threads(std::atoi(omp));
}

}  // namespace accel::worker
