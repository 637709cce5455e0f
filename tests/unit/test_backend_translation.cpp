// The one-key backend switch (runtime/config/backend_translation.hpp, docs/design/0005): when
// translation applies, every mapping row in both directions, explicit target keys winning, options
// with no equivalent listed, sources naming the translated key, and the printed lines pinned.
#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/config/dump.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/config/schema.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::config;
using accel::test::TempDir;

namespace {

LoadedJob load_text(const TempDir& dir, const std::string& text, std::vector<std::string> sets = {}) {
  LoadOptions o;
  o.file = dir.write("job.yaml", text);
  o.set_overrides = std::move(sets);
  o.check_paths = false;
  return load_job(o);
}

const TranslationRecord* record(const LoadedJob& j, const std::string& source, const std::string& target) {
  for (const auto& r : j.translation.records)
    if (r.source_key == source && r.target_key == target) return &r;
  return nullptr;
}

const UntranslatedOption* untranslated(const LoadedJob& j, const std::string& key) {
  for (const auto& o : j.translation.untranslated)
    if (o.key == key) return &o;
  return nullptr;
}

std::string ds_job(const std::string& block, const std::string& top = "num_processes: 4\n") {
  return "backend: fsdp\n" + top + "deepspeed:\n" + block;
}

std::string fsdp_job(const std::string& block, const std::string& top = "num_processes: 4\n") {
  return "backend: deepspeed\n" + top + "fsdp:\n" + block;
}

}  // namespace

TEST_CASE("translation applies only when the other backend's block holds an explicitly set key") {
  TempDir dir;
  // A job written for its own backend: nothing to translate.
  auto own = load_text(dir, "backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n");
  CHECK_FALSE(own.translation.active);
  CHECK(own.job.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);
  CHECK(describe_translation(own.translation).empty());
  // Defaults of the other block do not count: a bare backend switch leaves the target at its defaults.
  auto bare = load_text(dir, "backend: deepspeed\n");
  CHECK_FALSE(bare.translation.active);
  CHECK(bare.job.deepspeed.zero_stage == 2);
  // ddp is never translated, whatever the blocks hold.
  auto ddp = load_text(dir, "backend: ddp\ndeepspeed:\n  zero_stage: 3\nfsdp:\n  offload_params: true\n");
  CHECK_FALSE(ddp.translation.active);
  // A deepspeed block under backend fsdp is translated; the block itself is left as written.
  auto switched = load_text(dir, ds_job("  zero_stage: 3\n"));
  CHECK(switched.translation.active);
  CHECK(switched.translation.from == Backend::deepspeed);
  CHECK(switched.translation.to == Backend::fsdp);
  CHECK(switched.job.deepspeed.zero_stage == 3);
  // A job whose own block is written in full (a dump, the launcher's job.resolved.yaml) is already
  // resolved: workers read back exactly what the launcher resolved, with nothing left to translate.
  auto resolved_text = dump_job(switched.job, switched.sources, DumpStyle::Full);
  auto resolved = load_text(dir, resolved_text);
  CHECK_FALSE(resolved.translation.active);
  CHECK(dump_job(resolved.job, resolved.sources, DumpStyle::Full) == resolved_text);
  // The switch can come from the command line or the environment, like any key.
  auto by_set = load_text(dir, "backend: deepspeed\ndeepspeed:\n  zero_stage: 0\n", {"backend=fsdp"});
  CHECK(by_set.job.fsdp.sharding_strategy == ShardingStrategy::NO_SHARD);
  auto by_set_key = load_text(dir, "backend: fsdp\n", {"deepspeed.zero_stage=2"});
  CHECK(by_set_key.job.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);
}

