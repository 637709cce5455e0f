// The public API at world 1 in process (Accelerator(job_file) without a launcher) and the unit
// policy over module trees (docs/design/0015). Multi-rank runs go through `accel launch` in
// tests/numerics/test_public_api.py.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include <optional>

#include "accel/accel.hpp"
#include "api/unit_policy.hpp"
#include "tests/support/temp_dir.hpp"

// Named, not anonymous: the test files of test_api are compiled together in unity batches, and
// Block, names() and job_text() are helpers of other files there too.
namespace accelerator_test {

namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t c) {
    fc = register_module("fc", torch::nn::Linear(c, c));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
  }
  torch::Tensor forward(torch::Tensor x) { return x + torch::tanh(fc(norm(x))); }
  torch::nn::Linear fc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Block);

// An embedding tied with the head, two blocks, a frozen projection.
struct TiedImpl : torch::nn::Module {
  TiedImpl() {
    emb = register_module("emb", torch::nn::Embedding(10, 4));
    h = register_module("h", torch::nn::Sequential(Block(4), Block(4)));
    frozen = register_module("frozen", torch::nn::Linear(4, 4));
    frozen->weight.requires_grad_(false);
    frozen->bias.requires_grad_(false);
    head = register_parameter("head", emb->weight);  // tied: the same tensor under a second name
  }
  torch::Tensor forward(torch::Tensor idx) { return torch::matmul(frozen(h->forward(emb(idx))), head.t()); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Sequential h{nullptr};
  torch::nn::Linear frozen{nullptr};
  torch::Tensor head;
};
TORCH_MODULE(Tied);

std::vector<std::string> names(const std::vector<accel::api::PolicyUnit>& units) {
  std::vector<std::string> out;
  for (const auto& u : units) out.push_back(u.name);
  return out;
}

}  // namespace

TEST_CASE("unit policy: classes, paths, size, predicate; ties once, frozen in none, the rest in root", "[api][policy]") {
  Tied model;
  accel::UnitPolicy by_class;
  by_class.classes = {"Block"};
  auto units = accel::api::apply_unit_policy(*model, by_class);
  CHECK(names(units) == std::vector<std::string>{"root", "h.0", "h.1"});
  // The tied tensor once, under its first name in named_parameters() (the root's own "head" comes
  // before the children's "emb.weight"); the frozen projection in no unit.
  REQUIRE(units[0].params.size() == 1);
  CHECK(units[0].params[0].first == "head");
  CHECK(units[1].params.size() == 4);
  CHECK(units[1].params[0].first == "h.0.fc.weight");

  accel::UnitPolicy by_path;
  by_path.name_patterns = {"h.*.norm"};
  CHECK(names(accel::api::apply_unit_policy(*model, by_path)) == std::vector<std::string>{"root", "h.0.norm", "h.1.norm"});

  accel::UnitPolicy by_size;  // bottom-up: each fc (20) first; the norms (8 each) are left to the root
  by_size.min_params = 20;
  CHECK(names(accel::api::apply_unit_policy(*model, by_size)) ==
        std::vector<std::string>{"root", "emb", "h.0.fc", "h.1.fc"});

  accel::UnitPolicy by_predicate;
  by_predicate.predicate = [](const std::string& path, const torch::nn::Module&) { return path == "h"; };
  CHECK(names(accel::api::apply_unit_policy(*model, by_predicate)) == std::vector<std::string>{"root", "h"});

  // No policy: each child of the root holding trainable parameters.
  CHECK(names(accel::api::apply_unit_policy(*model, {})) == std::vector<std::string>{"emb", "h"});

  CHECK(accel::api::class_matches("BlockImpl", "Block"));
  CHECK(accel::api::class_matches("ns::BlockImpl", "Block"));
  CHECK(accel::api::class_matches("torch::nn::LinearImpl", "torch::nn::Linear"));
  CHECK_FALSE(accel::api::class_matches("BlockImplX", "Block"));
  CHECK(accel::api::glob_matches("layers.3.mlp", "layers.*.mlp"));
  CHECK_FALSE(accel::api::glob_matches("layers.3.attn", "layers.*.mlp"));
}

