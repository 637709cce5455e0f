// backend: fsdp as a policy over the sharding engine (engine/fsdp, docs/design/0007): the fsdp
// block's mapping onto the engine (plan_fsdp, pure), and the engine it builds on in-process worlds,
// including precision_mode low (bf16 masters). Agreement with the unsharded reference and the
// prefetch schedules are tested end to end (tests/numerics: FsdpStrategiesAgreement, FsdpSchedule).
#include "tests/support/catch_with_torch.hpp"

#include "engine/fsdp/fsdp_policy.hpp"
#include "tests/engine/tiny_job.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/prepared_builtin.hpp"

using accel::engine::FsdpPlan;
using accel::engine::plan_fsdp;
using accel::engine::PrefetchPolicy;
using accel::config::AutoWrapPolicy;
using accel::config::BackwardPrefetch;
using accel::config::JobConfig;
using accel::config::ModelName;
using accel::config::ParamDtype;
using accel::config::PrecisionMode;
using accel::config::ShardingStrategy;
using accel::config::StateDictType;

namespace {

JobConfig fsdp_job() { return accel::test::tiny_job(accel::config::Backend::fsdp); }

bool has_note(const FsdpPlan& plan, const std::string& text) {
  for (const auto& n : plan.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

const accel::engine::FsdpIssue* issue(const std::vector<accel::engine::FsdpIssue>& issues, const std::string& key) {
  for (const auto& i : issues)
    if (i.key == key) return &i;
  return nullptr;
}

}  // namespace

TEST_CASE("fsdp plan: sharding strategies map onto the engine's partitioning", "[fsdp]") {
  auto job = fsdp_job();
  auto full = plan_fsdp(job);
  CHECK(full.label == "fsdp FULL_SHARD");
  CHECK(full.refusals.empty());
  CHECK((full.shard_params && full.shard_grads && !full.replicated));

  job.fsdp.sharding_strategy = ShardingStrategy::SHARD_GRAD_OP;
  auto grad_op = plan_fsdp(job);
  CHECK(grad_op.label == "fsdp SHARD_GRAD_OP");
  CHECK((grad_op.shard_grads && !grad_op.shard_params && !grad_op.replicated));

  job.fsdp.sharding_strategy = ShardingStrategy::NO_SHARD;
  auto none = plan_fsdp(job);
  CHECK(none.label == "fsdp NO_SHARD");
  CHECK((none.replicated && !none.shard_grads && !none.shard_params));
}

TEST_CASE("fsdp plan: HYBRID_SHARD is FULL_SHARD on one machine, per-machine shard groups across machines", "[fsdp]") {
  auto job = fsdp_job();
  job.fsdp.sharding_strategy = ShardingStrategy::HYBRID_SHARD;
  job.num_processes = 4;
  auto one = plan_fsdp(job);
  CHECK(one.refusals.empty());
  CHECK(one.label == "fsdp HYBRID_SHARD");
  CHECK(one.shard_params);
  CHECK(one.shard_group_size == 0);  // every rank shards
  CHECK(has_note(one, "HYBRID_SHARD on one machine is FULL_SHARD"));

  job.num_machines = 2;
  auto two = plan_fsdp(job);
  CHECK(two.refusals.empty());
  CHECK(two.label == "fsdp HYBRID_SHARD");
  CHECK((two.shard_params && two.shard_grads && !two.replicated));
  CHECK(two.shard_group_size == 2);
  CHECK(has_note(two, "FULL_SHARD within each machine (2 ranks), replicated across 2 machines"));
}

TEST_CASE("fsdp plan: prefetch enums, one unit ahead, limit_all_gathers is two live units", "[fsdp]") {
  auto job = fsdp_job();
  auto p = plan_fsdp(job).prefetch;
  CHECK(p.backward == PrefetchPolicy::Backward::pre);
  CHECK_FALSE(p.forward);
  CHECK(p.max_prefetch_units == 1);
  CHECK(p.max_prefetch_numel == 0);
  CHECK(p.max_live_units == 2);
  CHECK(p.max_live_numel == 0);

  job.fsdp.backward_prefetch = BackwardPrefetch::BACKWARD_POST;
  job.fsdp.forward_prefetch = true;
  job.fsdp.limit_all_gathers = false;
  p = plan_fsdp(job).prefetch;
  CHECK(p.backward == PrefetchPolicy::Backward::post);
  CHECK(p.forward);
  CHECK(p.max_live_units == 0);

  job.fsdp.backward_prefetch = BackwardPrefetch::NO_PREFETCH;
  CHECK(plan_fsdp(job).prefetch.backward == PrefetchPolicy::Backward::none);

  // Below FULL_SHARD the parameters stay gathered: a prefetch setting asks for nothing, and says so.
  job.fsdp.sharding_strategy = ShardingStrategy::SHARD_GRAD_OP;
  auto grad_op = plan_fsdp(job);
  CHECK(issue(grad_op.warnings, "fsdp.backward_prefetch"));
  CHECK(issue(grad_op.warnings, "fsdp.forward_prefetch"));
  CHECK(issue(grad_op.warnings, "fsdp.limit_all_gathers"));
}

TEST_CASE("fsdp plan: NO_WRAP and SIZE_BASED_WRAP group the model's units, other layer classes are refused", "[fsdp]") {
  auto job = fsdp_job();
  job.fsdp.auto_wrap_policy = AutoWrapPolicy::NO_WRAP;
  auto whole = plan_fsdp(job);
  CHECK(whole.refusals.empty());
  CHECK(whole.wrap == AutoWrapPolicy::NO_WRAP);
  CHECK(has_note(whole, "NO_WRAP: the whole model is one unit"));
  job.fsdp.min_num_params = 5000;
  CHECK(issue(plan_fsdp(job).warnings, "fsdp.min_num_params"));

  job.fsdp.auto_wrap_policy = AutoWrapPolicy::SIZE_BASED_WRAP;
  auto sized = plan_fsdp(job);
  CHECK(sized.refusals.empty());
  CHECK(sized.wrap == AutoWrapPolicy::SIZE_BASED_WRAP);
  CHECK(sized.min_num_params == 5000);
  CHECK(has_note(sized, "at least 5000 parameters"));
  job.fsdp.min_num_params = 0;  // the schema refuses it first; the plan is the safety net
  auto unbounded = plan_fsdp(job);
  const auto* zero = issue(unbounded.refusals, "fsdp.min_num_params");
  REQUIRE(zero);
  CHECK_THAT(zero->message, Catch::Contains("must be at least 1"));

  job.fsdp.auto_wrap_policy = AutoWrapPolicy::TRANSFORMER_BASED_WRAP;
  job.fsdp.transformer_layer_cls_to_wrap = "GPT2Block";
  auto bad = plan_fsdp(job);
  const auto* r = issue(bad.refusals, "fsdp.transformer_layer_cls_to_wrap");
  REQUIRE(r);
  CHECK_THAT(r->message, Catch::Contains("'GPT2Block' is not a layer class of the gpt model"));
  CHECK(r->allowed == "Block");
  job.fsdp.transformer_layer_cls_to_wrap = " Block ";
  CHECK(plan_fsdp(job).refusals.empty());
  job.fsdp.min_num_params = 1000;
  CHECK(issue(plan_fsdp(job).warnings, "fsdp.min_num_params"));
}

TEST_CASE("fsdp plan: keys with no effect here are warnings, full state dicts a note", "[fsdp]") {
  auto job = fsdp_job();
  auto quiet = plan_fsdp(job);
  CHECK(quiet.warnings.empty());
  CHECK(has_note(quiet, "FULL_STATE_DICT: checkpoints hold per-rank shards"));  // the key's default
  job.fsdp.state_dict_type = StateDictType::SHARDED_STATE_DICT;
  job.fsdp.offload_params = true;
  job.fsdp.sync_module_states = false;
  job.fsdp.cpu_ram_efficient_loading = true;
  auto plan = plan_fsdp(job);
  CHECK(plan.refusals.empty());
  CHECK_FALSE(has_note(plan, "FULL_STATE_DICT"));
  // offload_params is the engine's (it says what moves on its device: ShardedEngine::describe).
  CHECK_FALSE(has_note(plan, "offload_params"));
  CHECK_THAT(issue(plan.warnings, "fsdp.sync_module_states")->message, Catch::Contains("always broadcasts"));
  CHECK(issue(plan.warnings, "fsdp.cpu_ram_efficient_loading"));
}

TEST_CASE("fsdp plan: activation_checkpointing recomputes the layer units, stated in a note", "[fsdp]") {
  auto job = fsdp_job();
  auto off = plan_fsdp(job);
  CHECK_FALSE(off.activation_checkpointing);
  CHECK_FALSE(has_note(off, "activation_checkpointing"));
  job.fsdp.activation_checkpointing = true;
  auto gpt = plan_fsdp(job);
  CHECK(gpt.activation_checkpointing);
  CHECK(gpt.warnings.empty());  // it has an effect now: no "no effect" warning
  CHECK(has_note(gpt, "activation_checkpointing: each Block (h.0 .. h.1) keeps only its input and recomputes its "
                      "forward in backward"));
  CHECK(has_note(gpt, "the embedding and the final norm store their activations"));
  job.model.name = ModelName::mlp;
  job.model.n_layer = 1;
  auto mlp = plan_fsdp(job);
  CHECK(has_note(mlp, "activation_checkpointing: each layer (layer.0) keeps only its input"));
  CHECK(has_note(mlp, "the embedding stores its activations"));
}

TEST_CASE("fsdp plan: precision_mode low keeps bf16 masters for a bf16 model, and warns for an fp32 one", "[fsdp]") {
  auto job = fsdp_job();
  job.fsdp.precision_mode = PrecisionMode::low;
  auto fp32 = plan_fsdp(job);
  CHECK_FALSE(fp32.low_precision_masters);
  CHECK(issue(fp32.warnings, "fsdp.precision_mode"));
  job.model.dtype = ParamDtype::bf16;
  auto bf16 = plan_fsdp(job);
  CHECK(bf16.low_precision_masters);
  CHECK(bf16.warnings.empty());
  job.fsdp.precision_mode = PrecisionMode::mixed;
  CHECK_FALSE(plan_fsdp(job).low_precision_masters);
}

TEST_CASE("fsdp engine: the label, bf16 masters under precision_mode low, refusals as run errors", "[fsdp]") {
  auto job = fsdp_job();
  job.model.dtype = ParamDtype::bf16;
  job.fsdp.precision_mode = PrecisionMode::low;
  accel::comm::FakeWorld world(2);
  std::string described[2];
  nlohmann::json memory[2];
  bool bf16_after_step[2] = {false, false};
  auto errors = accel::test::run_ranks(
      2, [&](int r) { return world.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        // Rank bodies record what they see; Catch's assertions are checked on the main thread.
        int r = comm.rank();
        accel::test::PreparedBuiltin model(job, comm, accel::test::builtin_module(job.model, 9));
        auto* backend = &model.engine();
        described[r] = backend->describe();
        memory[r] = backend->memory_report();
        at::Tensor idx = (at::arange(16, at::TensorOptions(at::kLong)) * 3 + r).remainder(32).view({2, 8});
        auto* hooks = backend->begin_micro_step(0, true);
        model.loss(model.forward(idx, hooks), idx).backward();
        backend->end_micro_step(true);
        backend->clip_grad_norm(1.0);
        backend->optimizer_step(1e-2);
        bool bf16 = true;
        for (const auto& [name, p] : model.parameters()) bf16 = bf16 && p.scalar_type() == at::kBFloat16;
        for (const auto& [name, p] : backend->full_parameters()) bf16 = bf16 && p.scalar_type() == at::kBFloat16;
        bf16_after_step[r] = bf16;
      });
  REQUIRE(errors == std::vector<std::string>{"", ""});
  CHECK((bf16_after_step[0] && bf16_after_step[1]));  // parameters and the masters they come from
  CHECK_THAT(described[0], Catch::Contains("fsdp FULL_SHARD:") && Catch::Contains("bf16 master") &&
                               Catch::Contains("precision_mode low"));
  // bf16 masters are the shards gathers read: no separate compute-dtype copy.
  CHECK(memory[0]["param_shards"].get<int64_t>() == 0);

  job.fsdp.transformer_layer_cls_to_wrap = "GPT2Block";
  accel::comm::FakeWorld one(1);
  auto refused = accel::test::run_ranks(
      1, [&](int r) { return one.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        accel::test::PreparedBuiltin model(job, comm, accel::train::make_builtin_module(job.model));
      });
  REQUIRE(refused.size() == 1);
  CHECK_THAT(refused[0], Catch::Contains("backend fsdp: fsdp.transformer_layer_cls_to_wrap: 'GPT2Block' is not a layer class"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
