// Argument checks shared by the communicators: messages name the op, the rank and the expectation.
// Invariant: no check touches tensor data; each either returns or throws CommError.
#include "runtime/comm/op_checks.hpp"

#include <sstream>

#include "runtime/comm/communicator.hpp"

namespace accel::comm {

std::string rank_of_world(int rank, int world) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world);
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

bool is_supported_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong: return true;
    default: return false;
  }
}

std::string exception_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

void throw_op_error(const char* op, int rank, int world, const std::string& detail) {
  throw CommError(std::string(op) + " on " + rank_of_world(rank, world) + ": " + detail);
}

void check_tensor(const char* op, const char* role, const at::Tensor& tensor, int rank, int world,
                  at::Device device) {
  const std::string name(role);
  if (!tensor.defined()) throw_op_error(op, rank, world, name + " is an undefined tensor");
  if (tensor.layout() != at::kStrided) {
    throw_op_error(op, rank, world, name + " is not a dense (strided) tensor");
  }
  if (tensor.device() != device) {
    throw_op_error(op, rank, world,
                   name + " is on " + tensor.device().str() + "; this communicator needs tensors on " +
                       device.str() + " (move it there with .to())");
  }
  if (!is_supported_dtype(tensor.scalar_type())) {
    throw_op_error(op, rank, world,
                   name + " has dtype " + dtype_name(tensor.scalar_type()) +
                       ", which is not supported (supported: float32, float64, bfloat16, float16, "
                       "int32, int64)");
  }
  if (!tensor.is_contiguous()) {
    throw_op_error(op, rank, world, name + " is not contiguous; pass tensor.contiguous()");
  }
}

void check_numel(const char* op, const char* role, const at::Tensor& tensor, int64_t expected,
                 const std::string& why, int rank, int world) {
  if (tensor.numel() == expected) return;
  std::ostringstream msg;
  msg << role << " has " << tensor.numel() << " elements, expected " << expected;
  if (!why.empty()) msg << " (" << why << ")";
  throw_op_error(op, rank, world, msg.str());
}

void check_same_dtype(const char* op, const at::Tensor& input, const at::Tensor& output, int rank,
                      int world) {
  if (input.scalar_type() == output.scalar_type()) return;
  throw_op_error(op, rank, world,
                 "input dtype " + dtype_name(input.scalar_type()) + " differs from output dtype " +
                     dtype_name(output.scalar_type()) + "; collectives do not convert");
}

void check_root(const char* op, int root, int rank, int world) {
  if (root >= 0 && root < world) return;
  throw_op_error(op, rank, world,
                 "root " + std::to_string(root) + " is out of range [0, " + std::to_string(world) + ")");
}

namespace {

std::string shard_why(int64_t numel, int world, int rank, const char* whole) {
  return "shard_range(" + std::to_string(numel) + ", " + std::to_string(world) + ", " + std::to_string(rank) +
         ") of the " + std::to_string(numel) + "-element " + whole;
}

}  // namespace

void check_all_reduce_args(const at::Tensor& tensor, int rank, int world, at::Device device) {
  check_tensor("all_reduce", "tensor", tensor, rank, world, device);
}

ShardRange check_reduce_scatter_args(const at::Tensor& input, const at::Tensor& output, int rank, int world,
                                     at::Device device) {
  constexpr const char* kOp = "reduce_scatter";
  check_tensor(kOp, "input", input, rank, world, device);
  check_tensor(kOp, "output", output, rank, world, device);
  check_same_dtype(kOp, input, output, rank, world);
  const ShardRange shard = shard_range(input.numel(), world, rank);
  check_numel(kOp, "output", output, shard.size(), shard_why(input.numel(), world, rank, "input"), rank, world);
  return shard;
}

ShardRange check_all_gather_args(const at::Tensor& input, const at::Tensor& output, int rank, int world,
                                 at::Device device) {
  constexpr const char* kOp = "all_gather";
  check_tensor(kOp, "input", input, rank, world, device);
  check_tensor(kOp, "output", output, rank, world, device);
  check_same_dtype(kOp, input, output, rank, world);
  const ShardRange shard = shard_range(output.numel(), world, rank);
  check_numel(kOp, "input", input, shard.size(), shard_why(output.numel(), world, rank, "output"), rank, world);
  return shard;
}

void check_broadcast_args(const at::Tensor& tensor, int root, int rank, int world, at::Device device) {
  check_tensor("broadcast", "tensor", tensor, rank, world, device);
  check_root("broadcast", root, rank, world);
}

}  // namespace accel::comm
