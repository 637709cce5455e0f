// Elastic jobs (docs/design/0027): the machine counts a job may run at, and the batch rule that
// says what its workers' gradient accumulation becomes at each. Pure functions of the job.
// Invariant: a job that passes check_elastic() has a whole accumulation_at() for every machine
// count from fewest_machines() to num_machines, so a restart at a smaller world never has to refuse.
#pragma once

#include <optional>

#include "runtime/config/job.hpp"
#include "runtime/config/job_checker.hpp"

namespace accel::config {

// 1 <= min_machines < num_machines: the world may shrink (and grow back) between restarts.
bool is_elastic(const JobConfig& job);

// The fewest machines the job runs on: min_machines when elastic, else num_machines.
int fewest_machines(const JobConfig& job);

// gradient_accumulation_steps at `machines` of `num_machines` machines: unchanged under keep_micro;
// under keep_global accumulation x num_machines / machines, so that world x micro batch x
// accumulation stays the same, or nullopt when that is not a whole number (or not an int).
std::optional<int> accumulation_at(int accumulation, int num_machines, int machines, ElasticBatch rule);

// The smallest accumulation that keep_global can keep at every count from min to max machines.
long long smallest_elastic_accumulation(int min_machines, int max_machines);

// The elastic keys against each other and against the rest of the job (validate.cpp calls it).
void check_elastic(const JobConfig& job, JobChecker& c);

}  // namespace accel::config