namespace {

std::string job_text(const std::string& backend_lines, const std::string& out) {
  return "num_processes: 1\n" + backend_lines + "\ntraining:\n  output_dir: " + out + "\n";
}

torch::nn::Sequential small_net() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
}

std::vector<torch::Tensor> snapshot(torch::nn::Sequential& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("Accelerator at world 1: refusals name the key and the fix", "[api]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  auto refused = [&](const std::string& lines, torch::optim::Optimizer* custom = nullptr) {
    accel::Accelerator acc(dir.write("job.yaml", job_text(lines, out)));
    auto net = small_net();
    torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-2));
    try {
      acc.prepare(*net, custom ? *custom : adamw);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(refused("backend: deepspeed\ndeepspeed:\n  zero_stage: 3"),
             Catch::Matchers::Contains("zero_stage 3") && Catch::Matchers::Contains("design B") &&
                 Catch::Matchers::Contains("wrap the blocks in accel::Unit<>"));
  CHECK_THAT(refused("backend: fsdp\nfsdp:\n  sharding_strategy: FULL_SHARD"),
             Catch::Matchers::Contains("fsdp.sharding_strategy") && Catch::Matchers::Contains("SHARD_GRAD_OP") &&
                 Catch::Matchers::Contains("wrap the blocks in accel::Unit<>"));
  CHECK_THAT(refused("backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n  activation_checkpointing: true"),
             Catch::Matchers::Contains("fsdp.activation_checkpointing"));
  CHECK_THAT(refused("backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n  transformer_layer_cls_to_wrap: Nope"),
             Catch::Matchers::Contains("no module of class Nope") && Catch::Matchers::Contains("LinearImpl"));
  {
    auto net = small_net();
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(0.1));
    CHECK_THAT(refused("backend: ddp", &adam), Catch::Matchers::Contains("AdamW"));
  }
  {
    auto net = small_net();
    torch::optim::AdamW amsgrad(net->parameters(), torch::optim::AdamWOptions(1e-2).amsgrad(true));
    CHECK_THAT(refused("backend: ddp", &amsgrad), Catch::Matchers::Contains("AdamW with amsgrad is not supported"));
    torch::optim::Adam adam_amsgrad(net->parameters(), torch::optim::AdamOptions(1e-2).amsgrad(true));
    CHECK_THAT(refused("backend: ddp", &adam_amsgrad), Catch::Matchers::Contains("Adam with amsgrad is not supported"));
    torch::optim::SGD nesterov(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
    CHECK_THAT(refused("backend: ddp", &nesterov), Catch::Matchers::Contains("SGD with dampening or nesterov"));
    torch::optim::SGD dampening(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1));
    CHECK_THAT(refused("backend: ddp", &dampening), Catch::Matchers::Contains("SGD with dampening or nesterov"));
  }
  {
    auto net = small_net();
    torch::optim::AdamW partial(std::vector<torch::Tensor>{net->parameters()[0]}, torch::optim::AdamWOptions(1e-2));
    accel::Accelerator acc(dir.write("job.yaml", job_text("backend: ddp", out)));
    CHECK_THROWS_WITH(acc.prepare(*net, partial), Catch::Matchers::Contains("in no param group"));
  }
  {
    // A module used twice (a tied weight) is listed twice by libtorch's parameters(): one parameter in
    // one group, accepted and stepped once, as the same net with the list deduplicated.
    auto train = [&](bool duplicated) {
      auto net = small_net();
      std::vector<torch::Tensor> params = net->parameters();
      if (duplicated) params.push_back(params[0]);
      torch::optim::AdamW adamw(params, torch::optim::AdamWOptions(1e-2));
      accel::Accelerator acc(dir.write("job.yaml", job_text("backend: ddp", out)));
      auto& opt = acc.prepare(*net, adamw);
      acc.backward(net->forward(torch::ones({4, 3})).sum());
      opt.step();
      return snapshot(net);
    };
    auto once = train(false), twice = train(true);
    for (size_t k = 0; k < once.size(); ++k) CHECK(torch::equal(once[k], twice[k]));
    // Two groups naming one parameter: refused naming it and both groups.
    auto net = small_net();
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(net->parameters(), std::make_unique<torch::optim::AdamWOptions>(1e-2));
    groups.emplace_back(std::vector<torch::Tensor>{net->parameters()[2]}, std::make_unique<torch::optim::AdamWOptions>(1e-3));
    torch::optim::AdamW two_groups(std::move(groups));
    accel::Accelerator acc(dir.write("job.yaml", job_text("backend: ddp", out)));
    CHECK_THROWS_WITH(acc.prepare(*net, two_groups),
                      Catch::Matchers::Contains("parameter '2.weight' is in two param groups of the optimizer (0 and 1)"));
  }
  // The constructor accel's own trainer uses (api/host.hpp) is no way in for a program: it has no
  // Host to give.
  CHECK_THROWS_WITH(accel::Accelerator(std::shared_ptr<accel::detail::Host>()),
                    Catch::Matchers::Contains("Accelerator() or Accelerator(job_file)"));
}

