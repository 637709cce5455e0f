// Accelerator::save_state / load_state at world 1 in process (docs/design/0015 "save_state and
// load_state"): a resume continues the uninterrupted run bit for bit (model, optimizer, buffers,
// frozen parameters, registered objects, the CPU generator), across backends; and every refusal
// names what, where and the fix. Other world sizes: tests/numerics/test_api_checkpoints.py.
#include "tests/support/catch_with_torch.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "accel/accel.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

std::string job_text(const std::string& backend_lines, const std::string& out, const std::string& training = "") {
  return "num_processes: 1\n" + backend_lines + "\ntraining:\n  output_dir: " + out + "\n" + training;
}

// A linear layer, a BatchNorm (buffers: running stats, a counter), a frozen bias, the head.
torch::nn::Sequential make_net(int64_t width = 8, int64_t seed = 0) {
  torch::manual_seed(seed);
  torch::nn::Sequential net(torch::nn::Linear(3, width), torch::nn::BatchNorm1d(width), torch::nn::Tanh(),
                            torch::nn::Linear(width, 1));
  net[0]->named_parameters()["bias"].requires_grad_(false);
  return net;
}

std::vector<torch::Tensor> trainable(torch::nn::Sequential& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// The program's state beside the model: a data position (registered) and the generator (noise).
struct Loop {
  torch::nn::Sequential net;
  torch::optim::AdamW adamw;
  accel::PreparedOptimizer* opt = nullptr;
  int64_t position = 0;

  Loop(accel::Accelerator& acc, int64_t width = 8, int64_t seed = 0, bool register_position = true)
      : net(make_net(width, seed)), adamw(trainable(net), torch::optim::AdamWOptions(1e-2).weight_decay(0.1)) {
    opt = &acc.prepare(*net, adamw);
    if (register_position) acc.register_for_checkpointing("position", position);
  }
  void train(accel::Accelerator& acc, int steps) {
    for (int s = 0; s < steps; ++s) {
      torch::Tensor x = torch::linspace(-1, 1, 12).view({4, 3}) * double(1 + position) + torch::rand({4, 3});
      acc.backward(net->forward(x).pow(2).mean());
      opt->step();
      ++position;
    }
  }
  std::vector<torch::Tensor> state() {
    std::vector<torch::Tensor> out;
    for (auto& p : net->parameters()) out.push_back(p.detach().clone());
    for (auto& b : net->buffers()) out.push_back(b.detach().clone());
    out.push_back(torch::rand({4}));  // where the generator stands
    return out;
  }
};

void check_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    CAPTURE(k);
    CHECK(torch::equal(a[k], b[k]));
  }
}

const std::string kDdp = "backend: ddp";
const std::string kZero2 = "backend: deepspeed\ndeepspeed:\n  zero_stage: 2";
const std::string kZero1 = "backend: deepspeed\ndeepspeed:\n  zero_stage: 1";
const std::string kShardGradOp = "backend: fsdp\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP";

}  // namespace