TEST_CASE("deepspeed -> fsdp: zero_stage and ZeRO++ hpZ map to sharding_strategy") {
  TempDir dir;
  struct Row {
    int stage;
    ShardingStrategy expected;
    bool exact;
  };
  for (auto row : {Row{0, ShardingStrategy::NO_SHARD, true}, Row{1, ShardingStrategy::SHARD_GRAD_OP, false},
                   Row{2, ShardingStrategy::SHARD_GRAD_OP, true}, Row{3, ShardingStrategy::FULL_SHARD, true}}) {
    INFO("zero_stage " << row.stage);
    auto j = load_text(dir, ds_job("  zero_stage: " + std::to_string(row.stage) + "\n"));
    CHECK(j.job.fsdp.sharding_strategy == row.expected);
    auto r = record(j, "deepspeed.zero_stage", "fsdp.sharding_strategy");
    REQUIRE(r);
    CHECK(r->exact == row.exact);
    CHECK(r->target_value == to_string(row.expected));
    CHECK(j.sources.at("fsdp.sharding_strategy").origin == Location::Origin::Derived);
    CHECK_THAT(j.sources.at("fsdp.sharding_strategy").str(),
               Catch::Contains("translated from deepspeed.zero_stage = " + std::to_string(row.stage) + ", set at "));
  }
  // ZeRO-1 has no FSDP equivalent: the nearest is said so.
  auto zero1 = load_text(dir, ds_job("  zero_stage: 1\n"));
  CHECK_THAT(describe_record(*record(zero1, "deepspeed.zero_stage", "fsdp.sharding_strategy")),
             Catch::Contains("no exact equivalent, nearest: ZeRO-1 shards only optimizer states"));

  // hpZ across machines is HYBRID_SHARD; exact when its partition is a whole machine.
  auto hpz = load_text(dir, ds_job("  zero_stage: 3\n  zero_hpz_partition_size: 2\n",
                                   "num_processes: 4\nnum_machines: 2\n"));
  CHECK(hpz.job.fsdp.sharding_strategy == ShardingStrategy::HYBRID_SHARD);
  REQUIRE(record(hpz, "deepspeed.zero_hpz_partition_size", "fsdp.sharding_strategy"));
  CHECK(record(hpz, "deepspeed.zero_hpz_partition_size", "fsdp.sharding_strategy")->exact);
  auto partial = load_text(dir, ds_job("  zero_stage: 3\n  zero_hpz_partition_size: 2\n",
                                       "num_processes: 8\nnum_machines: 2\n"));
  CHECK(partial.job.fsdp.sharding_strategy == ShardingStrategy::HYBRID_SHARD);
  CHECK_FALSE(record(partial, "deepspeed.zero_hpz_partition_size", "fsdp.sharding_strategy")->exact);
  // On one machine HYBRID_SHARD is FULL_SHARD, so a smaller hpZ partition has no equivalent.
  auto one_machine = load_text(dir, ds_job("  zero_stage: 3\n  zero_hpz_partition_size: 2\n"));
  CHECK(one_machine.job.fsdp.sharding_strategy == ShardingStrategy::FULL_SHARD);
  REQUIRE(untranslated(one_machine, "deepspeed.zero_hpz_partition_size"));
  CHECK_THAT(untranslated(one_machine, "deepspeed.zero_hpz_partition_size")->why, Catch::Contains("one machine"));
}

