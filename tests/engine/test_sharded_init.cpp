// Sharded initialization (docs/design/0023): a built-in model of placeholders, filled by the
// engine unit by unit from the spec initializer or from a weights file's slices, equals the
// whole-model init (or load) bit for bit after preparing and after two training steps, at worlds
// 1-4, under every strategy that partitions parameters; the model never holds real values before
// the engine gives them, and each rank reads only its slices of the file.
#include "tests/support/catch_with_torch.hpp"

#include "engine/backend.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/engine/tiny_job.hpp"
#include "tests/support/prepared_builtin.hpp"
#include "engine/format/safetensors.hpp"
#include "tests/support/temp_dir.hpp"
#include "trainer/models/builtin_optimizer.hpp"
#include "trainer/models/model_weights.hpp"
#include "trainer/models/placeholder.hpp"
#include "trainer/models/spec_init_source.hpp"

using namespace accel;
using accel::test::PreparedBuiltin;

namespace {

at::Tensor init_tokens(int rows, int offset, int vocab, int seq) {
  return (at::arange(int64_t(rows) * seq, at::kLong).view({rows, seq}) * 7 + offset) % vocab;
}

// Rank 0's full parameters after preparing and after two steps, for the model built whole and
// initialized (`sharded` false) or built of placeholders and filled from the spec source; with a
// `weights` file, loaded from it (whole, or as the engine's source). `bytes_read`: each rank's
// data bytes read from the file by the source.
std::vector<engine::NamedTensors> run_init(const config::JobConfig& job, int world, bool sharded, const std::string& weights = "",
                                     std::vector<uint64_t>* bytes_read = nullptr) {
  comm::FakeWorld fake(world);
  std::vector<engine::NamedTensors> seen;
  if (bytes_read) bytes_read->assign(size_t(world), 0);
  auto errors = test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](comm::Communicator& comm) {
        std::shared_ptr<train::BuiltinModule> module;
        std::shared_ptr<engine::UnitSource> source;
        std::shared_ptr<train::WeightsFileSource> file_source;
        if (sharded) {
          train::PlaceholderScope scope(at::kCPU);
          module = train::make_builtin_module(job.model);
          for (const auto& [name, p] : module->spec_parameters())
            if (!train::is_placeholder(p)) throw std::runtime_error(name + " was built with values");
          if (weights.empty()) {
            source = train::make_spec_init_source(*module, job.model.n_layer, 77);
          } else {
            file_source = std::make_shared<train::WeightsFileSource>(module->spec_parameters(), weights);
            source = file_source;
          }
        } else {
          module = test::builtin_module(job.model, 77);
          if (!weights.empty()) train::load_weights_into(module->spec_parameters(), weights);
        }
        const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::builtin());
        PreparedBuiltin model(job, module, [&](std::vector<engine::UnitSpec> specs) {
          return engine::make_backend(resolved, comm, std::move(specs), engine::builtin_optimizer_setup(job.optimizer),
                                        source);
        });
        auto& engine = model.engine();
        std::vector<engine::NamedTensors> mine{engine.full_parameters()};
        for (int step = 0; step < 2; ++step) {
          auto* hooks = engine.begin_micro_step(0, true);
          const int r = comm.rank();
          model.loss(model.forward(init_tokens(2, r + step, job.model.vocab_size, 8), hooks),
                     init_tokens(2, r + step + 1, job.model.vocab_size, 8))
              .backward();
          engine.end_micro_step(true);
          engine.clip_grad_norm(1.0);
          engine.optimizer_step(1e-2);
        }
        mine.push_back(engine.full_parameters());
        if (bytes_read && file_source) (*bytes_read)[size_t(comm.rank())] = file_source->data_bytes_read();
        if (comm.rank() == 0) seen = std::move(mine);
      });
  REQUIRE(errors == test::no_errors(world));
  return seen;
}

void check_equal(const std::vector<engine::NamedTensors>& a, const std::vector<engine::NamedTensors>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k) {
      INFO((i == 0 ? "after prepare: " : "after two steps: ") << a[i][k].first);
      CHECK(a[i][k].first == b[i][k].first);
      CHECK(at::equal(a[i][k].second, b[i][k].second));
    }
  }
}

}  // namespace