TEST_CASE("save_state / load_state at world 1: a resume continues the run bit for bit, across backends",
          "[api][state]") {
  // At world 1 every backend applies the same kernels to the same numbers (test_accelerator.cpp:
  // bit for bit with libtorch's AdamW), so a resume under another backend is exact too.
  for (const auto& [saver, loader] : std::vector<std::pair<std::string, std::string>>{
           {kZero2, kDdp}, {kDdp, kZero2}, {kZero1, kShardGradOp}, {kShardGradOp, kShardGradOp}}) {
    CAPTURE(saver, loader);
    accel::test::TempDir dir;
    const std::string out = (dir.path() / "run").string();
    std::vector<torch::Tensor> uninterrupted;
    {
      accel::Accelerator acc(dir.write("ref.yaml", job_text(saver, (dir.path() / "ref").string())));
      Loop loop(acc);
      loop.train(acc, 5);
      uninterrupted = loop.state();
    }
    std::string saved;
    {
      accel::Accelerator acc(dir.write("a.yaml", job_text(saver, out)));
      Loop loop(acc);
      CHECK_FALSE(acc.load_state());  // nothing yet: a fresh start
      loop.train(acc, 2);
      acc.save_state();
      loop.train(acc, 1);
      saved = acc.save_state();
      loop.train(acc, 1);  // a step after the checkpoint: not in it
    }
    CHECK(saved == out + "/checkpoints/step_00000003");
    std::string latest;
    std::getline(std::ifstream(out + "/checkpoints/latest"), latest);
    CHECK(latest == "step_00000003");
    accel::Accelerator acc(dir.write("b.yaml", job_text(loader, out)));
    Loop loop(acc, 8, /*seed=*/99);  // other initial weights: the checkpoint's must win
    torch::manual_seed(12345);       // another generator state: the checkpoint's must win
    REQUIRE(acc.load_state());       // training.resume: auto -> latest
    CHECK(acc.step() == 3);
    CHECK(loop.position == 3);
    loop.train(acc, 2);
    check_equal(loop.state(), uninterrupted);
  }
}

TEST_CASE("load_state: an explicit checkpoint or root, training.resume never, nothing to load", "[api][state]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  const std::string root = (dir.path() / "mine").string();
  std::string step2;
  {
    accel::Accelerator acc(dir.write("a.yaml", job_text(kZero2, out)));
    Loop loop(acc);
    loop.train(acc, 2);
    step2 = acc.save_state(root);  // a root of the program's choosing
    CHECK(step2 == root + "/step_00000002");
    CHECK_FALSE(fs::exists(out + "/checkpoints"));
  }
  {
    accel::Accelerator acc(dir.write("b.yaml", job_text(kDdp, out, "  resume: never\n")));
    Loop loop(acc);
    CHECK_FALSE(acc.load_state());  // the job root has none, and resume: never looks nowhere
    CHECK(acc.step() == 0);
    CHECK(acc.load_state(root));  // a root: its latest
    CHECK(acc.step() == 2);
  }
  {
    accel::Accelerator acc(dir.write("c.yaml", job_text(kDdp, out, "  resume: " + step2 + "\n")));
    Loop loop(acc);
    CHECK(acc.load_state());  // training.resume names the checkpoint
    CHECK(loop.position == 2);
  }
  accel::Accelerator acc(dir.write("d.yaml", job_text(kDdp, out)));
  Loop loop(acc);
  CHECK_THROWS_WITH(acc.load_state((dir.path() / "nowhere").string()),
                    Contains("neither a checkpoint") && Contains("nowhere/manifest.json"));
}

