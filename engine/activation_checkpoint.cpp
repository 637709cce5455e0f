// Activation checkpointing (see activation_checkpoint.hpp).
#include "engine/activation_checkpoint.hpp"

#include <mutex>
#include <optional>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace accel::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generator x's device draws from (CPU, or the current CUDA device); none for other devices.
std::optional<at::Generator> generator_of(const at::Device& device) {
  if (!device.is_cpu() && !device.is_cuda()) return std::nullopt;
  return at::globalContext().defaultGenerator(device);
}

at::Tensor read_state(at::Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void write_state(at::Generator& gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Puts the generator back in the state the first run started from, and, when destroyed (also by
// an exception), back where it was: the recompute replays draws without consuming any.
class ReplayRandomState {
 public:
  ReplayRandomState(std::optional<at::Generator> gen, const at::Tensor& replayed) : gen_(std::move(gen)) {
    if (!gen_ || !replayed.defined()) return;
    resume_ = read_state(*gen_);
    write_state(*gen_, replayed);
  }
  ~ReplayRandomState() {
    if (resume_.defined()) write_state(*gen_, resume_);
  }
  ReplayRandomState(const ReplayRandomState&) = delete;
  ReplayRandomState& operator=(const ReplayRandomState&) = delete;

 private:
  std::optional<at::Generator> gen_;
  at::Tensor resume_;
};

// What the backward needs besides x: autograd's saved_data holds IValues, so the body travels in a
// capsule owned by the graph node (freed with it).
struct Recompute : torch::CustomClassHolder {
  UnitBody body;
  at::Tensor random_state;  // the generator's state when the first run started
};

struct RecomputeInBackward : torch::autograd::Function<RecomputeInBackward> {
  // Function::apply runs this with grad mode off: body records no graph, and only x is saved.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, UnitBody body) {
    auto recompute = c10::make_intrusive<Recompute>();
    recompute->body = std::move(body);
    if (auto gen = generator_of(x.device())) recompute->random_state = read_state(*gen);
    at::Tensor y = recompute->body(x);
    ctx->save_for_backward({x});
    ctx->saved_data["recompute"] = at::IValue::make_capsule(std::move(recompute));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    // A leaf sharing x's storage: the replayed graph starts here and ends at its gradient.
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      ReplayRandomState replay(generator_of(x.device()), recompute->random_state);
      at::AutoGradMode grad_on(true);  // the engine runs backward functions with grad mode off
      y = recompute->body(x);
    }
    if (!y.requires_grad()) return {at::Tensor(), at::Tensor()};
    // A nested backward over the replayed graph only: its parameters' AccumulateGrad adds into their
    // .grad in place (grad mode is off inside, as in the outer backward), x gets its gradient.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recompute_in_backward(UnitBody body, const at::Tensor& x) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return body(x);
  return RecomputeInBackward::apply(x, std::move(body));
}

}  // namespace accel::engine
