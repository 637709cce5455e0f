// `accel config convert JOB --to fsdp|deepspeed`: a job switched to the other backend, written as a
// native job file. It holds the keys the job set, the target block with the translated values (each
// commented with the key it came from), no source block, and a comment header listing every
// translation and every option with no equivalent (so nothing is dropped silently).
// Invariant: the text loads back to the same effective job, with nothing left to translate.
#pragma once

#include <string>

#include "runtime/config/job_loader.hpp"

namespace accel::config {

// `loaded` must have been loaded with backend set to the target (convert adds --set backend=TARGET).
std::string converted_job_text(const LoadedJob& loaded, const std::string& original_file);

}  // namespace accel::config