TEST_CASE("save_state / load_state refusals name what, where and the fix", "[api][state]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  std::string saved;
  {
    accel::Accelerator acc(dir.write("a.yaml", job_text(kZero2, out, "  gradient_accumulation_steps: 2\n")));
    Loop loop(acc);
    acc.backward(loop.net->forward(torch::ones({4, 3})).sum());  // half an optimizer step
    CHECK_THROWS_WITH(acc.save_state(), Contains("save_state() during optimizer step 1 (1 of 2 micro-steps") &&
                                            Contains("right after the prepared optimizer's step()"));
    CHECK_THROWS_WITH(acc.load_state(), Contains("load_state() during optimizer step 1"));
    acc.backward(loop.net->forward(torch::ones({4, 3})).sum());
    loop.opt->step();
    saved = acc.save_state();
  }
  auto load_into = [&](int64_t width, bool register_position, const std::string& extra_object = "") {
    accel::Accelerator acc(dir.write("b.yaml", job_text(kDdp, out, "  gradient_accumulation_steps: 2\n")));
    Loop loop(acc, width, 0, register_position);
    int64_t other = 0;
    if (!extra_object.empty()) acc.register_for_checkpointing(extra_object, other);
    try {
      acc.load_state();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(load_into(8, true) == "no error");
  const std::string wider = load_into(6, true);
  CHECK_THAT(wider, Contains("does not fit the prepared module") &&
                        Contains("'0.weight' is [8, 3] there and [6, 3] here") &&
                        Contains("buffers/frozen: '0.bias' is [8] there and [6] here") && Contains(saved));
  CHECK_THAT(load_into(8, false), Contains("'position' is in the checkpoint but not registered"));
  CHECK_THAT(load_into(8, true, "epoch"), Contains("'epoch' is registered but not in the checkpoint"));
  {
    accel::Accelerator acc(dir.write("c.yaml", job_text(kDdp, out)));
    int64_t value = 0;
    acc.register_for_checkpointing("position", value);
    CHECK_THROWS_WITH(acc.register_for_checkpointing("position", value), Contains("registered already"));
    CHECK_THROWS_WITH(acc.register_for_checkpointing("a/b", value), Contains("without '/'"));
    CHECK_THROWS_WITH(acc.save_state(), Contains("save_state() before prepare"));
    Loop loop(acc, 8, 0, /*register_position=*/false);
    acc.register_for_checkpointing(
        "complex", [] { return std::vector<torch::Tensor>{torch::zeros({2}, torch::kComplexFloat)}; },
        [](const std::vector<torch::Tensor>&) {});
    CHECK_THROWS_WITH(acc.save_state(), Contains("object 'complex' returned a ComplexFloat tensor (#0)"));
    CHECK_FALSE(fs::exists(out + "/checkpoints/step_00000000"));
  }
  // A damaged file: the manifest's hash names it, before anything is read.
  {
    std::fstream f(saved + "/zero_rank_00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  CHECK_THAT(load_into(8, true), Contains(saved + "/zero_rank_00000.safetensors is corrupted"));
}

TEST_CASE("log() after load_state keeps the records of the restored steps and replaces the rest", "[api][state]") {
  accel::test::TempDir dir;
  const std::string out = (dir.path() / "run").string();
  {
    accel::Accelerator acc(dir.write("a.yaml", job_text(kDdp, out)));
    Loop loop(acc);
    for (int s = 1; s <= 3; ++s) {
      acc.log(s, {{"loss", double(s)}});
      loop.train(acc, 1);
      if (s == 2) acc.save_state();
    }
  }
  accel::Accelerator acc(dir.write("b.yaml", job_text(kDdp, out)));
  Loop loop(acc);
  REQUIRE(acc.load_state());
  acc.log(acc.step() + 1, {{"loss", 30.0}});
  std::ifstream in(out + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  CHECK(lines == std::vector<std::string>{"{\"step\": 1, \"loss\": 1}", "{\"step\": 2, \"loss\": 2}",
                                          "{\"step\": 3, \"loss\": 30}"});
}

TEST_CASE("load_state: a checkpoint of another optimizer kind is refused, naming both", "[api][state]") {
  for (const auto& [saver, loader] : std::vector<std::pair<std::string, std::string>>{
           {kZero2, kZero2}, {kZero2, kDdp}, {kDdp, kDdp}, {kDdp, kZero1}}) {
    CAPTURE(saver, loader);
    accel::test::TempDir dir;
    const std::string out = (dir.path() / "run").string();
    {
      accel::Accelerator acc(dir.write("a.yaml", job_text(saver, out)));
      auto net = make_net();
      torch::optim::SGD sgd(trainable(net), torch::optim::SGDOptions(1e-2).momentum(0.9));
      auto& opt = acc.prepare(*net, sgd);
      acc.backward(net->forward(torch::ones({4, 3})).pow(2).mean());
      opt.step();
      acc.save_state();
    }
    accel::Accelerator acc(dir.write("b.yaml", job_text(loader, out)));
    Loop loop(acc, 8, 0, /*register_position=*/false);
    CHECK_THROWS_WITH(acc.load_state(), Contains("holds optimizer state {momentum} (sgd with momentum) but the "
                                                  "prepared optimizer keeps {exp_avg, exp_avg_sq} (adamw)"));
  }
}