TEST_CASE("sharded init: placeholders filled from the spec source equal the whole-model init, bit for bit",
          "[sharded_init]") {
  struct Case {
    const char* name;
    std::function<void(config::JobConfig&)> edit;
  };
  const std::vector<Case> cases = {
      {"zero 3", [](config::JobConfig& j) { j.backend = config::Backend::deepspeed; j.deepspeed.zero_stage = 3; }},
      {"zero 3, persistent small units", [](config::JobConfig& j) {
         j.backend = config::Backend::deepspeed;
         j.deepspeed.zero_stage = 3;
         j.deepspeed.stage3_param_persistence_threshold = 5000;
       }},
      {"FULL_SHARD", [](config::JobConfig& j) { j.backend = config::Backend::fsdp; }},
      {"FULL_SHARD bf16", [](config::JobConfig& j) {
         j.backend = config::Backend::fsdp;
         j.mixed_precision = config::MixedPrecision::bf16;
       }},
      {"FULL_SHARD mlp", [](config::JobConfig& j) {
         j.backend = config::Backend::fsdp;
         j.model.name = config::ModelName::mlp;
         j.fsdp.transformer_layer_cls_to_wrap = "MlpLayer";
       }},
      {"zero 3 llama (untied, biases)", [](config::JobConfig& j) {
         j.backend = config::Backend::deepspeed;
         j.deepspeed.zero_stage = 3;
         j.model.name = config::ModelName::llama;
         j.model.n_kv_head = 1;
         j.model.intermediate_size = 24;
         j.model.attention_bias = j.model.mlp_bias = true;
       }},
      {"FULL_SHARD llama (tied) bf16", [](config::JobConfig& j) {
         j.backend = config::Backend::fsdp;
         j.mixed_precision = config::MixedPrecision::bf16;
         j.model.name = config::ModelName::llama;
         j.model.tie_word_embeddings = true;
         j.fsdp.transformer_layer_cls_to_wrap = "LlamaDecoderLayer";
       }},
      {"zero 2 (nothing partitioned: every unit kept whole)",
       [](config::JobConfig& j) { j.backend = config::Backend::deepspeed; j.deepspeed.zero_stage = 2; }},
  };
  for (const auto& c : cases)
    for (int world : {1, 2, 3, 4}) {
      config::JobConfig job = test::tiny_job();
      job.model.n_layer = 3;
      c.edit(job);
      INFO(c.name << " at world " << world);
      check_equal(run_init(job, world, /*sharded=*/true), run_init(job, world, /*sharded=*/false));
    }
}

TEST_CASE("sharded init: the replicated engine refuses a unit source", "[sharded_init]") {
  comm::FakeWorld fake(1);
  auto comm = fake.communicator(0);
  config::JobConfig job = test::tiny_job();
  auto module = test::builtin_module(job.model, 1);
  auto source = train::make_spec_init_source(*module, job.model.n_layer, 1);
  const plan::ResolvedPlan resolved = plan::resolve_plan(job);
  CHECK_THROWS_WITH(PreparedBuiltin(job, module,
                                    [&](std::vector<engine::UnitSpec> specs) {
                                      return engine::make_backend(resolved, *comm, std::move(specs),
                                                                    engine::builtin_optimizer_setup(job.optimizer), source);
                                    }),
                    Catch::Matchers::Contains("not a unit source"));
}

TEST_CASE("sharded init: a weights file is read in slices, each rank its own, with the whole load's values",
          "[sharded_init]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "weights.safetensors").string();
  config::JobConfig job = test::tiny_job(config::Backend::deepspeed);
  job.model.n_layer = 3;
  job.deepspeed.zero_stage = 3;
  job.deepspeed.stage3_param_persistence_threshold = 0;  // every layer released: read as shards
  auto source_model = test::builtin_module(job.model, 5);  // other values than the runs' own init
  engine::save_safetensors(path, source_model->spec_parameters());
  // The root (wte, wpe, ln_f) is kept whole on every rank; each layer's elements belong to one rank.
  uint64_t root_bytes = 0, layer_bytes = 0;
  for (const auto& [name, p] : source_model->spec_parameters())
    (name.rfind("h.", 0) == 0 ? layer_bytes : root_bytes) += uint64_t(p.numel()) * 4;
  for (int world : {1, 2, 3, 4}) {
    INFO("world " << world);
    std::vector<uint64_t> read;
    check_equal(run_init(job, world, /*sharded=*/true, path, &read), run_init(job, world, /*sharded=*/false, path));
    uint64_t layers_read = 0;
    for (uint64_t bytes : read) {
      CHECK(bytes >= root_bytes);
      CHECK(bytes - root_bytes <= layer_bytes / uint64_t(world) + 3 * 4 * uint64_t(world));  // padding: < world per unit
      layers_read += bytes - root_bytes;
    }
    CHECK(layers_read == layer_bytes);  // every layer element read once, by the rank that keeps it
  }
  job.backend = config::Backend::fsdp;
  check_equal(run_init(job, 4, /*sharded=*/true, path), run_init(job, 4, /*sharded=*/false, path));
}

TEST_CASE("sharded init: a weights file that is not the model's is refused before anything is read", "[sharded_init]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "other.safetensors").string();
  config::JobConfig job = test::tiny_job();
  auto other = job.model;
  other.n_embd = 32;
  engine::save_safetensors(path, test::builtin_module(other, 1)->spec_parameters());
  std::shared_ptr<train::BuiltinModule> module;
  {
    train::PlaceholderScope scope(at::kCPU);
    module = train::make_builtin_module(job.model);
  }
  CHECK_THROWS_WITH(train::WeightsFileSource(module->spec_parameters(), path),
                    Catch::Matchers::Contains("has shape") && Catch::Matchers::Contains("the model needs"));
}