TEST_CASE("Accelerator at world 1: set_unit_policy takes precedence over the job's policy", "[api][policy]") {
  // small_net's two Linear layers are two units under the job's class rule; a policy set on the
  // Accelerator that matches nothing leaves every parameter in the root: one unit.
  accel::test::TempDir dir;
  const std::string job = dir.write(
      "job.yaml", job_text("backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n"
                           "  transformer_layer_cls_to_wrap: torch::nn::Linear",
                           (dir.path() / "run").string()));
  auto units_of = [&](std::optional<accel::UnitPolicy> policy) {
    accel::Accelerator acc(job);
    auto net = small_net();
    torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-2));
    if (policy) acc.set_unit_policy(*policy);
    acc.prepare(*net, adamw);
    return acc.describe();
  };
  CHECK_THAT(units_of(std::nullopt), Catch::Matchers::Contains(": 2 units,"));
  accel::UnitPolicy none;
  none.predicate = [](const std::string&, const torch::nn::Module&) { return false; };
  CHECK_THAT(units_of(none), Catch::Matchers::Contains(": 1 units,"));
  accel::UnitPolicy last;
  last.name_patterns = {"2"};  // the root keeps "0"
  CHECK_THAT(units_of(last), Catch::Matchers::Contains(": 2 units,"));
}

TEST_CASE("Accelerator at world 1: accumulation, user lr changes and zero_grad(set_to_none)", "[api]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  // Two runs of 3 steps x 2 micro-steps, one calling the raw optimizer's zero_grad() (libtorch 2.x:
  // detach_, then set_to_none) after every backward, mid-accumulation and right before the step,
  // must agree to the bit: the gradient values are accel's until its step zeroes them. Then a
  // group at lr 0 does not move.
  auto run = [&](const std::string& backend, bool raw_zero_grad) {
    accel::Accelerator acc(dir.write("job.yaml", "num_processes: 1\n" + backend +
                                                     "\ntraining:\n  gradient_accumulation_steps: 2\n  output_dir: " +
                                                     out + "\n"));
    auto net = small_net();
    torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
    auto& opt = acc.prepare(*net, adamw);
    std::vector<bool> synced;
    for (int i = 0; i < 6; ++i) {
      auto micro = acc.accumulate();
      synced.push_back(micro.sync());
      torch::Tensor x = torch::linspace(-1, 1, 12).view({4, 3}) * (1 + i);
      acc.backward(net->forward(x).pow(2).mean());
      CHECK(acc.sync_gradients() == micro.sync());
      if (raw_zero_grad) adamw.zero_grad();  // drops .grad: accel points it back at its buffer
      opt.step();
      CHECK(opt.step_was_applied() == micro.sync());
    }
    CHECK(synced == std::vector<bool>{false, true, false, true, false, true});
    CHECK(acc.step() == 3);
    // wrapped() is the user's optimizer itself, and a scheduler's change made through it is read at
    // the next step: at lr 0 AdamW leaves every parameter alone.
    CHECK(&opt.wrapped() == &adamw);
    for (auto& group : opt.wrapped().param_groups()) group.options().set_lr(0.0);
    auto before = snapshot(net);
    for (int i = 0; i < 2; ++i) {
      acc.backward(net->forward(torch::ones({2, 3})).sum());
      opt.step();
    }
    auto after = snapshot(net);
    for (size_t k = 0; k < before.size(); ++k) CHECK(torch::equal(before[k], after[k]));
    return before;
  };
  for (const std::string backend : {"backend: ddp", "backend: deepspeed\ndeepspeed:\n  zero_stage: 1",
                                    "backend: deepspeed\ndeepspeed:\n  zero_stage: 2",
                                    "backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP"}) {
    CAPTURE(backend);
    auto kept = run(backend, false), dropped = run(backend, true);
    for (size_t k = 0; k < kept.size(); ++k) CHECK(torch::equal(kept[k], dropped[k]));
  }
}

