// Argument checks shared by every Communicator implementation, run on the issuing thread before an
// op is counted or queued. Invariant: a check either passes or throws CommError whose message starts
// with "<op> on rank r of w:" and says what was expected, so a bad call never reaches the wire.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "runtime/comm/shard_layout.hpp"

namespace accel::comm {

// "rank 1 of 4": the position every message names.
std::string rank_of_world(int rank, int world);

// Lower-case dtype names as users write them: "float32", "bfloat16", "int64", ...
std::string dtype_name(at::ScalarType type);
// float32, float64, bfloat16, float16, int32, int64.
bool is_supported_dtype(at::ScalarType type);

// Throws CommError("<op> on rank r of w: <detail>").
[[noreturn]] void throw_op_error(const char* op, int rank, int world, const std::string& detail);

// `tensor` must be defined, dense, contiguous, on `device` (the communicator's) and of a supported
// dtype. `role` names it in messages ("tensor", "input", "output").
void check_tensor(const char* op, const char* role, const at::Tensor& tensor, int rank, int world,
                  at::Device device = at::kCPU);

// `tensor` must hold exactly `expected` elements; `why` explains where `expected` comes from.
void check_numel(const char* op, const char* role, const at::Tensor& tensor, int64_t expected,
                 const std::string& why, int rank, int world);

// `input` and `output` must share a dtype (collectives never convert).
void check_same_dtype(const char* op, const at::Tensor& input, const at::Tensor& output, int rank,
                      int world);

// 0 <= root < world.
void check_root(const char* op, int root, int rank, int world);

// Whole-op checks, identical for every implementation. The reduce_scatter / all_gather checks
// return this rank's shard of the full buffer (shard_range over the full numel).
void check_all_reduce_args(const at::Tensor& tensor, int rank, int world,
                    at::Device device = at::kCPU);
ShardRange check_reduce_scatter_args(const at::Tensor& input, const at::Tensor& output, int rank, int world,
                    at::Device device = at::kCPU);
ShardRange check_all_gather_args(const at::Tensor& input, const at::Tensor& output, int rank, int world,
                    at::Device device = at::kCPU);
void check_broadcast_args(const at::Tensor& tensor, int root, int rank, int world,
                    at::Device device = at::kCPU);

// torch's message for `e` without the C++ frames a c10::Error may append.
std::string exception_text(const std::exception& e);

// Payload size in bytes, as recorded in CommStats.
inline int64_t tensor_bytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace accel::comm
