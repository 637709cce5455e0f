// Helpers for communicator tests: run one body per rank on its own thread, and compare tensors with
// closed-form expectations. Catch2 v2 assertions are not thread-safe, so rank bodies report
// problems by throwing; run_ranks() returns each rank's error text for the main thread to assert.
#pragma once

#include <ATen/ATen.h>

#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace accel::test {

using MakeCommunicator = std::function<std::unique_ptr<comm::Communicator>(int rank)>;
using RankBody = std::function<void(comm::Communicator&)>;

// Runs `body` for every rank on its own thread, each with the communicator `make(rank)` builds on
// that thread (Gloo's rendezvous needs all ranks connecting at once). Returns one entry per rank:
// "" when the rank succeeded, otherwise its exception text.
inline std::vector<std::string> run_ranks(int world, const MakeCommunicator& make, const RankBody& body) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = make(r);
        body(*comm);
      } catch (const std::exception& e) {
        errors[r] = std::string("rank ") + std::to_string(r) + ": " + e.what();
      } catch (...) {
        errors[r] = "rank " + std::to_string(r) + ": unknown exception";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Creates every rank's communicator concurrently (on its own thread) and hands them all back, so
// the main thread can drive them; ops are asynchronous, so one thread can issue for every rank.
inline std::vector<std::unique_ptr<comm::Communicator>> make_all(int world, const MakeCommunicator& make) {
  std::vector<std::unique_ptr<comm::Communicator>> comms(static_cast<size_t>(world));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[r] = make(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("make_all: " + e);
  }
  return comms;
}

inline std::vector<std::string> no_errors(int world) { return std::vector<std::string>(static_cast<size_t>(world)); }

[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error(what); }

// Compares `got` with `want` (float64 values) element by element: exact when `rtol` is 0,
// otherwise |got - want| <= rtol * |want|. Throws naming `what` and the first bad element.
inline void expect_values(const at::Tensor& got, const std::vector<double>& want, double rtol, const std::string& what) {
  if (got.numel() != static_cast<int64_t>(want.size())) {
    fail(what + ": got " + std::to_string(got.numel()) + " elements, want " + std::to_string(want.size()));
  }
  const at::Tensor g = got.reshape(-1).to(at::kDouble).cpu().contiguous();  // from any device
  const double* p = g.data_ptr<double>();
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(p[i] - want[i]);
    const bool ok = rtol == 0.0 ? p[i] == want[i] : diff <= rtol * std::abs(want[i]);
    if (!ok) {
      std::ostringstream msg;
      msg << what << ": element " << i << " is " << p[i] << ", want " << want[i];
      if (rtol != 0.0) msg << " (rtol " << rtol << ")";
      fail(msg.str());
    }
  }
}

// Values rounded through `type` (how a closed-form value looks once stored in that dtype).
inline std::vector<double> rounded_to(const std::vector<double>& values, at::ScalarType type) {
  if (values.empty()) return {};
  at::Tensor t = at::tensor(values, at::kDouble).to(type).to(at::kDouble);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

inline std::string dtype_label(at::ScalarType type) { return c10::toString(type); }

}  // namespace accel::test
