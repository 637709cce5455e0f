// A Llama-style decoder trained on a token file, as a user would write it in libtorch: RMSNorm,
// rotary position embeddings, SwiGLU feed-forward, an output layer tied to the token embedding, a
// warm-up + cosine learning rate set on the optimizer's param groups, and save_state/load_state.
// The decoder layers are accel::Unit<> wrappers, so every strategy runs it (ZeRO-3 and FSDP
// FULL_SHARD free a layer's parameters between uses); the embedding and the final norm form the
// root. Lines marked "accel:" are the additions to a plain libtorch program (examples/README.md).
//
//   accel_example_llama TOKENS [--save-every K] [--stop-after K]
// TOKENS: an llm.c token file (a 256 x int32 header with magic 20240520, then uint16 tokens), with
// tokens below 256 (make_tokens.py writes one from text, a byte per token).
#include <accel/accel.hpp>  // accel:
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "token_file.hpp"

namespace {

constexpr int64_t kVocab = 256, kLayers = 4, kWidth = 128, kHeads = 4, kHidden = 352, kSeq = 64;

torch::Tensor read_token_file(const std::string& path) {
  std::vector<uint16_t> tokens = read_llm_c_tokens(path);
  torch::Tensor t = torch::from_blob(tokens.data(), {int64_t(tokens.size())}, torch::kUInt16).to(torch::kInt64);
  if (t.numel() <= kSeq + 1 || t.max().item<int64_t>() >= kVocab)
    throw std::runtime_error(path + ": needs more than " + std::to_string(kSeq + 1) + " tokens, each below " +
                             std::to_string(kVocab));
  return t;
}

// Row i: the window of kSeq tokens at offset i * kSeq (wrapping around the file) and its successors.
struct Windows : torch::data::datasets::Dataset<Windows> {
  torch::Tensor tokens;
  int64_t rows;
  Windows(torch::Tensor t, int64_t n) : tokens(std::move(t)), rows(n) {}
  torch::data::Example<> get(size_t i) override {
    const int64_t start = int64_t(i) * kSeq % (tokens.numel() - kSeq - 1);
    return {tokens.slice(0, start, start + kSeq), tokens.slice(0, start + 1, start + kSeq + 1)};
  }
  std::optional<size_t> size() const override { return size_t(rows); }
};

struct RMSNormImpl : torch::nn::Module {
  explicit RMSNormImpl(int64_t c) : weight(register_parameter("weight", torch::ones({c}))) {}
  torch::Tensor forward(const torch::Tensor& x) {  // in fp32 whatever the compute dtype, as Llama's
    torch::Tensor f = x.to(torch::kFloat);
    return (f * torch::rsqrt(f.pow(2).mean(-1, true) + 1e-5)).to(x.scalar_type()) * weight;
  }
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// Rotates the two halves of each head's channels by position-dependent angles.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor a = x.slice(-1, 0, half), b = x.slice(-1, half), c = cos.to(x.device(), x.scalar_type()),
                s = sin.to(x.device(), x.scalar_type());
  return torch::cat({a * c - b * s, a * s + b * c}, -1);
}

torch::nn::Linear linear(int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); }

// Each module draws its own initial values in its constructor: under accel::ShardedInit a block is
// cut to this rank's slice as soon as it is built, so nothing may write its parameters afterwards.
void init_normal(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters())
    if (p.key().find("norm") == std::string::npos) torch::nn::init::normal_(p.value(), 0.0, 0.02);
}