TEST_CASE("fsdp -> deepspeed: sharding_strategy maps to zero_stage, HYBRID_SHARD to ZeRO++ hpZ") {
  TempDir dir;
  struct Row {
    std::string strategy;
    int stage;
  };
  for (const auto& row : {Row{"FULL_SHARD", 3}, Row{"SHARD_GRAD_OP", 2}, Row{"NO_SHARD", 0}}) {
    INFO(row.strategy);
    auto j = load_text(dir, fsdp_job("  sharding_strategy: " + row.strategy + "\n"));
    CHECK(j.job.deepspeed.zero_stage == row.stage);
    CHECK(j.job.deepspeed.zero_hpz_partition_size == 1);
    auto r = record(j, "fsdp.sharding_strategy", "deepspeed.zero_stage");
    REQUIRE(r);
    CHECK(r->exact);
    CHECK_THAT(j.sources.at("deepspeed.zero_stage").str(), Catch::Contains("translated from fsdp.sharding_strategy"));
  }
  auto hybrid = load_text(dir, fsdp_job("  sharding_strategy: HYBRID_SHARD\n", "num_processes: 4\nnum_machines: 2\n"));
  CHECK(hybrid.job.deepspeed.zero_stage == 3);
  CHECK(hybrid.job.deepspeed.zero_hpz_partition_size == 2);
  REQUIRE(record(hybrid, "fsdp.sharding_strategy", "deepspeed.zero_hpz_partition_size"));
  auto hybrid_one = load_text(dir, fsdp_job("  sharding_strategy: HYBRID_SHARD\n"));
  CHECK(hybrid_one.job.deepspeed.zero_stage == 3);
  CHECK(hybrid_one.job.deepspeed.zero_hpz_partition_size == 1);
  CHECK_THAT(record(hybrid_one, "fsdp.sharding_strategy", "deepspeed.zero_stage")->note,
             Catch::Contains("on one machine HYBRID_SHARD shards like FULL_SHARD"));
  // An fsdp job's own default strategy (FULL_SHARD) is what it was written for: stage 3, said so.
  auto defaults = load_text(dir, fsdp_job("  offload_params: false\n"));
  CHECK(defaults.job.deepspeed.zero_stage == 3);
  CHECK(record(defaults, "fsdp.sharding_strategy", "deepspeed.zero_stage")->source_is_default);
}

TEST_CASE("offload: DeepSpeed's devices <-> fsdp.offload_params, nvme to the nearest") {
  TempDir dir;
  auto both = load_text(dir, ds_job("  zero_stage: 3\n  offload_optimizer_device: cpu\n  offload_param_device: cpu\n"));
  CHECK(both.job.fsdp.offload_params);
  CHECK(record(both, "deepspeed.offload_param_device", "fsdp.offload_params")->exact);
  CHECK(record(both, "deepspeed.offload_optimizer_device", "fsdp.offload_params")->exact);
  CHECK_THAT(both.sources.at("fsdp.offload_params").str(),
             Catch::Contains("deepspeed.offload_optimizer_device = cpu") && Catch::Contains("deepspeed.offload_param_device = cpu"));

  auto optimizer_only = load_text(dir, ds_job("  zero_stage: 2\n  offload_optimizer_device: cpu\n"));
  CHECK(optimizer_only.job.fsdp.offload_params);
  CHECK(optimizer_only.job.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);
  auto r = record(optimizer_only, "deepspeed.offload_optimizer_device", "fsdp.offload_params");
  REQUIRE(r);
  CHECK_FALSE(r->exact);
  CHECK_THAT(r->note, Catch::Contains("no optimizer-only offload"));

  auto nvme = load_text(dir, ds_job("  zero_stage: 3\n  offload_optimizer_device: nvme\n  offload_optimizer_nvme_path: "
                                    "/tmp/x\n  offload_param_device: nvme\n  offload_param_nvme_path: /tmp/y\n"
                                    "  buffer_count: 4\n"));
  CHECK(nvme.job.fsdp.offload_params);
  CHECK_FALSE(record(nvme, "deepspeed.offload_param_device", "fsdp.offload_params")->exact);
  CHECK_THAT(record(nvme, "deepspeed.offload_param_device", "fsdp.offload_params")->note, Catch::Contains("no NVMe"));
  for (const char* key : {"deepspeed.offload_optimizer_nvme_path", "deepspeed.offload_param_nvme_path",
                          "deepspeed.buffer_count"})
    CHECK(untranslated(nvme, key));

  auto off = load_text(dir, ds_job("  zero_stage: 3\n  offload_param_device: none\n"));
  CHECK_FALSE(off.job.fsdp.offload_params);
  CHECK(record(off, "deepspeed.offload_param_device", "fsdp.offload_params"));  // written, so listed

  // fsdp -> deepspeed follows the resulting stage: parameters offload under stage 3 only.
  auto full = load_text(dir, fsdp_job("  sharding_strategy: FULL_SHARD\n  offload_params: true\n"));
  CHECK(full.job.deepspeed.offload_optimizer_device == OffloadDevice::cpu);
  CHECK(full.job.deepspeed.offload_param_device == OffloadDevice::cpu);
  auto grad_op = load_text(dir, fsdp_job("  sharding_strategy: SHARD_GRAD_OP\n  offload_params: true\n"));
  CHECK(grad_op.job.deepspeed.offload_optimizer_device == OffloadDevice::cpu);
  CHECK(grad_op.job.deepspeed.offload_param_device == OffloadDevice::none);
  CHECK_FALSE(record(grad_op, "fsdp.offload_params", "deepspeed.offload_param_device")->exact);
  auto no_shard = load_text(dir, fsdp_job("  sharding_strategy: NO_SHARD\n  offload_params: true\n"));
  CHECK(no_shard.job.deepspeed.offload_optimizer_device == OffloadDevice::none);
  CHECK_THAT(untranslated(no_shard, "fsdp.offload_params")->why, Catch::Contains("stage 0 cannot offload"));
}