TEST_CASE("Accelerator at world 1: the update of libtorch's own optimizer, per param group", "[api]") {
  // The same module trained by accel (prepared) and by plain libtorch with the same torch
  // optimizer (AdamW, SGD with momentum, Adam without weight decay): two param groups with their
  // own lr and weight decay. beta1 0 for AdamW: libtorch's
  // C++ AdamW rounds its first moment unlike torch.optim's (docs/design/0012), which accel follows;
  // with beta1 0 both are exact, so only the order of float operations differs.
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  auto groups_of = [](torch::nn::Sequential& net) {
    std::vector<torch::Tensor> weights, biases;
    for (const auto& p : net->named_parameters()) (p.value().dim() >= 2 ? weights : biases).push_back(p.value());
    return std::make_pair(weights, biases);
  };
  for (const std::string backend : {"backend: ddp", "backend: deepspeed\ndeepspeed:\n  zero_stage: 1",
                                    "backend: deepspeed\ndeepspeed:\n  zero_stage: 2",
                                    "backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP"}) {
    for (const std::string kind : {"adamw", "sgd", "adam"}) {
      CAPTURE(backend, kind);
      accel::Accelerator acc(dir.write("job.yaml", job_text(backend, out)));
      auto ours = small_net(), theirs = small_net();
      auto make = [&](torch::nn::Sequential& net) -> std::unique_ptr<torch::optim::Optimizer> {
        auto [w, b] = groups_of(net);
        if (kind == "adam") {  // torch::optim::Adam without weight decay: the same update as AdamW's at 0
          std::vector<torch::optim::OptimizerParamGroup> g;
          g.emplace_back(w, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(1e-2).betas({0.0, 0.99})));
          g.emplace_back(b, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(3e-2).betas({0.0, 0.999})));
          return std::make_unique<torch::optim::Adam>(g, torch::optim::AdamOptions(1e-2));
        }
        if (kind == "sgd") {
          std::vector<torch::optim::OptimizerParamGroup> g;
          g.emplace_back(w, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01)));
          g.emplace_back(b, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1).momentum(0.5)));
          return std::make_unique<torch::optim::SGD>(g, torch::optim::SGDOptions(0.05));
        }
        std::vector<torch::optim::OptimizerParamGroup> g;
        g.emplace_back(w, std::make_unique<torch::optim::AdamWOptions>(
                              torch::optim::AdamWOptions(1e-2).betas({0.0, 0.99}).weight_decay(0.1)));
        g.emplace_back(b, std::make_unique<torch::optim::AdamWOptions>(
                              torch::optim::AdamWOptions(3e-2).betas({0.0, 0.999}).weight_decay(0.0)));
        return std::make_unique<torch::optim::AdamW>(g, torch::optim::AdamWOptions(1e-2));
      };
      auto our_opt = make(ours), their_opt = make(theirs);
      auto& opt = acc.prepare(*ours, *our_opt);
      const auto initial = snapshot(ours);
      for (int step = 0; step < 4; ++step) {
        torch::Tensor x = torch::linspace(-1, 1, 12).view({4, 3}) * (1 + step);
        acc.backward(ours->forward(x).pow(2).mean());
        opt.step();
        their_opt->zero_grad();
        theirs->forward(x).pow(2).mean().backward();
        their_opt->step();
      }
      auto a = snapshot(ours), b = snapshot(theirs);
      for (size_t k = 0; k < a.size(); ++k) {
        CAPTURE(k, (a[k] - b[k]).abs().max().item<double>());
        CHECK_FALSE(torch::equal(a[k], initial[k]));  // trained
        // Measured: bit for bit equal under every strategy; the bound allows reordered float sums.
        CHECK(torch::allclose(a[k], b[k], 1e-5, 1e-7));
      }
    }
  }
}

