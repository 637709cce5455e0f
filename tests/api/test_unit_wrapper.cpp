// accel::Unit<M> (include/accel/unit.hpp; docs/design/0015, design B): a plain module outside a
// prepared model, the units it makes, and the strategies that free parameters between uses (ZeRO-3,
// FULL_SHARD, HYBRID_SHARD) over a model with wrapped blocks, a block called twice, nested
// wrappers and root parameters used first and last: at world 2 in process (FakeWorld threads, the
// engines' own test pattern) against world 1 unsharded, and through Accelerator at world 1.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include "accel/accel.hpp"
#include "api/unit_policy.hpp"
#include "api/unit_sink.hpp"
#include "engine/backend.hpp"
#include "runtime/comm/fake_communicator.hpp"
#include "tests/comm/comm_test_support.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

thread_local int block_forwards = 0;  // BlockImpl::forward calls on this thread (a rank): recomputes count

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t c) : fc(register_module("fc", torch::nn::Linear(c, c))) {}
  torch::Tensor forward(torch::Tensor x) {
    ++block_forwards;
    return x + torch::tanh(fc(x));
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

// A wrapper holding a wrapper: the outer unit keeps only its own projection (FSDP2's nesting).
struct OuterImpl : torch::nn::Module {
  explicit OuterImpl(int64_t c)
      : proj(register_module("proj", torch::nn::Linear(c, c))), inner(register_module("inner", accel::Unit<Block>(c))) {}
  torch::Tensor forward(torch::Tensor x) { return inner(torch::tanh(proj(x))); }
  torch::nn::Linear proj;
  accel::Unit<Block> inner;
};
TORCH_MODULE(Outer);

// Root parameters (in, out) used first and last; h.0 called twice per forward; a nested wrapper.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    in = register_module("in", torch::nn::Linear(5, 8));
    for (int i = 0; i < 2; ++i) h->push_back(blocks.emplace_back(8));
    register_module("h", h);
    outer = register_module("outer", accel::Unit<Outer>(8));
    out = register_module("out", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(in(x));
    x = blocks[0](x);
    if (!skip_h1) x = blocks[1](x);  // a branch every rank takes alike (h.1 then has no backward)
    x = blocks[0](x);  // the same unit again: gathered again, released after its last backward
    return out(outer(x));
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList h;
  std::vector<accel::Unit<Block>> blocks;
  accel::Unit<Outer> outer{nullptr};
  bool skip_h1 = false;
};
TORCH_MODULE(Net);

std::vector<std::string> names(const std::vector<accel::api::PolicyUnit>& units) {
  std::vector<std::string> out;
  for (const auto& u : units) out.push_back(u.name);
  return out;
}

// Deterministic values without the global generator (the ranks are threads of one process).
void set_values(Net& net) {
  at::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : net->parameters()) p.copy_((torch::arange(p.numel(), torch::kFloat) * 0.37 + k++).sin().view(p.sizes()) * 0.4);
}

at::Tensor rows(int n, int offset) { return torch::linspace(-1, 1, n * 5).view({n, 5}) * (1 + 0.5 * offset); }

}  // namespace

TEST_CASE("Unit<M> outside a prepared model is the plain module: names, values, Sequential", "[api][unit]") {
  torch::manual_seed(3);
  Block plain(4);
  accel::Unit<Block> wrapped(4);
  {
    at::NoGradGuard no_grad;
    wrapped->fc->weight.copy_(plain->fc->weight);
    wrapped->fc->bias.copy_(plain->fc->bias);
  }
  const at::Tensor x = torch::randn({3, 4});
  CHECK(torch::equal(wrapped(x), plain(x)));
  CHECK(torch::equal(wrapped->forward(x), plain->forward(x)));
  CHECK_FALSE(wrapped->hooked());
  std::vector<std::string> keys;
  for (const auto& p : wrapped->named_parameters()) keys.push_back(p.key());
  CHECK(keys == std::vector<std::string>{"fc.weight", "fc.bias"});  // no wrapper segment
  torch::nn::Sequential seq(wrapped);  // a single-forward wrapper is an AnyModule
  CHECK(torch::equal(seq->forward(x), plain(x)));
  Net net;
  CHECK(net->named_parameters().contains("h.1.fc.weight"));
  CHECK(net->named_parameters().contains("outer.inner.fc.bias"));
  CHECK(accel::api::class_matches(net->blocks[0]->name(), "Block"));
  CHECK(accel::api::class_matches(net->outer->name(), "Outer"));
}

