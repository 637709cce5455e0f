// accel::Unit<M>: a unit boundary the user puts around a block, so that
// strategies which free parameters between uses (deepspeed zero_stage 3, fsdp FULL_SHARD and
// HYBRID_SHARD) can run the user's own module:
//
//   struct NetImpl : torch::nn::Module {
//     NetImpl() { for (int i = 0; i < 4; ++i) h->push_back(blocks.emplace_back(64)); register_module("h", h); }
//     torch::Tensor forward(torch::Tensor x) { for (auto& b : blocks) x = b(x); return x; }
//     torch::nn::ModuleList h;
//     std::vector<accel::Unit<Block>> blocks;   // was std::vector<Block>
//   };
//
// Unit<Block> holds a UnitImpl<BlockImpl>, which *is* a BlockImpl (it derives from it): the block's
// members, parameter names (h.0.fc.weight) and train()/to() behave as before; only its forward
// becomes the boundary. Calling it (b(x) or b->forward(x)) passes the first tensor argument through
// the engine's pre-forward hook (gather the unit's parameters), runs BlockImpl::forward with every
// argument, and passes each output tensor through the post-forward hook (release; re-gather before
// its backward). Outside a prepared model, and under ddp and zero stages 0-2 (parameters stay
// gathered), no hook is attached and the call costs one pointer test.
// Rules under stage 3 / FULL_SHARD: a unit's parameters are read only inside its forward (not by
// code outside it: register such a parameter outside the unit too and accel keeps it in the root);
// only the first tensor argument may require grad; the output is a tensor or a std::tuple.
// fsdp.activation_checkpointing: each wrapper keeps only its first tensor argument and recomputes
// its forward in backward (the other arguments are kept as copies); the output must be a tensor.
// Only torch and the standard library are included here.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace accel {
namespace detail {

class UnitSink;  // the prepared model's engine, as the library sees it (api/unit_sink.hpp)

// The non-template part of every UnitImpl: where its boundary goes. Set by Accelerator::prepare
// only when the strategy frees parameters between uses; empty otherwise.
class UnitTag {
 public:
  virtual ~UnitTag() = default;
  bool hooked() const noexcept { return sink_ != nullptr; }

