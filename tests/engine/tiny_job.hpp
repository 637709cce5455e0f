// The small GPT the backend tests train in process: 2 layers of width 16 with 2 heads, 32 token
// ids, 8 positions (a few thousand parameters: units are small, steps fast, and shards uneven).
#pragma once

#include "runtime/config/job.hpp"

namespace accel::test {

inline config::JobConfig tiny_job(config::Backend backend = config::Backend::ddp) {
  config::JobConfig job;
  job.backend = backend;
  job.model.n_layer = 2;
  job.model.n_head = 2;
  job.model.n_embd = 16;
  job.model.vocab_size = 32;
  job.model.block_size = 8;
  return job;
}

}  // namespace accel::test