TEST_CASE("Unit<M> units: each wrapper, nested ones split, the rest in root; policy outside only; ties to root",
          "[api][unit]") {
  Net net;
  auto units = accel::api::apply_unit_policy(*net, {});
  CHECK(names(units) == std::vector<std::string>{"root", "h.0", "h.1", "outer", "outer.inner"});
  CHECK(units[0].boundary == nullptr);
  CHECK(units[1].boundary == net->blocks[0].get());
  CHECK(units[3].params.size() == 2);  // outer.proj only: its inner wrapper is a unit of its own
  CHECK(units[3].params[0].first == "outer.proj.weight");
  REQUIRE(units[0].params.size() == 4);
  CHECK(units[0].params[0].first == "in.weight");
  CHECK(units[0].params[3].first == "out.bias");

  // A policy adds units among the modules outside every wrapper; its matches inside are ignored.
  accel::UnitPolicy linear;
  linear.classes = {"torch::nn::Linear"};
  CHECK(names(accel::api::apply_unit_policy(*net, linear)) ==
        std::vector<std::string>{"in", "h.0", "h.1", "outer", "outer.inner", "out"});

  // A wrapper's weight registered outside it too (tied) is read outside its boundary: root's.
  struct TiedImpl : torch::nn::Module {
    TiedImpl() {
      block = register_module("block", accel::Unit<Block>(3));
      head = register_parameter("head", block->fc->weight);
    }
    accel::Unit<Block> block{nullptr};
    torch::Tensor head;
  };
  TiedImpl tied;
  auto tied_units = accel::api::apply_unit_policy(tied, {});
  REQUIRE(names(tied_units) == std::vector<std::string>{"root", "block"});
  REQUIRE(tied_units[0].params.size() == 1);
  CHECK(tied_units[0].params[0].first == "head");  // its first name in named_parameters()
  CHECK(tied_units[1].params.size() == 1);  // block.fc.bias
}

