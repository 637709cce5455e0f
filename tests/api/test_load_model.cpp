// Accelerator::load_model (include/accel/accelerator.hpp, docs/design/0031): the counterpart of
// save_model. A module built with values of its own loads a safetensors file, or a folder of
// shards with an index, and trains from exactly those values (save_model right after prepare()
// gives them back bit for bit); under zero 3 and FULL_SHARD each rank reads only the bytes of what
// it keeps: the root (parameters outside every wrapper) whole, its part of each unit's flat buffer.
// Ranks are FakeWorld threads; the bytes are SafetensorsReader's per-thread counter.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include <fstream>

#include "accel/accel.hpp"
#include "api/host.hpp"
#include "engine/format/safetensors.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "runtime/config/job_loader.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/temp_dir.hpp"

// Named, not anonymous: the test files of test_api are compiled together in unity batches.
namespace load_model_test {

void fill_values(torch::nn::Module& m, double salt) {
  at::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : m.parameters(/*recurse=*/true))
    p.copy_(at::arange(p.numel(), at::kFloat).mul_(0.29 + 0.01 * ++k).add_(salt).sin_().mul_(0.1).view(p.sizes()));
}

struct LayerImpl : torch::nn::Module {
  explicit LayerImpl(int64_t c) : fc(register_module("fc", torch::nn::Linear(c, c))) {}
  torch::Tensor forward(torch::Tensor x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Layer);

constexpr int64_t kLayerWidth = 24;  // a unit: 24 * 24 + 24 = 600 values, not a multiple of 3 or 4 once padded

struct ModelImpl : torch::nn::Module {
  ModelImpl() {
    in = register_module("in", torch::nn::Linear(6, kLayerWidth));
    for (int i = 0; i < 3; ++i) h->push_back(layers.emplace_back(kLayerWidth));
    register_module("h", h);
    out = register_module("out", torch::nn::Linear(kLayerWidth, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in(x);
    for (auto& l : layers) x = l(x);
    return out(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList h;
  std::vector<accel::Unit<Layer>> layers;
};
TORCH_MODULE(Model);

constexpr int64_t kRootValues = (6 * kLayerWidth + kLayerWidth) + (kLayerWidth * 2 + 2);
constexpr int64_t kUnitValues = kLayerWidth * kLayerWidth + kLayerWidth;

accel::engine::NamedTensors named(torch::nn::Module& m) {
  accel::engine::NamedTensors out;
  for (const auto& p : m.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

struct LoadOutcome {
  std::vector<uint64_t> bytes_read;  // by rank
  accel::engine::NamedTensors saved;
  std::vector<std::string> errors;
};

LoadOutcome load_and_save(const std::string& job_text, int world, const std::string& weights) {
  accel::test::TempDir dir;
  accel::config::LoadOptions options;
  options.file = dir.write("job.yaml", job_text + "\ntraining:\n  output_dir: " + (dir.path() / "out").string() + "\n");
  const accel::config::LoadedJob job = accel::config::load_job(options);
  accel::comm::FakeWorld fake(world);
  LoadOutcome outcome;
  outcome.bytes_read.resize(size_t(world));
  const std::string saved = (dir.path() / "saved.safetensors").string();
  outcome.errors = accel::test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        auto acc = accel::api::attach(job, comm, nullptr, {}).accelerator;
        Model model;
        fill_values(*model, 7.0 + comm.rank());  // other values than the file's, different per rank
        torch::optim::AdamW adamw(model->parameters(), torch::optim::AdamWOptions(1e-2));
        const uint64_t before = accel::engine::SafetensorsReader::data_bytes_read_on_this_thread();
        acc->load_model(*model, weights);
        acc->prepare(*model, adamw);
        outcome.bytes_read[size_t(comm.rank())] = accel::engine::SafetensorsReader::data_bytes_read_on_this_thread() - before;
        acc->save_model(saved);
        comm.barrier()->wait();
      });
  if (outcome.errors == std::vector<std::string>(size_t(world))) outcome.saved = accel::engine::load_safetensors(saved);
  return outcome;
}

// The file's tensors as two shard files and an index, as a Hugging Face folder lays them out.
std::string write_folder(const accel::test::TempDir& dir, const accel::engine::NamedTensors& tensors) {
  const std::string folder = (dir.path() / "folder").string();
  std::filesystem::create_directories(folder);
  accel::engine::NamedTensors a(tensors.begin(), tensors.begin() + long(tensors.size() / 2));
  accel::engine::NamedTensors b(tensors.begin() + long(tensors.size() / 2), tensors.end());
  accel::engine::save_safetensors(folder + "/model-00001-of-00002.safetensors", a);
  accel::engine::save_safetensors(folder + "/model-00002-of-00002.safetensors", b);
  std::string map;
  for (const auto& [name, t] : a) map += (map.empty() ? "" : ", ") + ("\"" + name + "\": \"model-00001-of-00002.safetensors\"");
  for (const auto& [name, t] : b) map += ", \"" + name + "\": \"model-00002-of-00002.safetensors\"";
  std::ofstream(folder + "/model.safetensors.index.json") << "{\"metadata\": {}, \"weight_map\": {" << map << "}}";
  return folder;
}

}  // namespace load_model_test

using namespace load_model_test;

TEST_CASE("load_model reads a file or a folder into the module, each rank only its slices", "[api][load_model]") {
  accel::test::TempDir dir;
  Model source;
  fill_values(*source, 1.0);
  const accel::engine::NamedTensors expected = named(*source);
  const std::string file = (dir.path() / "weights.safetensors").string();
  accel::engine::save_safetensors(file, expected);
  const std::string folder = write_folder(dir, expected);

  struct Case {
    const char* job;
    int world;
    bool partitioned;
  };
  for (const Case& c : {Case{"num_processes: 2\nbackend: ddp", 2, false},
                        Case{"num_processes: 2\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 3\n"
                             "  stage3_param_persistence_threshold: 0", 2, true},
                        Case{"num_processes: 3\nbackend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD", 3, true}}) {
    for (const std::string& path : {file, folder}) {
      INFO(c.job << " from " << path);
      const LoadOutcome o = load_and_save(c.job, c.world, path);
      REQUIRE(o.errors == std::vector<std::string>(size_t(c.world)));
      REQUIRE(o.saved.size() == expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        INFO(expected[i].first);
        CHECK(o.saved[i].first == expected[i].first);
        CHECK(at::equal(o.saved[i].second, expected[i].second));  // moved, never computed: exact
      }
      // Bytes: every rank the whole model, or the root whole and its part of each padded unit.
      for (int r = 0; r < c.world; ++r) {
        int64_t values = kRootValues + 3 * kUnitValues;
        if (c.partitioned) {
          const int64_t padded = (kUnitValues + c.world - 1) / c.world * c.world;
          const int64_t lo = r * padded / c.world, hi = std::min((r + 1) * padded / c.world, kUnitValues);
          values = kRootValues + 3 * std::max<int64_t>(0, hi - lo);
        }
        INFO("rank " << r);
        CHECK(o.bytes_read[size_t(r)] == uint64_t(values) * 4);
      }
    }
  }
}

TEST_CASE("load_model names every missing, extra and mis-shaped tensor", "[api][load_model]") {
  accel::test::TempDir dir;
  Model source;
  accel::engine::NamedTensors tensors = named(*source);
  tensors.erase(tensors.begin());                                    // in.weight missing
  tensors.emplace_back("h.9.fc.weight", at::zeros({kLayerWidth, kLayerWidth}));  // extra
  for (auto& [name, t] : tensors)
    if (name == "out.bias") t = at::zeros({3});                       // wrong shape
  const std::string file = (dir.path() / "bad.safetensors").string();
  accel::engine::save_safetensors(file, tensors);
  const LoadOutcome o = load_and_save("num_processes: 1\nbackend: ddp", 1, file);
  REQUIRE(o.errors.size() == 1);
  CHECK_THAT(o.errors[0], Catch::Matchers::Contains("missing tensor 'in.weight'"));
  CHECK_THAT(o.errors[0], Catch::Matchers::Contains("extra tensor 'h.9.fc.weight'"));
  CHECK_THAT(o.errors[0], Catch::Matchers::Contains("tensor 'out.bias'"));
  CHECK_THAT(o.errors[0], Catch::Matchers::Contains("3 problems"));
}
