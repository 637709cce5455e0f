// A job's memory estimate (runtime/estimate): unit sizes from model dimensions, the mapping of job
// keys (world, precision, optimizer, offload, backend) onto strategy rows, the option errors, and
// the table and JSON renderings.
#include <algorithm>
#include <catch2/catch.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/human_bytes.hpp"
#include "runtime/estimate/job_estimate.hpp"
#include "runtime/estimate/memory_report.hpp"
#include "runtime/estimate/model_shape.hpp"

using namespace accel;
using namespace accel::estimate;
using config::JobConfig;

namespace {

const MemoryEstimate& row(const JobEstimate& e, const std::string& name) {
  for (const auto& m : e.strategies)
    if (m.plan.name == name) return m;
  FAIL("no row " << name);
  throw std::logic_error("unreachable");
}

std::vector<std::string> row_names(const JobEstimate& e) {
  std::vector<std::string> out;
  for (const auto& m : e.strategies) out.push_back(m.plan.name);
  return out;
}

}  // namespace

TEST_CASE("gpt and mlp unit sizes follow the spec's parameter list", "[estimate][model]") {
  config::ModelSection gpt2;  // GPT-2 small: 124,439,808 parameters (wte tied)
  gpt2.n_layer = 12;
  gpt2.n_head = 12;
  gpt2.n_embd = 768;
  gpt2.vocab_size = 50257;
  gpt2.block_size = 1024;
  auto shape = model_shape(gpt2);
  CHECK(shape.num_parameters() == 124'439'808);
  REQUIRE(shape.units.size() == 13);
  CHECK(shape.units.front().name == "root");
  CHECK(shape.units.front().numel == (50257 + 1024 + 2) * 768);  // wte, wpe, ln_f
  CHECK(shape.units[1].name == "h.0");
  CHECK(shape.units[1].numel == 12 * 768 * 768 + 13 * 768);
  CHECK(shape.units.back().name == "h.11");
  CHECK(shape.units.back().numel == 12 * 768 * 768 + 13 * 768);
  CHECK(shape.tied_unit == 0);

  config::ModelSection mlp;
  mlp.name = config::ModelName::mlp;
  mlp.n_layer = 3;
  mlp.n_embd = 16;
  mlp.vocab_size = 32;
  auto m = model_shape(mlp);
  CHECK(m.unit_numels() == std::vector<int64_t>{32 * 16, 16 * 16 + 16, 16 * 16 + 16, 16 * 16 + 16});
  CHECK(m.units[3].name == "layer.2");

  gpt2.n_head = 5;
  CHECK_THROWS_WITH(model_shape(gpt2), Catch::Contains("model.n_embd"));
  gpt2.n_head = 12;
  gpt2.n_layer = 0;
  CHECK_THROWS_AS(model_shape(gpt2), ConfigError);
}

TEST_CASE("every strategy side by side, the job's own marked", "[estimate]") {
  JobConfig job;  // ddp, 1 process, gpt 4 x 128
  auto e = estimate_job(job);
  CHECK(row_names(e) == std::vector<std::string>{"ddp / zero-0", "zero-1", "zero-2", "zero-3", "NO_SHARD",
                                                 "SHARD_GRAD_OP", "FULL_SHARD"});
  CHECK(e.strategies[size_t(e.configured)].plan.name == "ddp / zero-0");
  CHECK(e.configured_label == "ddp");
  CHECK(e.input.num_parameters() == 256 * 128 + 128 * 128 + 4 * (12 * 128 * 128 + 13 * 128) + 2 * 128);
  CHECK(row(e, "ddp / zero-0").device == 16 * e.input.num_parameters());

  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 3;
  job.num_processes = 4;
  e = estimate_job(job);
  CHECK(e.strategies[size_t(e.configured)].plan.name == "zero-3");
  CHECK(row(e, "zero-3").plan.shards == 4);
  CHECK(row(e, "ddp / zero-0").plan.shards == 1);
  int marked = 0;
  for (const auto& m : e.strategies) marked += m.plan.configured;
  CHECK(marked == 1);
  job.deepspeed.zero_stage = 0;
  CHECK(estimate_job(job).strategies[0].plan.configured);

  job.backend = config::Backend::fsdp;
  job.fsdp.sharding_strategy = config::ShardingStrategy::HYBRID_SHARD;
  job.num_processes = 8;
  job.num_machines = 2;
  e = estimate_job(job);
  CHECK(e.strategies.back().plan.name == "HYBRID_SHARD");
  CHECK(e.strategies.back().plan.shards == 4);
  CHECK(e.strategies.back().plan.configured);
  CHECK(row(e, "FULL_SHARD").plan.shards == 8);
  CHECK(e.strategies.back().device > row(e, "FULL_SHARD").device);

  job.num_machines = 1;  // HYBRID_SHARD on one machine is FULL_SHARD
  e = estimate_job(job);
  CHECK(e.strategies.size() == 7);
  CHECK(row(e, "FULL_SHARD").plan.configured);
}

