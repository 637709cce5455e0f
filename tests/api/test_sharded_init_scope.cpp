// accel::ShardedInit (include/accel/sharded_init.hpp, docs/design/0023 decision 3): a user's module
// built in the scope never exists whole on a rank, and trains exactly as the same module built whole.
// Ranks are FakeWorld threads in one process; each rank initializes its parameters with values of
// its own (rank r's differ from rank 0's), so agreement also shows that rank 0's values won, as
// prepare()'s broadcast makes them win for a model built whole.
// The construction peak is read by a counting CPU allocator installed around construction: the
// bytes every rank's tensors hold at once, which covers the parameters, the slices and the copies the
// scope makes (the engine's unit buffers come from its own allocator, after construction).
#include "tests/support/catch_with_torch.hpp"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <atomic>
#include <fstream>
#include <mutex>

#include "accel/accel.hpp"
#include "api/host.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "runtime/config/job_loader.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/temp_dir.hpp"

// Named, not anonymous: the test files of test_api are compiled together in unity batches.
namespace sharded_init_scope {

thread_local int this_rank = 0;  // the rank whose thread constructs: each rank draws values of its own

// Deterministic values that differ between ranks (no shared generator: the ranks are threads).
void fill_own_values(torch::nn::Module& m, double salt) {
  at::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : m.parameters(/*recurse=*/false)) {
    // In place on one temporary: the construction peak below counts every byte.
    at::Tensor v = at::arange(p.numel(), at::kFloat).mul_(0.37 + 0.01 * ++k).add_(salt + 100.0 * this_rank).sin_().mul_(0.05);
    p.copy_(v.view(p.sizes()));
  }
}

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t c, int64_t hidden)
      : up(register_module("up", torch::nn::Linear(c, hidden))), down(register_module("down", torch::nn::Linear(hidden, c))) {
    fill_own_values(*up, 1.0);  // the user's initializer runs in the unit's constructor
    fill_own_values(*down, 2.0);
  }
  torch::Tensor forward(torch::Tensor x) { return x + down(torch::tanh(up(x))); }
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

// A wrapper holding a wrapper: the inner block is a unit of its own, the outer keeps its projection.
struct PairImpl : torch::nn::Module {
  PairImpl(int64_t c, int64_t hidden)
      : proj(register_module("proj", torch::nn::Linear(c, c))), inner(register_module("inner", accel::Unit<Block>(c, hidden))) {
    fill_own_values(*proj, 3.0);
  }
  torch::Tensor forward(torch::Tensor x) { return inner(torch::tanh(proj(x))); }
  torch::nn::Linear proj;
  accel::Unit<Block> inner;
};
TORCH_MODULE(Pair);

struct NetImpl : torch::nn::Module {
  NetImpl(int layers, int64_t c, int64_t hidden) {
    in = register_module("in", torch::nn::Linear(8, c));
    fill_own_values(*in, 4.0);
    for (int i = 0; i < layers; ++i) h->push_back(blocks.emplace_back(c, hidden));
    register_module("h", h);
    pair = register_module("pair", accel::Unit<Pair>(c, hidden));
    out = register_module("out", torch::nn::Linear(c, 4));
    fill_own_values(*out, 5.0);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(in(x));
    for (auto& b : blocks) x = b(x);
    return out(pair(x));
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList h;
  std::vector<accel::Unit<Block>> blocks;
  accel::Unit<Pair> pair{nullptr};
};
TORCH_MODULE(Net);

// Bytes held by CPU tensors of every thread, now and at the peak since reset().
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr d = inner_->allocate(n);
    void* data = d.get();
    auto* held = new Held{std::move(d), int64_t(n), this};
    int64_t now = now_ += int64_t(n);
    for (int64_t peak = peak_; now > peak && !peak_.compare_exchange_weak(peak, now);) {}
    return {data, held, &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  void reset() { peak_ = now_.load(); }
  int64_t peak_above(int64_t base) const { return peak_ - base; }
  int64_t now() const { return now_; }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
    CountingAllocator* owner;
  };
  static void release(void* ctx) {
    auto* held = static_cast<Held*>(ctx);
    held->owner->now_ -= held->bytes;
    delete held;
  }
  c10::Allocator* inner_;
  std::atomic<int64_t> now_{0}, peak_{0};
};

// Installed once for the rest of the process (a tensor may outlive the case that made it, and the
// allocator's priority only rises), so never destroyed.
CountingAllocator& counting_allocator() {
  static CountingAllocator* counting = [] {
    auto* c = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(c, /*priority=*/100);
    return c;
  }();
  return *counting;
}

struct Outcome {
  std::vector<std::vector<double>> losses;  // by rank
  std::string weights;                      // the saved model's bytes (rank 0 writes them)
  int64_t construction_peak = 0;            // bytes, every rank together
  std::vector<std::string> errors;
};

constexpr int64_t kWidth = 32, kHidden = 96;