TEST_CASE("loading and saving: zero3_init_flag <-> cpu_ram_efficient_loading, zero3_save_16bit_model <-> "
          "state_dict_type") {
  TempDir dir;
  auto ds = load_text(dir, ds_job("  zero_stage: 3\n  zero3_init_flag: true\n  zero3_save_16bit_model: true\n"));
  CHECK(ds.job.fsdp.cpu_ram_efficient_loading);
  CHECK(ds.job.fsdp.state_dict_type == StateDictType::FULL_STATE_DICT);
  CHECK(record(ds, "deepspeed.zero3_init_flag", "fsdp.cpu_ram_efficient_loading"));
  CHECK(record(ds, "deepspeed.zero3_save_16bit_model", "fsdp.state_dict_type"));
  // DeepSpeed's default (no 16-bit model) means per-rank shards.
  auto sharded = load_text(dir, ds_job("  zero_stage: 3\n"));
  CHECK(sharded.job.fsdp.state_dict_type == StateDictType::SHARDED_STATE_DICT);
  CHECK(record(sharded, "deepspeed.zero3_save_16bit_model", "fsdp.state_dict_type")->source_is_default);
  // Below stage 3 DeepSpeed ignores both keys: listed, fsdp keeps its defaults.
  auto stage2 = load_text(dir, ds_job("  zero_stage: 2\n  zero3_init_flag: true\n  zero3_save_16bit_model: true\n"));
  CHECK_FALSE(stage2.job.fsdp.cpu_ram_efficient_loading);
  CHECK(stage2.job.fsdp.state_dict_type == StateDictType::FULL_STATE_DICT);
  CHECK(untranslated(stage2, "deepspeed.zero3_init_flag"));
  CHECK(untranslated(stage2, "deepspeed.zero3_save_16bit_model"));

  auto fsdp = load_text(dir, fsdp_job("  cpu_ram_efficient_loading: true\n  state_dict_type: FULL_STATE_DICT\n"));
  CHECK(fsdp.job.deepspeed.zero3_init_flag);
  CHECK(fsdp.job.deepspeed.zero3_save_16bit_model);
  auto fsdp_sharded = load_text(dir, fsdp_job("  state_dict_type: SHARDED_STATE_DICT\n"));
  CHECK_FALSE(fsdp_sharded.job.deepspeed.zero3_save_16bit_model);
  CHECK(record(fsdp_sharded, "fsdp.state_dict_type", "deepspeed.zero3_save_16bit_model"));
  auto fsdp_stage2 = load_text(dir, fsdp_job("  sharding_strategy: SHARD_GRAD_OP\n  state_dict_type: FULL_STATE_DICT\n"));
  CHECK_FALSE(fsdp_stage2.job.deepspeed.zero3_save_16bit_model);
  CHECK(untranslated(fsdp_stage2, "fsdp.state_dict_type"));
}