TEST_CASE("DistributedSampler: a global batch does not depend on how it is split", "[api][sampler]") {
  auto rows_of = [](int world, size_t batch, bool shuffle) {
    std::vector<std::vector<size_t>> steps;  // per global batch, the rows of every rank in rank order
    std::vector<accel::DistributedSampler> samplers;
    for (int r = 0; r < world; ++r) samplers.emplace_back(50, world, r, shuffle, 9);
    for (auto& s : samplers) s.reset();
    while (true) {
      std::vector<size_t> global;
      for (auto& s : samplers) {
        auto b = s.next(batch);
        if (!b) return steps;
        global.insert(global.end(), b->begin(), b->end());
      }
      steps.push_back(global);
    }
  };
  for (bool shuffle : {false, true}) {
    auto one = rows_of(1, 8, shuffle), two = rows_of(2, 4, shuffle), four = rows_of(4, 2, shuffle);
    CHECK(one.size() == 6);  // 50 rows: 6 global batches of 8, the tail of 2 dropped
    CHECK(one == two);
    CHECK(one == four);
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();

TEST_CASE("Accelerator at world 1: print_progress gives the trainer's line of the step just taken", "[api]") {
  accel::test::TempDir dir;
  accel::Accelerator acc(dir.write("job.yaml", "num_processes: 1\ntraining:\n  gradient_accumulation_steps: 2\n"
                                               "  max_steps: 3\n  output_dir: " + (dir.path() / "run").string() + "\n"));
  auto net = small_net();
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(2.5e-3));
  auto& opt = acc.prepare(*net, adamw);
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(acc.print_progress(1.0, 8), Contains("print_progress() between optimizer steps"));  // no step yet
  acc.backward(net->forward(torch::ones({4, 3})).pow(2).mean());
  opt.step();  // the first micro-step of two: no optimizer step
  CHECK_THROWS_WITH(acc.print_progress(1.0, 8), Contains("print_progress() between optimizer steps"));
  acc.backward(net->forward(torch::ones({4, 3})).pow(2).mean());
  const double norm = acc.clip_grad_norm(1.0);
  opt.step();
  char norm_text[32];
  std::snprintf(norm_text, sizeof norm_text, "%.3f", norm);
  const std::string line = acc.print_progress(0.125, 8);
  CHECK_THAT(line, Catch::Matchers::StartsWith("step 1/3 | loss 0.1250 | lr 2.50e-03 | grad_norm " + std::string(norm_text) +
                                               " | "));
  CHECK_THAT(line, Contains(" tok/s | ") && Contains(" ms | peak ") && !Contains("loss_scale"));
  // Without clip_grad_norm() at the step, the line leaves the norm out.
  for (int i = 0; i < 2; ++i) {
    acc.backward(net->forward(torch::ones({4, 3})).pow(2).mean());
    opt.step();
  }
  CHECK_THAT(acc.print_progress(0.25, 8), Catch::Matchers::StartsWith("step 2/3 | loss 0.2500 | lr 2.50e-03 | ") &&
                                              !Contains("grad_norm"));
}

}  // namespace accelerator_test