Outcome run(const std::string& job_text, int world, bool scoped, int layers = 4) {
  accel::test::TempDir dir;
  accel::config::LoadOptions options;
  options.file = dir.write("job.yaml", job_text + "\ntraining:\n  output_dir: " + (dir.path() / "out").string() + "\n");
  const accel::config::LoadedJob job = accel::config::load_job(options);
  accel::comm::FakeWorld fake(world);
  Outcome outcome;
  outcome.losses.resize(size_t(world));
  CountingAllocator& counting = counting_allocator();
  counting.reset();
  const int64_t base = counting.now();
  std::atomic<int> built{0};
  outcome.errors = accel::test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        this_rank = comm.rank();
        auto acc = accel::api::attach(job, comm, nullptr, {}).accelerator;
        Net net{nullptr};
        if (scoped) {
          accel::ShardedInit sharded(*acc);
          net = Net(layers, kWidth, kHidden);
        } else {
          net = Net(layers, kWidth, kHidden);
        }
        // Every rank built its model before the peak is read (the last one's construction included).
        if (++built == world) outcome.construction_peak = counting.peak_above(base);
        comm.barrier()->wait();
        torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
        auto& opt = acc->prepare(*net, adamw);
        for (int step = 0; step < 3; ++step) {
          at::Tensor x = at::cos(at::arange(4 * 8, at::kFloat).view({4, 8}) * (0.3 + 0.1 * step) + comm.rank());
          at::Tensor loss = net->forward(x).pow(2).mean();
          acc->backward(loss);
          outcome.losses[size_t(comm.rank())].push_back(loss.item<double>());
          opt.step();
        }
        const std::string path = (dir.path() / "model.safetensors").string();
        acc->save_model(path);
        comm.barrier()->wait();
        if (comm.rank() == 0) outcome.weights = accel::test::read_file(path);
        comm.barrier()->wait();  // both ranks drain their queues before either leaves
      });
  return outcome;
}

int64_t block_bytes() { return (kWidth * kHidden * 2 + kHidden + kWidth) * 4; }

}  // namespace sharded_init_scope

using namespace sharded_init_scope;

TEST_CASE("a module built in accel::ShardedInit trains as the module built whole", "[api][sharded_init]") {
  struct Case {
    const char* job;
    int world;
  };
  for (const Case& c : {Case{"num_processes: 2\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 3\n"
                             "  stage3_param_persistence_threshold: 0", 2},
                        // Units under the threshold stay whole (the blocks; the pair's projection is cut).
                        Case{"num_processes: 2\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 3\n"
                             "  stage3_param_persistence_threshold: 7000", 2},
                        Case{"num_processes: 3\nbackend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD", 3},
                        Case{"num_processes: 4\nnum_machines: 2\nbackend: fsdp\nfsdp:\n  sharding_strategy: HYBRID_SHARD", 4},
                        // Parameters stay whole: the scope changes nothing.
                        Case{"num_processes: 2\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 2", 2}}) {
    CAPTURE(c.job);
    const Outcome whole = run(c.job, c.world, false);
    const Outcome scoped = run(c.job, c.world, true);
    REQUIRE(whole.errors == accel::test::no_errors(c.world));
    REQUIRE(scoped.errors == accel::test::no_errors(c.world));
    // The same values reach the same engine: bit for bit.
    CHECK(scoped.losses == whole.losses);
    CHECK(!whole.weights.empty());
    CHECK(scoped.weights == whole.weights);
  }
}

TEST_CASE("accel::ShardedInit: no rank holds the model while it is built", "[api][sharded_init]") {
  const int world = 4, layers = 8;
  const std::string job = "num_processes: 4\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 3\n"
                          "  stage3_param_persistence_threshold: 0";
  const Outcome whole = run(job, world, false, layers);
  const Outcome scoped = run(job, world, true, layers);
  REQUIRE(scoped.errors == accel::test::no_errors(world));
  // The model: the blocks, the pair's inner block and projection, and the root (in, out).
  const int64_t model = (layers + 1) * block_bytes() + (kWidth * kWidth + kWidth) * 4 + (8 * kWidth + kWidth) * 4 +
                        (kWidth * 4 + 4) * 4;
  const int64_t root = (8 * kWidth + kWidth) * 4 + (kWidth * 4 + 4) * 4;
  CAPTURE(model, whole.construction_peak, scoped.construction_peak);
  // Built whole, every rank holds the model: the bound below would fail.
  CHECK(whole.construction_peak >= world * model);
  // In the scope a rank holds its slices (together, the model once), the root, the unit being built,
  // and three copies of its largest parameter at most (the initializer's temporary, the fake
  // world's deposit of the broadcast, the slice being cut); 16 KiB for the small tensors around them.
  const int64_t largest_param = kWidth * kHidden * 4;
  CHECK(scoped.construction_peak <= model + world * (root + block_bytes() + 3 * largest_param) + 16 * 1024);
  CHECK(scoped.losses == whole.losses);
}

TEST_CASE("accel::ShardedInit refuses what it cannot cut, with the fix", "[api][sharded_init]") {
  // fsdp NO_WRAP makes the whole model one unit: the slices kept per wrapper do not match it.
  const Outcome merged = run("num_processes: 2\nbackend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD\n"
                             "  auto_wrap_policy: NO_WRAP", 2, true);
  for (const auto& e : merged.errors) {
    CAPTURE(e);
    CHECK(e.find("accel::ShardedInit") != std::string::npos);
    CHECK(e.find("fix:") != std::string::npos);
  }
}