TEST_CASE("prefetch and the live-parameter bound") {
  TempDir dir;
  auto on = load_text(dir, ds_job("  zero_stage: 3\n  stage3_prefetch_bucket_size: 2e7\n  stage3_max_live_parameters: 3e8\n"));
  CHECK(on.job.fsdp.backward_prefetch == BackwardPrefetch::BACKWARD_PRE);
  CHECK(on.job.fsdp.forward_prefetch);
  CHECK(on.job.fsdp.limit_all_gathers);
  CHECK(record(on, "deepspeed.stage3_prefetch_bucket_size", "fsdp.backward_prefetch"));
  CHECK(record(on, "deepspeed.stage3_prefetch_bucket_size", "fsdp.forward_prefetch"));
  CHECK_THAT(record(on, "deepspeed.stage3_max_live_parameters", "fsdp.limit_all_gathers")->note,
             Catch::Contains("the element count has no equivalent"));
  auto off = load_text(dir, ds_job("  zero_stage: 3\n  stage3_prefetch_bucket_size: 0\n"));
  CHECK(off.job.fsdp.backward_prefetch == BackwardPrefetch::NO_PREFETCH);
  CHECK_FALSE(off.job.fsdp.forward_prefetch);
  auto stage2 = load_text(dir, ds_job("  zero_stage: 2\n  stage3_prefetch_bucket_size: 0\n"));
  CHECK(stage2.job.fsdp.backward_prefetch == BackwardPrefetch::BACKWARD_PRE);
  CHECK_THAT(untranslated(stage2, "deepspeed.stage3_prefetch_bucket_size")->why, Catch::Contains("zero_stage 3 only"));

  auto f_on = load_text(dir, fsdp_job("  backward_prefetch: BACKWARD_PRE\n  forward_prefetch: true\n"
                                      "  limit_all_gathers: true\n"));
  CHECK(f_on.job.deepspeed.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(record(f_on, "fsdp.backward_prefetch", "deepspeed.stage3_prefetch_bucket_size")->exact);
  CHECK(record(f_on, "fsdp.forward_prefetch", "deepspeed.stage3_prefetch_bucket_size")->exact);
  CHECK(record(f_on, "fsdp.limit_all_gathers", "deepspeed.stage3_max_live_parameters"));
  auto f_off = load_text(dir, fsdp_job("  backward_prefetch: NO_PREFETCH\n  forward_prefetch: false\n"
                                       "  limit_all_gathers: false\n"));
  CHECK(f_off.job.deepspeed.stage3_prefetch_bucket_size == 0);
  CHECK_FALSE(record(f_off, "fsdp.limit_all_gathers", "deepspeed.stage3_max_live_parameters")->exact);
  auto post = load_text(dir, fsdp_job("  backward_prefetch: BACKWARD_POST\n"));
  CHECK(post.job.deepspeed.stage3_prefetch_bucket_size == 50'000'000);
  CHECK_FALSE(record(post, "fsdp.backward_prefetch", "deepspeed.stage3_prefetch_bucket_size")->exact);
}

TEST_CASE("precision: DeepSpeed's fp32 master weights are FSDP's mixed mode; low has no DeepSpeed equivalent") {
  TempDir dir;
  auto ds = load_text(dir, ds_job("  zero_stage: 3\n"));
  CHECK(ds.job.fsdp.precision_mode == PrecisionMode::mixed);
  auto r = record(ds, "deepspeed", "fsdp.precision_mode");
  REQUIRE(r);
  CHECK(r->source_value == "fp32 master weights, always");
  auto mixed = load_text(dir, fsdp_job("  precision_mode: mixed\n"));
  REQUIRE(record(mixed, "fsdp.precision_mode", "deepspeed"));
  auto low = load_text(dir, fsdp_job("  precision_mode: low\n"));
  CHECK_THAT(untranslated(low, "fsdp.precision_mode")->why, Catch::Contains("always keeps fp32 master weights"));
  // An explicit low in the fsdp block wins over DeepSpeed's fp32 masters.
  auto kept = load_text(dir, "backend: fsdp\ndeepspeed:\n  zero_stage: 3\nfsdp:\n  precision_mode: low\n");
  CHECK(kept.job.fsdp.precision_mode == PrecisionMode::low);
  CHECK_FALSE(record(kept, "deepspeed", "fsdp.precision_mode")->applied);
}

TEST_CASE("options set explicitly in the target block win over translated values") {
  TempDir dir;
  auto j = load_text(dir, "backend: fsdp\nnum_processes: 4\ndeepspeed:\n  zero_stage: 3\n  offload_param_device: cpu\n"
                          "fsdp:\n  sharding_strategy: SHARD_GRAD_OP\n");
  CHECK(j.job.fsdp.sharding_strategy == ShardingStrategy::SHARD_GRAD_OP);  // kept
  CHECK(j.job.fsdp.offload_params);                                         // translated
  CHECK(j.sources.at("fsdp.sharding_strategy").origin == Location::Origin::File);
  auto r = record(j, "deepspeed.zero_stage", "fsdp.sharding_strategy");
  REQUIRE(r);
  CHECK_FALSE(r->applied);
  CHECK(r->kept_value == "SHARD_GRAD_OP");
  CHECK_THAT(describe_translation(j.translation)[0], Catch::EndsWith("from the deepspeed block, 1 of them overridden by "
                                                                     "explicit fsdp keys:"));
  CHECK_THAT(describe_record(*r), Catch::Contains("NOT APPLIED: fsdp.sharding_strategy is set explicitly to "
                                                  "SHARD_GRAD_OP at " + dir.path().string() + "/job.yaml:7:22"));
  // Explicit by --set as well; the target's explicit stage also governs the stage-dependent rows.
  auto k = load_text(dir, fsdp_job("  sharding_strategy: FULL_SHARD\n  offload_params: true\n"),
                     {"deepspeed.zero_stage=2"});
  CHECK(k.job.deepspeed.zero_stage == 2);
  CHECK(k.job.deepspeed.offload_optimizer_device == OffloadDevice::cpu);
  CHECK(k.job.deepspeed.offload_param_device == OffloadDevice::none);
  // The hpZ partition cannot follow an explicit stage 2: said, not silently dropped.
  auto h = load_text(dir, fsdp_job("  sharding_strategy: HYBRID_SHARD\n", "num_processes: 4\nnum_machines: 2\n"),
                     {"deepspeed.zero_stage=2"});
  CHECK(h.job.deepspeed.zero_hpz_partition_size == 1);
  CHECK_THAT(untranslated(h, "fsdp.sharding_strategy")->why, Catch::Contains("needs zero_stage 3"));
}

TEST_CASE("options with no equivalent are listed with their value and why") {
  TempDir dir;
  auto ds = load_text(dir, ds_job("  zero_stage: 3\n  overlap_comm: false\n  reduce_bucket_size: 1e8\n"
                                  "  allgather_bucket_size: 1e8\n  stage3_param_persistence_threshold: 0\n"
                                  "  pin_memory: false\n  hysteresis: 3\n"));
  for (const char* key : {"deepspeed.overlap_comm", "deepspeed.reduce_bucket_size", "deepspeed.allgather_bucket_size",
                          "deepspeed.stage3_param_persistence_threshold", "deepspeed.pin_memory",
                          "deepspeed.hysteresis"}) {
    INFO(key);
    auto o = untranslated(ds, key);
    REQUIRE(o);
    CHECK_FALSE(o->why.empty());
  }
  CHECK(untranslated(ds, "deepspeed.overlap_comm")->value == "false");
  auto fsdp = load_text(dir, fsdp_job("  auto_wrap_policy: SIZE_BASED_WRAP\n  min_num_params: 1000\n"
                                      "  transformer_layer_cls_to_wrap: Block\n  activation_checkpointing: true\n"
                                      "  sync_module_states: false\n"));
  for (const char* key : {"fsdp.auto_wrap_policy", "fsdp.min_num_params", "fsdp.transformer_layer_cls_to_wrap",
                          "fsdp.activation_checkpointing", "fsdp.sync_module_states"}) {
    INFO(key);
    REQUIRE(untranslated(fsdp, key));
  }
  CHECK_THAT(untranslated(fsdp, "fsdp.auto_wrap_policy")->why, Catch::Contains("the model's own units"));
  // Options at their defaults that the job did not write are not listed.
  CHECK_FALSE(untranslated(ds, "deepspeed.buffer_count"));
}

TEST_CASE("every explicitly set key of the other block is translated or listed, by a mapping row") {
  // Jobs that write every key of the source block (as a full dump does), at several stages.
  struct Variant {
    int zero_stage, hpz;
    ShardingStrategy strategy;
    bool offload;
  };
  for (auto backend : {Backend::deepspeed, Backend::fsdp}) {
    for (auto v : {Variant{3, 2, ShardingStrategy::HYBRID_SHARD, false}, Variant{1, 1, ShardingStrategy::NO_SHARD, true},
                   Variant{2, 1, ShardingStrategy::SHARD_GRAD_OP, true}, Variant{0, 1, ShardingStrategy::FULL_SHARD, false}}) {
      TempDir dir;
      JobConfig job;
      job.deepspeed.zero_stage = v.zero_stage;
      job.deepspeed.zero_hpz_partition_size = v.hpz;
      job.fsdp.sharding_strategy = v.strategy;
      job.fsdp.offload_params = v.offload;
      const std::string source = backend == Backend::fsdp ? "deepspeed" : "fsdp";
      std::string text = "backend: " + to_string(backend) + "\nnum_processes: 4\nnum_machines: 2\n" + source + ":\n";
      for (const auto& f : schema())
        if (f.section() == source && f.alias_of.empty()) text += "  " + f.leaf() + ": " + value_to_yaml(f.get(job)) + "\n";
      auto j = load_text(dir, text);
      REQUIRE(j.translation.active);
      for (const auto& f : schema()) {
        if (f.section() != source || !f.alias_of.empty()) continue;
        INFO(to_string(backend) << " from stage " << v.zero_stage << " / " << to_string(v.strategy) << ": " << f.path);
        bool listed = untranslated(j, f.path) != nullptr;
        for (const auto& r : j.translation.records) listed = listed || r.source_key == f.path;
        CHECK(listed);
        // The safety net (for a key no row knows) must not be what lists it.
        if (auto o = untranslated(j, f.path)) CHECK_THAT(o->why, !Catch::Contains("no counterpart"));
      }
    }
  }
}

TEST_CASE("the printed translation of the two showcase templates is pinned") {
  const std::string root = ACCEL_SOURCE_DIR;
  auto load_template = [&](const std::string& name, const std::string& backend) {
    LoadOptions o;
    o.file = root + "/config_templates/" + name;
    o.set_overrides = {"backend=" + backend};
    o.check_paths = false;
    return load_job(o);
  };
  auto cpu = load_template("deepspeed_zero3_offload_cpu.yaml", "fsdp");
  std::vector<std::string> expected_cpu = {
      "accel launch: backend fsdp: 6 options translated from the deepspeed block:",
      "  deepspeed.zero_stage: 3 -> fsdp.sharding_strategy: FULL_SHARD",
      "  deepspeed.offload_optimizer_device: cpu -> fsdp.offload_params: true",
      "  deepspeed.offload_param_device: cpu -> fsdp.offload_params: true",
      "  deepspeed.zero3_save_16bit_model: false (default) -> fsdp.state_dict_type: SHARDED_STATE_DICT  (DeepSpeed "
      "ZeRO-3 checkpoints are per-rank shards unless zero3_save_16bit_model gathers the full model)",
      "  deepspeed.stage3_prefetch_bucket_size: 50000000 (default) -> fsdp.forward_prefetch: true  (DeepSpeed ZeRO-3 "
      "prefetches in forward as well as in backward)",
      "  deepspeed: fp32 master weights, always -> fsdp.precision_mode: mixed  (FSDP's mixed mode keeps fp32 copies of "
      "the sharded parameters for the optimizer; low has no DeepSpeed equivalent)",
      "accel launch: backend fsdp: 1 deepspeed option has no fsdp equivalent and is not used:",
      "  deepspeed.pin_memory: true  (FSDP's CPU offload has no pinned-memory switch)",
  };
  CHECK(describe_translation(cpu.translation, "accel launch: ") == expected_cpu);

  auto hybrid = load_template("fsdp_hybrid_shard.yaml", "deepspeed");
  std::vector<std::string> expected_hybrid = {
      "accel launch: backend deepspeed: 10 options translated from the fsdp block:",
      "  fsdp.sharding_strategy: HYBRID_SHARD -> deepspeed.zero_stage: 3  (with ZeRO++ hpZ, zero_hpz_partition_size 2)",
      "  fsdp.sharding_strategy: HYBRID_SHARD -> deepspeed.zero_hpz_partition_size: 2  (ZeRO++ hpZ partitions "
      "parameters within each machine (2 ranks), as HYBRID_SHARD does; it keeps optimizer states sharded over all "
      "ranks, where HYBRID_SHARD keeps them per machine)",
      "  fsdp.offload_params: false -> deepspeed.offload_optimizer_device: none",
      "  fsdp.offload_params: false -> deepspeed.offload_param_device: none",
      "  fsdp.state_dict_type: SHARDED_STATE_DICT -> deepspeed.zero3_save_16bit_model: false  (DeepSpeed ZeRO-3 "
      "checkpoints are per-rank shards)",
      "  fsdp.backward_prefetch: BACKWARD_PRE -> deepspeed.stage3_prefetch_bucket_size: 50000000  (DeepSpeed prefetches "
      "up to stage3_prefetch_bucket_size elements ahead of use (its default))",
      "  fsdp.forward_prefetch: false -> deepspeed.stage3_prefetch_bucket_size: 50000000  (no exact equivalent, nearest: "
      "DeepSpeed has no backward-only prefetch: it prefetches in forward too)",
      "  fsdp.limit_all_gathers: true -> deepspeed.stage3_max_live_parameters: 1000000000  (both bound the gathered "
      "parameters alive at once: DeepSpeed by elements (its default bound), FSDP by units)",
      "  fsdp.precision_mode: mixed -> deepspeed: fp32 master weights, always  (DeepSpeed always keeps fp32 master "
      "weights, as FSDP's mixed mode does)",
      "  fsdp.sync_module_states: true -> deepspeed: rank 0's initial parameters broadcast, always",
      "accel launch: backend deepspeed: 3 fsdp options have no deepspeed equivalent and are not used:",
      "  fsdp.auto_wrap_policy: TRANSFORMER_BASED_WRAP  (DeepSpeed has no wrapping policy: accel's deepspeed backend "
      "always shards by the model's own units (embedding, each transformer block, final))",
      "  fsdp.transformer_layer_cls_to_wrap: Block  (DeepSpeed has no wrapping policy: accel's deepspeed backend always "
      "shards by the model's own units (embedding, each transformer block, final))",
      "  fsdp.activation_checkpointing: false  (accel's deepspeed block has no activation checkpointing key (DeepSpeed "
      "configures it outside ZeRO): the deepspeed backend stores every unit's activations)",
  };
  CHECK(describe_translation(hybrid.translation, "accel launch: ") == expected_hybrid);
}
