// One question of `accel config` (questionnaire.cpp): the schema key it sets, its prompt, and when
// it is asked (given the answers so far).
#pragma once

#include <functional>
#include <string>

#include "runtime/config/job.hpp"

namespace accel::config {

struct Question {
  std::string path;
  std::string prompt;
  std::function<bool(const JobConfig&)> when = [](const JobConfig&) { return true; };
  bool optional = false;  // an empty answer leaves the key unset (shown as [none])
};

}  // namespace accel::config