TEST_CASE("the FSDP rows count the engine units the wrap policy makes", "[estimate][wrap]") {
  JobConfig job;
  job.model.n_layer = 6;  // gpt 6 x 128: units root (wte, wpe, ln_f), h.0 .. h.5
  job.backend = config::Backend::fsdp;
  job.num_processes = 2;
  job.fsdp.sharding_strategy = config::ShardingStrategy::FULL_SHARD;
  const auto per_layer = estimate_job(job);
  const int64_t block = 12 * 128 * 128 + 13 * 128;
  const int64_t total = per_layer.input.num_parameters();

  job.fsdp.auto_wrap_policy = config::AutoWrapPolicy::NO_WRAP;
  const auto whole = estimate_job(job);
  // One engine unit: the whole model (padded to the 2 shards) is gathered through the step, in
  // fp32. It holds the token input, so the engine keeps it gathered: replicated parameters.
  CHECK(row(whole, "FULL_SHARD").params == 4 * (total + total % 2));
  CHECK(row(whole, "FULL_SHARD").live_params == 0);
  CHECK(row(whole, "FULL_SHARD").peak > row(per_layer, "FULL_SHARD").peak);
  // The zero rows keep the model's units: the wrap policy is an fsdp key.
  CHECK(row(whole, "zero-3").live_params == row(per_layer, "zero-3").live_params);

  job.fsdp.auto_wrap_policy = config::AutoWrapPolicy::SIZE_BASED_WRAP;
  job.fsdp.min_num_params = 2 * block;  // h.0+h.1, h.2+h.3, h.4+h.5; wte, wpe and ln_f stay in the root
  const auto pairs = estimate_job(job);
  // Gathered at once: the root (wte, wpe, ln_f: kept gathered) and two pairs (limit_all_gathers),
  // in fp32.
  const int64_t root = total - 6 * block;
  CHECK(row(pairs, "FULL_SHARD").params == 4 * (root + root % 2));
  CHECK(row(pairs, "FULL_SHARD").live_params == 4 * 4 * block);
  CHECK(row(pairs, "FULL_SHARD").live_params > row(per_layer, "FULL_SHARD").live_params);
  CHECK(row(pairs, "FULL_SHARD").peak < row(whole, "FULL_SHARD").peak);
  bool noted = false;
  for (const auto& n : pairs.notes) noted = noted || n.find("SIZE_BASED_WRAP makes 4 engine unit(s) of the model's 7") != std::string::npos;
  CHECK(noted);

  // A table at least min_num_params large is a unit of its own (wte: 256 x 128), as the size rule
  // makes it of the module; wpe (128 x 128) and ln_f stay in the root.
  job.fsdp.min_num_params = 256 * 128;
  const auto tables = estimate_job(job);
  noted = false;
  for (const auto& n : tables.notes) noted = noted || n.find("makes 8 engine unit(s) of the model's 8") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("precision, optimizer and offload keys reach the estimate", "[estimate]") {
  JobConfig job;
  job.num_processes = 4;
  auto fp32 = estimate_job(job);
  CHECK(fp32.input.param_bytes == 4);
  CHECK_FALSE(fp32.input.replicated_master);
  job.mixed_precision = config::MixedPrecision::bf16;
  auto bf16 = estimate_job(job);
  CHECK(bf16.input.param_bytes == 2);
  CHECK(bf16.input.replicated_master);
  // 2 + 2 + 4 (fp32 master) + 8 (moments) + 4 (the fp32 gradient the update reads) = 20 bytes, vs 16.
  CHECK(row(bf16, "ddp / zero-0").device == row(fp32, "ddp / zero-0").device + 4 * bf16.input.num_parameters());
  CHECK(row(bf16, "zero-3").device < row(fp32, "zero-3").device);
  job.mixed_precision = config::MixedPrecision::no;
  job.model.dtype = config::ParamDtype::bf16;  // low precision: 2-byte params, no replicated master
  auto low = estimate_job(job);
  CHECK(low.input.param_bytes == 2);
  CHECK_FALSE(low.input.replicated_master);

  job = JobConfig{};
  job.optimizer.name = config::OptimizerName::sgd;
  CHECK(estimate_job(job).input.state_bytes == 4);
  job.optimizer.momentum = 0;
  CHECK(estimate_job(job).input.state_bytes == 0);

  job = JobConfig{};
  job.num_processes = 4;
  job.backend = config::Backend::deepspeed;
  job.deepspeed.offload_optimizer_device = config::OffloadDevice::cpu;
  auto off = estimate_job(job);
  CHECK(row(off, "ddp / zero-0").plan.offload == Placement::device);  // stage 0 cannot offload
  for (const char* name : {"zero-1", "zero-2", "zero-3"}) {
    CHECK(row(off, name).plan.offload == Placement::cpu);
    CHECK(row(off, name).host > 0);
  }
  CHECK(row(off, "FULL_SHARD").plan.offload == Placement::device);
  job.deepspeed.offload_optimizer_device = config::OffloadDevice::none;
  job.deepspeed.zero_stage = 3;
  job.deepspeed.offload_param_device = config::OffloadDevice::nvme;
  job.deepspeed.buffer_count = 4;
  auto nvme = estimate_job(job);
  // Parameter files: the zero-3 row's parameter shards, not its masters (the optimizer is not offloaded).
  CHECK(row(nvme, "zero-3").plan.offload == Placement::device);
  CHECK(row(nvme, "zero-3").plan.param_offload == Placement::nvme);
  CHECK(row(nvme, "zero-3").nvme > 0);
  CHECK(row(nvme, "zero-2").plan.offload == Placement::device);
  CHECK(row(nvme, "zero-2").plan.param_offload == Placement::device);
  CHECK(row(nvme, "FULL_SHARD").plan.param_offload == Placement::device);
  CHECK(nvme.input.nvme_buffer_count == 4);
  job.deepspeed.offload_param_device = config::OffloadDevice::cpu;  // the states as optimizer offload, the shards pinned
  CHECK(row(estimate_job(job), "zero-3").plan.offload == Placement::cpu);
  CHECK(row(estimate_job(job), "zero-3").plan.param_offload == Placement::cpu);
  CHECK(row(estimate_job(job), "zero-2").plan.param_offload == Placement::device);
  job.deepspeed.offload_param_device = config::OffloadDevice::nvme;
  job.deepspeed.offload_optimizer_device = config::OffloadDevice::nvme;
  job.mixed_precision = config::MixedPrecision::bf16;
  auto both = estimate_job(job);
  CHECK(row(both, "zero-3").plan.offload == Placement::nvme);
  CHECK(row(both, "zero-3").plan.param_offload == Placement::nvme);
  CHECK(row(both, "zero-3").nvme == row(both, "zero-3").master + row(both, "zero-3").optimizer_states +
                                        row(both, "zero-3").grad_shard + row(both, "zero-3").param_shard);
  job = JobConfig{};
  job.fsdp.offload_params = true;
  CHECK(row(estimate_job(job), "SHARD_GRAD_OP").plan.offload == Placement::cpu);
  CHECK(row(estimate_job(job), "SHARD_GRAD_OP").plan.param_offload == Placement::device);  // nothing to gather
  CHECK(row(estimate_job(job), "FULL_SHARD").plan.param_offload == Placement::cpu);
}

TEST_CASE("parameter offload to cpu keeps the partitioned units' shards in host memory", "[estimate]") {
  JobConfig job;
  job.num_processes = 2;
  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 3;
  job.deepspeed.offload_param_device = config::OffloadDevice::cpu;
  job.mixed_precision = config::MixedPrecision::bf16;
  job.device = config::Device::cuda;
  const auto gpu = estimate_job(job);
  const MemoryEstimate& z3 = row(gpu, "zero-3");
  REQUIRE(z3.plan.step);
  // The token unit stays gathered (params, bf16) and gathers from its own slice: no shard of it
  // anywhere else. Every other unit's bf16 shard is pinned host memory beside the offloaded states.
  int64_t shard_values = 0;  // every unit's shard at world 2
  for (int64_t n : gpu.input.unit_numels) shard_values += padded_numel(n, 2) / 2;
  REQUIRE(z3.plan.step->kept_numel > 0);
  CHECK(z3.params == z3.plan.step->kept_numel * 2);
  CHECK(z3.param_shard == (shard_values - z3.plan.step->kept_numel / 2) * 2);
  CHECK(z3.host == z3.master + z3.optimizer_states + z3.grad_shard + z3.param_shard);
  CHECK(z3.device == z3.params + z3.live_params + z3.live_grads);
  CHECK(z3.peak - z3.transients == z3.params);
  // A CPU rank's host memory holds them all.
  job.device = config::Device::cpu;
  const MemoryEstimate& z3_cpu = row(estimate_job(job), "zero-3");
  CHECK(z3_cpu.peak - z3_cpu.transients == z3.params + z3.param_shard + z3.master + z3.optimizer_states + z3.grad_shard);
  // FSDP's offload_params does the same for FULL_SHARD.
  job.device = config::Device::cuda;
  job.backend = config::Backend::fsdp;
  job.deepspeed = {};
  job.fsdp.offload_params = true;
  const MemoryEstimate& full = row(estimate_job(job), "FULL_SHARD");
  CHECK(full.peak - full.transients == full.params);
}

TEST_CASE("options: --params, --unit-params, --world and their errors", "[estimate]") {
  JobConfig job;
  JobEstimateOptions o;
  o.params = 7'000'000'000;
  o.world = 8;
  auto e = estimate_job(job, o);
  CHECK(e.world == 8);
  CHECK_FALSE(e.input.units_known());
  CHECK(e.input.num_parameters() == 7'000'000'000);
  CHECK_FALSE(row(e, "zero-3").unit_buffers_estimated);
  CHECK(row(e, "zero-3").device == 16 * 7'000'000'000LL / 8);
  CHECK(row(e, "zero-3").zero_paper == 14'000'000'000);
  CHECK_FALSE(e.activations.available);
  o.unit_params = 200'000'000;
  CHECK(row(estimate_job(job, o), "zero-3").unit_buffers_estimated);

  auto bad = [&](JobEstimateOptions opts) { return estimate_job(job, opts); };
  JobEstimateOptions w;
  w.world = -1;
  CHECK_THROWS_AS(bad(w), UsageError);
  JobEstimateOptions p;
  p.params = -5;
  CHECK_THROWS_WITH(bad(p), Catch::Contains("--params"));
  JobEstimateOptions u;
  u.unit_params = 10;
  CHECK_THROWS_WITH(bad(u), Catch::Contains("--unit-params needs --params"));
  job.num_machines = 2;
  job.num_processes = 4;
  JobEstimateOptions odd;
  odd.world = 3;
  CHECK_THROWS_WITH(bad(odd), Catch::Contains("not a multiple of num_machines"));
}

TEST_CASE("the activation hint follows Korthikanti et al. for gpt", "[estimate]") {
  JobConfig job;
  job.model.n_embd = 768;
  job.model.n_head = 12;
  job.model.n_layer = 12;
  job.training.seq_len = 1024;
  job.training.micro_batch_size = 1;
  auto a = activation_hint(job);
  REQUIRE(a.available);
  CHECK(a.per_layer_bytes == 1024LL * 768 * (34 + 80));
  CHECK(a.total_bytes == 12 * a.per_layer_bytes);
  CHECK_FALSE(a.recomputed);
  // Full recomputation (fsdp.activation_checkpointing): 2sbh per layer plus one layer during its recompute.
  job.fsdp.activation_checkpointing = true;
  CHECK_FALSE(activation_hint(job).recomputed);  // the fsdp key acts under backend fsdp only
  job.backend = config::Backend::fsdp;
  auto r = activation_hint(job);
  REQUIRE(r.recomputed);
  CHECK(r.recomputed_total_bytes == 12 * 2LL * 1024 * 768 + r.per_layer_bytes);
  CHECK(r.total_bytes == a.total_bytes);
  job.model.name = config::ModelName::mlp;
  CHECK_FALSE(activation_hint(job).available);
}

TEST_CASE("the chunked loss's head holds one chunk's logits and the gradients it forms, not [tokens, V] thrice",
          "[estimate]") {
  JobConfig job;
  job.model.n_embd = 64;
  job.model.n_head = 4;
  job.model.n_layer = 2;
  job.model.vocab_size = 50304;
  job.model.block_size = 256;
  job.training.seq_len = 256;
  job.training.micro_batch_size = 4;
  const int64_t tokens = 4 * 256, V = 50304, C = 64;
  const JobEstimate plain = estimate_job(job);
  CHECK(plain.head_activation_bytes == 3 * tokens * V * 4);
  job.training.loss_chunk_tokens = 128;  // fp32: 8 bytes per logit of one chunk, the two gradients in fp32
  const JobEstimate chunked = estimate_job(job);
  CHECK(chunked.head_activation_bytes == 128 * V * 8 + (tokens + V) * C * 4);
  CHECK(std::any_of(chunked.notes.begin(), chunked.notes.end(),
                    [](const std::string& n) { return n.find("loss_chunk_tokens 128") != std::string::npos; }));
  // The replay carries the head's bytes to the peak: the smaller head lowers every row's device peak.
  CHECK(row(chunked, "zero-3").peak < row(plain, "zero-3").peak);
  job.training.loss_chunk_tokens = 1 << 20;  // a chunk over the micro-batch's tokens is all of them
  CHECK(estimate_job(job).head_activation_bytes == tokens * V * 8 + (tokens + V) * C * 4);
  job.training.loss_chunk_tokens = 128;
  job.mixed_precision = config::MixedPrecision::bf16;  // the gradients in the compute dtype
  CHECK(estimate_job(job).head_activation_bytes == 128 * V * 8 + (tokens + V) * C * 2);
}

TEST_CASE("on a GPU the activations and the peak follow the fused attention and the device's memory", "[estimate]") {
  JobConfig job;
  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 3;
  job.deepspeed.offload_optimizer_device = config::OffloadDevice::cpu;
  job.model.n_embd = 768;
  job.model.n_head = 12;
  job.model.n_layer = 12;
  job.training.seq_len = 1024;
  job.training.micro_batch_size = 1;
  job.device = config::Device::cuda;
  // torch's fused attention keeps no 12 x 1024 x 1024 scores, only its fp32 log-sum-exp per row.
  const auto a = activation_hint(job);
  CHECK(a.fused_attention);
  CHECK(a.per_layer_bytes == 1024LL * 768 * 34 + 4LL * 12 * 1024);
  const auto gpu = estimate_job(job);
  CHECK_THAT(render_memory_table(gpu), Catch::Contains("fused attention keeps no s x s scores"));
  // The GPU's peak counts the device's states: the offloaded master and optimizer states (host
  // memory) are not in it, and the activations are counted while they live.
  const MemoryEstimate& z3 = row(gpu, "zero-3");
  CHECK(z3.peak - z3.transients == z3.params + z3.param_shard + z3.grads);
  job.device = config::Device::cpu;
  const auto cpu = estimate_job(job);
  const MemoryEstimate& z3_cpu = row(cpu, "zero-3");
  CHECK(z3_cpu.peak - z3_cpu.transients == z3.params + z3.param_shard + z3.grads + z3.master + z3.optimizer_states +
                                               z3.grad_shard);
  CHECK(z3.peak_phase == "backward: the head's backward");
  CHECK(z3_cpu.peak_phase == "backward: the embedding's backward");
  job.device = config::Device::auto_;
  CHECK_FALSE(activation_hint(job).fused_attention);
  CHECK_THAT(render_memory_table(estimate_job(job)), Catch::Contains("--set device=cuda gives a GPU's"));
}

TEST_CASE("the table and the JSON carry the same figures", "[estimate]") {
  JobConfig job;
  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 2;
  job.num_processes = 2;
  auto e = estimate_job(job);
  std::string text = render_memory_table(e);
  CHECK_THAT(text, Catch::Contains("* zero-2") && Catch::Contains("this job: deepspeed zero_stage 2"));
  CHECK_THAT(text, Catch::Contains("ZeRO paper") && Catch::Contains("Korthikanti") && Catch::Contains("same RAM"));
  CHECK_THAT(text, Catch::Contains(human_bytes(row(e, "zero-2").device)));
  auto j = memory_estimate_json(e);
  CHECK(j["configured"]["strategy"] == "zero-2");
  CHECK(j["strategies"].size() == e.strategies.size());
  CHECK(j["strategies"][2]["bytes"]["device"].get<int64_t>() == row(e, "zero-2").device);
  CHECK(j["model"]["units"][0]["name"] == "root");
  CHECK(j["model"]["parameters"].get<int64_t>() == e.input.num_parameters());
  CHECK(group_digits(124439808) == "124,439,808");
  CHECK(group_digits(12) == "12");
  CHECK(human_bytes(int64_t(512)) == "512 B");
  CHECK(human_bytes(1.5 * 1024 * 1024) == "1.50 MiB");
  CHECK(human_bytes(int64_t(112) << 30) == "112 GiB");
}

TEST_CASE("the note on live gradients names the bound the job sets", "[estimate]") {
  JobConfig job;
  job.backend = config::Backend::deepspeed;
  job.deepspeed.zero_stage = 3;
  job.num_processes = 2;
  job.deepspeed.reduce_bucket_size = 123456;
  const auto e = estimate_job(job);
  const auto note = std::find_if(e.notes.begin(), e.notes.end(),
                                 [](const std::string& n) { return n.rfind("live gradients", 0) == 0; });
  REQUIRE(note != e.notes.end());
  CHECK(note->find("reduce_bucket_size = 123456 values") != std::string::npos);
}
