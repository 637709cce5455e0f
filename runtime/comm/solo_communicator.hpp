// The communicator of a world of one rank: a program run on its own, without `accel launch`
// (Accelerator(job_file) with num_processes 1). Every collective is complete when it returns; its
// result is what a world of one gives (the reduction over one rank is that rank's values; a shard
// is the whole buffer). It checks the arguments and counts traffic as the other communicators do,
// so a program behaves the same, with the same errors and report, when it is later launched.
#pragma once

#include <chrono>
#include <memory>

#include "runtime/comm/communicator.hpp"

namespace accel::comm {

std::unique_ptr<Communicator> make_solo_communicator(std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace accel::comm