namespace {

bool frees_parameters(const accel::config::JobConfig& job) {
  return (job.backend == accel::config::Backend::deepspeed && job.deepspeed.zero_stage >= 3) ||
         (job.backend == accel::config::Backend::fsdp &&
          (job.fsdp.sharding_strategy == accel::config::ShardingStrategy::FULL_SHARD ||
           job.fsdp.sharding_strategy == accel::config::ShardingStrategy::HYBRID_SHARD));
}

// Three steps of two micro-steps (a global batch of 4 rows each) over the engine, with the units
// and hooks prepare() makes. Returns rank 0's full parameters. `skip_h1`: every rank's first
// micro-step of each step leaves h.1 out.
std::vector<at::Tensor> train(const accel::config::JobConfig& job, int world, bool skip_h1 = false) {
  accel::comm::FakeWorld fake(world);
  std::vector<at::Tensor> full;
  auto errors = accel::test::run_ranks(
      world, [&](int r) { return fake.communicator(r); },
      [&](accel::comm::Communicator& comm) {
        Net net;
        set_values(net);
        std::vector<accel::engine::UnitSpec> specs;
        std::vector<std::pair<std::string, torch::nn::Module*>> boundaries;
        for (auto& unit : accel::api::apply_unit_policy(*net, {})) {
          accel::engine::UnitSpec spec;
          spec.name = unit.name;
          spec.params = unit.params;
          spec.groups.assign(unit.params.size(), 0);
          spec.module = unit.boundary;
          spec.pinned = !unit.boundary;
          if (unit.boundary) boundaries.emplace_back(unit.name, unit.boundary);
          specs.push_back(std::move(spec));
        }
        accel::engine::OptimizerSetup setup;
        accel::engine::GroupHyper hyper;
        hyper.lr = 0.05;
        hyper.weight_decay = 0.1;
        setup.groups = {hyper};
        auto backend = accel::engine::make_backend(job, comm, std::move(specs), setup);
        backend->wait_parameters();
        accel::engine::UnitHooks* hooks = nullptr;
        std::shared_ptr<accel::detail::UnitSink> sink;
        const bool recompute = job.fsdp.activation_checkpointing;
        if (frees_parameters(job) || recompute)
          sink = accel::api::attach_unit_sink(boundaries, [&] { return hooks; }, backend->name(), recompute);
        block_forwards = 0;
        for (int step = 0; step < 3; ++step) {
          for (int m = 0; m < 2; ++m) {
            hooks = backend->begin_micro_step(m, m == 1);
            backend->rearm_grads();
            net->skip_h1 = skip_h1 && m == 0;
            at::Tensor x = rows(4, step * 2 + m).narrow(0, comm.rank() * (4 / world), 4 / world);
            (net->forward(x).pow(2).mean() / 2.0).backward();
            backend->end_micro_step(m == 1);
          }
          backend->clip_grad_norm(1.0);
          backend->optimizer_step(backend->optimizer_setup().groups);
          backend->wait_parameters();
        }
        // 4 block calls per forward, 6 forwards; recomputing runs each again in backward (and the
        // nested block a third time: its outer unit's recompute runs it once more without a graph).
        if (!skip_h1) CHECK(block_forwards == (recompute ? 9 * 6 : 4 * 6));
        if (frees_parameters(job)) {
          // Between uses a unit holds no parameter storage; the root stays gathered.
          CHECK(net->blocks[1]->fc->weight.storage().nbytes() == 0);
          CHECK(net->outer->inner->fc->weight.storage().nbytes() == 0);
          CHECK(net->in->weight.storage().nbytes() > 0);
          CHECK(net->blocks[1]->hooked());
        } else {
          CHECK_FALSE(net->blocks[1]->hooked());
        }
        auto params = backend->full_parameters();
        if (comm.rank() == 0)
          for (auto& [name, t] : params) full.push_back(t);
        if (sink) sink->detach();
      });
  CHECK(errors == std::vector<std::string>(size_t(world), ""));
  return full;
}

accel::config::JobConfig job_for(accel::config::Backend backend, int stage,
                                 accel::config::ShardingStrategy strategy = accel::config::ShardingStrategy::FULL_SHARD) {
  accel::config::JobConfig job;
  job.backend = backend;
  job.num_processes = 2;
  job.deepspeed.zero_stage = stage;
  job.deepspeed.stage3_param_persistence_threshold = 0;  // the units are tiny: release them all the same
  job.fsdp.sharding_strategy = strategy;
  return job;
}

}  // namespace

