// model.from_pretrained: a Hugging Face folder's config.json read at job load (no torch). The
// folder's shapes become the model section: each shape key the job leaves unset is filled from
// config.json; one the job sets to another value is an error naming both (docs/huggingface.md).
// An architecture accel does not build, or a config.json value that changes the math accel's
// model does not do (an activation, an epsilon, untied heads...), is an error naming the key.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/job_builder.hpp"

namespace accel::hf {

// Applies DIR/config.json (DIR = the job's model.from_pretrained, non-empty) to `builder`'s
// model section; appends every problem to `errors` under model.from_pretrained. When
// `check_weights` is true, also lists the folder's safetensors files and checks every tensor
// against the family's table (hf_folder.hpp).
void apply_from_pretrained(config::JobBuilder& builder, bool check_weights, std::vector<Diagnostic>& errors);

}  // namespace accel::hf