struct BlockImpl : torch::nn::Module {
  BlockImpl() { init_normal(*this); }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin) {
    const int64_t B = x.size(0), T = x.size(1), D = kWidth / kHeads;
    torch::Tensor h = attention_norm(x);
    auto heads = [&](torch::nn::Linear& w) { return w(h).view({B, T, kHeads, D}).transpose(1, 2); };
    torch::Tensor q = rotate(heads(wq), cos, sin), k = rotate(heads(wk), cos, sin), v = heads(wv);
    torch::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    x = x + wo(y.transpose(1, 2).reshape({B, T, kWidth}));
    torch::Tensor m = ffn_norm(x);
    return x + w_down(torch::silu(w_gate(m)) * w_up(m));
  }
  RMSNorm attention_norm = register_module("attention_norm", RMSNorm(kWidth));
  torch::nn::Linear wq = register_module("wq", linear(kWidth, kWidth));
  torch::nn::Linear wk = register_module("wk", linear(kWidth, kWidth));
  torch::nn::Linear wv = register_module("wv", linear(kWidth, kWidth));
  torch::nn::Linear wo = register_module("wo", linear(kWidth, kWidth));
  RMSNorm ffn_norm = register_module("ffn_norm", RMSNorm(kWidth));
  torch::nn::Linear w_gate = register_module("w_gate", linear(kWidth, kHidden));  // SwiGLU: silu(gate) * up
  torch::nn::Linear w_up = register_module("w_up", linear(kWidth, kHidden));
  torch::nn::Linear w_down = register_module("w_down", linear(kHidden, kWidth));
};
TORCH_MODULE(Block);

// The output layer: logits from the token embedding's own tensor, registered here as output.weight
// too (tied, as Hugging Face's tie_word_embeddings).
struct TiedOutputImpl : torch::nn::Module {
  explicit TiedOutputImpl(const torch::Tensor& embedding) : weight(register_parameter("weight", embedding)) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedOutput);

struct LlamaImpl : torch::nn::Module {
  LlamaImpl() {
    tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(kVocab, kWidth));
    init_normal(*tok_embeddings);
    for (int64_t i = 0; i < kLayers; ++i) layers->push_back(blocks.emplace_back());  // layers.0.wq.weight, ...
    register_module("layers", layers);
    norm = register_module("norm", RMSNorm(kWidth));
    output = register_module("output", TiedOutput(tok_embeddings->weight));  // one tensor, two names
    // Rotary angles per (position, channel pair): plain tensors, not buffers (nothing to save).
    const int64_t half = kWidth / kHeads / 2;
    torch::Tensor freq = torch::pow(10000.0, -torch::arange(half, torch::kFloat) / half);
    torch::Tensor angle = torch::outer(torch::arange(kSeq, torch::kFloat), freq);
    cos = angle.cos();
    sin = angle.sin();
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = tok_embeddings(idx);
    for (auto& layer : blocks) x = layer(x, cos, sin);  // accel: each call is a unit boundary
    return output(norm(x));
  }
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  std::vector<accel::Unit<Block>> blocks;  // accel: was std::vector<Block>
  RMSNorm norm{nullptr};
  TiedOutput output{nullptr};
  torch::Tensor cos, sin;
};
TORCH_MODULE(Llama);