TEST_CASE("Unit<M> at world 2: zero 3, FULL_SHARD, HYBRID_SHARD, recompute (and ddp, zero 1-2) match world 1",
          "[api][unit]") {
  using accel::config::Backend;
  using accel::config::ShardingStrategy;
  const auto reference = train(job_for(Backend::ddp, 0), 1);
  REQUIRE(reference.size() == 12);
  auto no_prefetch = job_for(Backend::deepspeed, 3);
  no_prefetch.deepspeed.stage3_prefetch_bucket_size = 0;
  no_prefetch.deepspeed.stage3_max_live_parameters = 1;
  auto fsdp_prefetch = job_for(Backend::fsdp, 0);
  fsdp_prefetch.fsdp.forward_prefetch = true;
  fsdp_prefetch.fsdp.backward_prefetch = accel::config::BackwardPrefetch::BACKWARD_POST;
  auto hybrid = job_for(Backend::fsdp, 0, ShardingStrategy::HYBRID_SHARD);
  hybrid.num_machines = 2;  // one rank per machine: shards of 1, replicated across the 2
  struct Case {
    std::string name;
    accel::config::JobConfig job;
  };
  auto with_recompute = [](accel::config::JobConfig job) {
    job.fsdp.activation_checkpointing = true;
    return job;
  };
  for (const auto& c : {Case{"zero 3", job_for(Backend::deepspeed, 3)}, Case{"zero 3 no prefetch", no_prefetch},
                        Case{"FULL_SHARD recompute", with_recompute(job_for(Backend::fsdp, 0))},
                        Case{"HYBRID_SHARD recompute", with_recompute(job_for(Backend::fsdp, 0, ShardingStrategy::HYBRID_SHARD))},
                        Case{"FULL_SHARD", job_for(Backend::fsdp, 0)}, Case{"FULL_SHARD prefetch", fsdp_prefetch},
                        Case{"HYBRID_SHARD", hybrid}, Case{"ddp", job_for(Backend::ddp, 0)},
                        Case{"zero 1", job_for(Backend::deepspeed, 1)}, Case{"zero 2", job_for(Backend::deepspeed, 2)}}) {
    const auto got = train(c.job, 2);
    REQUIRE(got.size() == reference.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // fp32: the two half-batch means are averaged instead of one mean over 4 rows (reassociation).
      CAPTURE(c.name, i, (got[i] - reference[i]).abs().max().item<double>());
      CHECK(at::allclose(got[i], reference[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("Unit<M> at world 2: a unit left out of a micro-step reduces zeros under every strategy", "[api][unit]") {
  // h.1 is left out of the first micro-step of each step on every rank: its backward never runs
  // there, and the engine reduce-scatters a zero gradient for it at the micro-step's end (stages
  // 2-3 reduce every micro-step). The result must be world 1's under ddp, where the parameters
  // that took no gradient are zeros in their bucket.
  using accel::config::Backend;
  const auto reference = train(job_for(Backend::ddp, 0), 1, /*skip_h1=*/true);
  REQUIRE(reference.size() == 12);
  const auto unskipped = train(job_for(Backend::ddp, 0), 1);
  CHECK_FALSE(at::allclose(reference[4], unskipped[4], 1e-5, 1e-6));  // h.1.fc.weight: the skip matters
  auto no_overlap = job_for(Backend::deepspeed, 2);
  no_overlap.deepspeed.overlap_comm = false;
  struct Case {
    std::string name;
    accel::config::JobConfig job;
  };
  for (const auto& c : {Case{"zero 2", job_for(Backend::deepspeed, 2)}, Case{"zero 2 no overlap", no_overlap},
                        Case{"zero 3", job_for(Backend::deepspeed, 3)}, Case{"FULL_SHARD", job_for(Backend::fsdp, 0)},
                        Case{"SHARD_GRAD_OP", job_for(Backend::fsdp, 0, accel::config::ShardingStrategy::SHARD_GRAD_OP)},
                        Case{"zero 1", job_for(Backend::deepspeed, 1)}, Case{"ddp", job_for(Backend::ddp, 0)}}) {
    const auto got = train(c.job, 2, /*skip_h1=*/true);
    REQUIRE(got.size() == reference.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // fp32 reassociation only, as in the case above.
      CAPTURE(c.name, i, (got[i] - reference[i]).abs().max().item<double>());
      CHECK(at::allclose(got[i], reference[i], 1e-5, 1e-6));
    }
  }
}

namespace {

// A block taking a second tensor: only the first may carry a gradient under stage 3.
struct PairImpl : torch::nn::Module {
  PairImpl() : fc(register_module("fc", torch::nn::Linear(3, 3))) {}
  torch::Tensor forward(torch::Tensor x, torch::Tensor z) { return fc(x) + z; }
  torch::nn::Linear fc;
};
TORCH_MODULE(Pair);

struct PairNetImpl : torch::nn::Module {
  PairNetImpl() : pair(register_module("pair", accel::Unit<Pair>())), w(register_parameter("w", torch::ones({3}))) {}
  accel::Unit<Pair> pair;
  torch::Tensor w;
};

}  // namespace

TEST_CASE("Unit<M> through Accelerator at world 1: zero 3, FULL_SHARD (and recompute) give ddp's losses; eval, misuse",
          "[api][unit]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  auto run = [&](const std::string& backend) {
    accel::Accelerator acc(dir.write("job.yaml", "num_processes: 1\n" + backend +
                                                     "\ntraining:\n  gradient_accumulation_steps: 2\n  output_dir: " +
                                                     out + "\n"));
    Net net;
    set_values(net);
    torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
    auto& opt = acc.prepare(*net, adamw);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i) {
      at::Tensor loss = net->forward(rows(4, i)).pow(2).mean();  // no accumulate(): the first unit call begins it
      acc.backward(loss);
      losses.push_back(loss.item<double>());
      opt.step();
      if (i == 3) {  // evaluation between steps: gathered and released again, no gradients
        at::NoGradGuard no_grad;
        losses.push_back(net->forward(rows(4, 9)).pow(2).mean().item<double>());
      }
    }
    // Under zero 3 / FULL_SHARD the block's storage is freed between uses (the hooks are live).
    CHECK((net->blocks[1]->fc->weight.storage().nbytes() == 0) == net->blocks[1]->hooked());
    CHECK(net->blocks[1]->hooked() == (backend != "backend: ddp"));
    return losses;
  };
  const auto ddp = run("backend: ddp");
  for (const std::string backend : {"backend: deepspeed\ndeepspeed:\n  zero_stage: 3\n  stage3_param_persistence_threshold: 0",
                                    "backend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD",
                                    "backend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD\n  activation_checkpointing: true"}) {
    CAPTURE(backend);
    const auto sharded = run(backend);
    REQUIRE(sharded.size() == ddp.size());
    // One rank, the same kernels: the updates are the same operations on the same values.
    for (size_t i = 0; i < ddp.size(); ++i) {
      CAPTURE(i, sharded[i], ddp[i]);
      CHECK(std::abs(sharded[i] - ddp[i]) <= 1e-6 * std::abs(ddp[i]));
    }
  }

  {
    accel::Accelerator acc(dir.write("job.yaml", "num_processes: 1\nbackend: fsdp\nfsdp:\n  sharding_strategy: "
                                                 "SHARD_GRAD_OP\n  activation_checkpointing: true\n"));
    // SHARD_GRAD_OP finds gradients ready per backward pass and each recompute is a pass of its
    // own: Net calls blocks[0] twice per forward, and that second call is refused.
    Net net;
    torch::optim::AdamW adamw(net->parameters());
    acc.prepare(*net, adamw);
    CHECK_THROWS_WITH(net->forward(rows(4, 0)), Catch::Matchers::Contains("called twice in one micro-step") &&
                                                    Catch::Matchers::Contains("FULL_SHARD"));
  }
  accel::Accelerator acc(dir.write("job.yaml", "num_processes: 1\nbackend: deepspeed\ndeepspeed:\n  zero_stage: 3\n"
                                               "training:\n  output_dir: " + out + "\n"));
  PairNetImpl net;
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.1));
  acc.prepare(net, sgd);
  CHECK(net.pair->hooked());
  const at::Tensor x = torch::ones({2, 3});
  CHECK_THROWS_WITH(net.pair(x, x * net.w), Catch::Matchers::Contains("'pair'") &&
                                                 Catch::Matchers::Contains("after the first requires grad"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();
