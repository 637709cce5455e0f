// accel_model_forward: one forward of a built-in model (make_builtin_module, the trainer's own
// modules) on given tokens, for tests that compare accel's numbers with another implementation's
// (tests/numerics/test_llama.py against transformers).
//
//   accel_model_forward JOB WEIGHTS INPUT OUTPUT [KEY=VALUE ...]
//
// JOB: a job file (its model section, with --set style overrides after OUTPUT); WEIGHTS: a
// safetensors file under the model's parameter names (training.init_from's format), or "spec" for
// the spec initialization from training.seed; INPUT: safetensors with "idx" and "targets", [B, T]
// int64; OUTPUT: safetensors with "logits" [B, T, V] (float32, converted from the model's dtype)
// and "loss" (the token cross-entropy, float32, the trainer's loss). Exit 2 for a bad job or file.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <torch/csrc/autograd/grad_mode.h>

#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/config/job_loader.hpp"
#include "trainer/models/builtin_module.hpp"
#include "trainer/models/builtin_ops.hpp"
#include "trainer/models/model_weights.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s JOB WEIGHTS|spec INPUT OUTPUT [KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  try {
    accel::config::LoadOptions options;
    options.file = argv[1];
    options.check_paths = false;
    for (int i = 5; i < argc; ++i) options.set_overrides.emplace_back(argv[i]);
    const accel::config::JobConfig job = accel::config::load_job(options).job;
    auto model = accel::train::make_builtin_module(job.model);
    const std::string weights = argv[2];
    if (weights == "spec") model->initialize(uint64_t(job.training.seed));
    else accel::train::load_weights_into(model->spec_parameters(), weights);
    accel::engine::SafetensorsReader input(argv[3]);
    torch::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(input.read("idx"));
    const at::Tensor loss = accel::train::token_cross_entropy(logits, input.read("targets"));
    accel::engine::save_safetensors(argv[4], {{"logits", logits.to(at::kFloat).contiguous()}, {"loss", loss}});
    return 0;
  } catch (const accel::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel_model_forward: %s\n", e.what());
    return 2;
  }
}