 private:
  friend struct UnitAccess;
  std::shared_ptr<UnitSink> sink_;
};

// Entry points into the library (accel_api); `unit` is the UnitImpl. They throw std::runtime_error
// naming the unit for what stage 3 cannot run (see the rules above).
at::Tensor unit_pre_forward(UnitTag& tag, torch::nn::Module& unit, at::Tensor x, bool other_inputs_need_grad);
at::Tensor unit_post_forward(UnitTag& tag, torch::nn::Module& unit, at::Tensor y);
// Activation checkpointing (fsdp.activation_checkpointing): whether the unit recomputes its forward
// in backward, and the recompute itself (body(x) now without a graph, again in backward).
bool unit_recomputes(UnitTag& tag);
at::Tensor unit_recompute(std::function<at::Tensor(const at::Tensor&)> body, const at::Tensor& x);
[[noreturn]] void unit_output_unsupported(torch::nn::Module& unit);
// Called right after a wrapper's module is constructed: inside an accel::ShardedInit scope on this
// thread the library keeps this rank's slice of its parameters (sharded_init.hpp); otherwise nothing.
void unit_constructed(torch::nn::Module& unit);

// A member of every UnitImpl, so constructed after the wrapped module (its bases) is complete.
struct ConstructionNotice {
  explicit ConstructionNotice(torch::nn::Module& unit) { unit_constructed(unit); }
};

template <class T>
inline constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, at::Tensor>;

// std::tuple, std::pair, std::array (C++17: the public headers are C++17-clean).
template <class T, class = void>
struct is_tuple_like : std::false_type {};
template <class T>
struct is_tuple_like<T, std::void_t<decltype(std::tuple_size<T>::value)>> : std::true_type {};

// Index of the first argument that is a tensor (sizeof...(A) if none).
template <class... A>
constexpr size_t first_tensor_index() {
  size_t index = 0, found = sizeof...(A);
  ((found = (found == sizeof...(A) && is_tensor_v<A>) ? index : found, ++index), ...);
  return found;
}

template <bool Replace, class T>
decltype(auto) pick(at::Tensor& replacement, T&& arg) {
  if constexpr (Replace) return (replacement);
  else return std::forward<T>(arg);
}

template <class T>
bool needs_grad(const T& arg) {
  if constexpr (is_tensor_v<T>) return arg.defined() && arg.requires_grad();
  else return false;
}

template <class T>
void post_element(UnitTag& tag, torch::nn::Module& unit, T& element) {
  if constexpr (is_tensor_v<T>) element = unit_post_forward(tag, unit, element);
}

template <class R>
R post(UnitTag& tag, torch::nn::Module& unit, R&& out) {
  if constexpr (is_tensor_v<R>) {
    return unit_post_forward(tag, unit, std::forward<R>(out));
  } else if constexpr (is_tuple_like<std::decay_t<R>>::value) {
    std::decay_t<R> result(std::forward<R>(out));
    std::apply([&](auto&... element) { (post_element(tag, unit, element), ...); }, result);
    return result;
  } else {
    unit_output_unsupported(unit);
  }
}

// self.Impl::forward(args...) with argument K replaced by x.
template <class Impl, size_t K, class Self, class... A, size_t... I>
decltype(auto) call_replacing(Self& self, at::Tensor& x, std::index_sequence<I...>, A&&... args) {
  return self.Impl::forward(pick<I == K>(x, std::forward<A>(args))...);
}

// The boundary around one call of `impl.Impl::forward(args...)`.
template <class Impl, class Self, class... A, size_t... I>
decltype(auto) run_unit(Self& self, std::index_sequence<I...> indices, A&&... args) {
  constexpr size_t k = first_tensor_index<A...>();
  auto call = [&](auto&&... a) -> decltype(auto) { return self.Impl::forward(std::forward<decltype(a)>(a)...); };
  if (!self.hooked()) return call(std::forward<A>(args)...);  // no strategy needs the boundary
  using Result = decltype(call(std::forward<A>(args)...));
  if constexpr (k == sizeof...(A)) {
    (void)sizeof(Result);
    unit_output_unsupported(self);  // no tensor argument to hook: refused with the module's name
  } else {
    bool others = false;
    size_t index = 0;
    ((others = others || (index++ != k && needs_grad(args))), ...);
    at::Tensor x = unit_pre_forward(self, self, std::get<k>(std::forward_as_tuple(args...)), others);
    if constexpr (is_tensor_v<Result>) {
      if (unit_recomputes(self)) {
        // The graph keeps copies of the other arguments until the recompute in backward.
        std::function<at::Tensor(const at::Tensor&)> body =
            [&self, saved = std::make_tuple(std::decay_t<A>(args)...)](const at::Tensor& again) mutable -> at::Tensor {
          at::Tensor in = again;
          return std::apply([&](auto&... a) -> at::Tensor {
            return call_replacing<Impl, k>(self, in, std::index_sequence_for<A...>{}, a...);
          }, saved);
        };
        return post<Result>(self, self, unit_recompute(std::move(body), x));
      }
    }
    Result out = call_replacing<Impl, k>(self, x, indices, std::forward<A>(args)...);
    return post<Result>(self, self, std::move(out));
  }
}

// The type of Impl's forward when it is one non-template function (so UnitImpl can offer one too,
// which torch::nn::Sequential and AnyModule need); void when it is overloaded or a template.
template <class Impl, class = void>
struct forward_of {
  using type = void;
};
template <class Impl>
struct forward_of<Impl, std::void_t<decltype(&Impl::forward)>> {
  using type = decltype(&Impl::forward);
};

template <class M, class = void>
struct impl_of {
  using type = M;  // M is the module class itself
};
template <class M>
struct impl_of<M, std::void_t<typename M::ContainedType>> {
  using type = typename M::ContainedType;  // M is a holder (TORCH_MODULE)
};

}  // namespace detail

// The module behind Unit<M>: Impl with its forward as the unit boundary. For an Impl whose
// forward is one function, forward has the same signature; otherwise it is a template.
template <class Impl, class Forward = typename detail::forward_of<Impl>::type>
class UnitImpl : public Impl, public detail::UnitTag {
 public:
  using Impl::Impl;
  template <class... A>
  decltype(auto) forward(A&&... args) {
    return detail::run_unit<Impl>(*this, std::index_sequence_for<A...>{}, std::forward<A>(args)...);
  }

 private:
  detail::ConstructionNotice constructed_{*this};
};

template <class Impl, class R, class C, class... P>
class UnitImpl<Impl, R (C::*)(P...)> : public Impl, public detail::UnitTag {
 public:
  using Impl::Impl;
  R forward(P... args) { return detail::run_unit<Impl>(*this, std::index_sequence_for<P...>{}, std::forward<P>(args)...); }

 private:
  detail::ConstructionNotice constructed_{*this};
};

template <class Impl, class R, class C, class... P>
class UnitImpl<Impl, R (C::*)(P...) const> : public Impl, public detail::UnitTag {
 public:
  using Impl::Impl;
  R forward(P... args) { return detail::run_unit<Impl>(*this, std::index_sequence_for<P...>{}, std::forward<P>(args)...); }

 private:
  detail::ConstructionNotice constructed_{*this};
};

// The holder: Unit<Block> (a TORCH_MODULE holder) or Unit<BlockImpl>. Constructed with Block's
// constructor arguments, or nullptr for the empty state, like any holder.
template <class M>
class Unit : public torch::nn::ModuleHolder<UnitImpl<typename detail::impl_of<M>::type>> {
  using Base = torch::nn::ModuleHolder<UnitImpl<typename detail::impl_of<M>::type>>;

 public:
  using Base::Base;
  // The unit boundary (ModuleHolder's own operator() cannot see a template forward).
  template <class... A>
  decltype(auto) operator()(A&&... args) {
    return this->get()->forward(std::forward<A>(args)...);
  }
};

}  // namespace accel