double learning_rate(int64_t step, int64_t steps) {  // linear warm-up, then cosine to a tenth
  const double peak = 3e-3, warmup = std::max<int64_t>(1, steps / 10);
  if (step < warmup) return peak * double(step + 1) / warmup;
  return peak * (0.1 + 0.45 * (1 + std::cos(M_PI * double(step - warmup) / double(std::max<int64_t>(1, steps - warmup)))));
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) throw std::runtime_error("usage: accel_example_llama TOKENS [--save-every K] [--stop-after K]");
  int64_t save_every = 0, stop_after = -1;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--save-every") && i + 1 < argc) save_every = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--stop-after") && i + 1 < argc) stop_after = std::atoll(argv[++i]);
    else throw std::runtime_error(std::string("unknown argument ") + argv[i]);
  }
  accel::Accelerator acc;                           // accel: the job and the world
  const accel::TrainingConfig& t = acc.training();  // accel: training.* from the job
  torch::manual_seed(int64_t(t.seed));
  Llama model{nullptr};
  {
    accel::ShardedInit sharded(acc);  // accel: under zero 3 / FULL_SHARD each layer keeps only this rank's slice
    model = Llama();
  }

  // Weight decay on the matrices only; the embedding (tied to the output) and the norms keep theirs.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->named_parameters()) {
    if (p.key() == "output.weight") continue;  // the tied embedding, listed once
    (p.value().dim() == 2 && p.key() != "tok_embeddings.weight" ? decay : no_decay).push_back(p.value());
  }
  torch::optim::AdamW adamw({torch::optim::OptimizerParamGroup(decay, std::make_unique<torch::optim::AdamWOptions>(
                                                                          torch::optim::AdamWOptions(3e-3).weight_decay(0.1))),
                             torch::optim::OptimizerParamGroup(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                                                             torch::optim::AdamWOptions(3e-3).weight_decay(0.0)))});
  accel::PreparedOptimizer& opt = acc.prepare(*model, adamw);  // accel: shard, hook gradients and units

  int64_t position = 0;                                 // micro-batches consumed, over all ranks alike
  acc.register_for_checkpointing("position", position); // accel: saved and restored with the state
  acc.load_state();                                     // accel: training.resume (auto, never, a directory)

  const int64_t rows = int64_t(t.max_steps) * t.gradient_accumulation_steps * acc.world_size() * t.micro_batch_size;
  auto loader = torch::data::make_data_loader(
      Windows(read_token_file(argv[1]), rows).map(torch::data::transforms::Stack<>()),
      acc.sampler(size_t(rows)), size_t(t.micro_batch_size));  // accel: sampler
  int64_t seen = 0;
  double loss_sum = 0;
  for (auto& batch : *loader) {
    if (seen++ < position) continue;  // consumed before the resume
    for (auto& group : adamw.param_groups()) group.options().set_lr(learning_rate(acc.step(), t.max_steps));
    torch::Tensor logits = model->forward(batch.data.to(acc.device()));  // accel: this rank's device
    torch::Tensor loss =
        torch::cross_entropy_loss(logits.view({-1, kVocab}).to(torch::kFloat), batch.target.to(acc.device()).view(-1));
    acc.backward(loss);  // accel: was loss.backward()
    ++position;
    loss_sum += loss.item<double>();
    const bool boundary = acc.sync_gradients();  // accel: an optimizer step follows
    double mean = 0;
    if (boundary) {
      double norm = acc.clip_grad_norm(1.0);     // accel: global norm, over the shards
      mean = acc.reduce_mean(loss_sum / t.gradient_accumulation_steps);
      acc.log(acc.step() + 1, {{"loss", mean}, {"grad_norm", norm}, {"lr", learning_rate(acc.step(), t.max_steps)}});
      loss_sum = 0;
    }
    opt.step();  // applies at accumulation boundaries only
    // accel: the trainer's progress line; rank 0 prints it every training.log_every steps
    if (boundary) acc.print_progress(mean, batch.data.numel() * t.gradient_accumulation_steps);
    if (!opt.step_was_applied()) continue;
    if (save_every > 0 && acc.step() % save_every == 0) acc.save_state();  // accel: a checkpoint
    if (acc.step() == stop_after) {
      acc.save_state();
      return 0;
    }
  }
  if (acc.is_main_process()) {  // accel: what this rank holds, to set beside `accel estimate-memory`
    const std::map<std::string, int64_t> held = acc.memory_report();
    int64_t total = 0;
    std::string parts;
    for (const char* part : {"params", "param_shards", "grads", "grad_shard", "master", "optimizer_states",
                             "live_params_peak", "live_grads_peak"})
      if (auto it = held.find(part); it != held.end() && it->second > 0) {
        total += it->second;
        parts += std::string(parts.empty() ? "" : ", ") + part + " " + std::to_string(it->second);
      }
    std::cout << "model-state bytes on rank 0: " << total << " (" << parts << ")\n";
  }
  acc.save_model(t.output_dir + "/model.safetensors");  // accel: full weights, your names
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
