// The keys DeepSpeed 0.19 accepts in the config sections whose pydantic models forbid any other
// (DeepSpeedConfigModel, extra="forbid"): each field's name and its alias. DeepSpeed refuses a file
// with another key there, so the importer refuses it too (tests/unit/test_deepspeed_strictness.cpp
// runs DeepSpeed's own parser over the same files). Elsewhere (the top level, optimizer, scheduler,
// activation_checkpointing, ...) DeepSpeed reads the keys it knows and ignores the rest.
#pragma once

#include <string>
#include <vector>

namespace accel::config {

// The keys DeepSpeed accepts in `section` ("zero_optimization.offload_param", "bf16", ...; bfloat16
// is bf16), or nullptr when DeepSpeed does not close that section.
const std::vector<std::string>* deepspeed_section_keys(const std::string& section);

}  // namespace accel::config
