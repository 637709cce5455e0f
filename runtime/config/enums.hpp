// The enumerated values of the job file, with their YAML spellings. One table per enum is the only
// place a spelling lives: parsing, allowed-value lists in errors, dumps and the questionnaire use it.
// `backend:` is not one of them: its values are the registered dialects (backend_name.hpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config/backend_name.hpp"

namespace accel::config {

enum class Device { auto_, cpu, cuda };
enum class CudaCollectives { nccl, gloo };
enum class MixedPrecision { no, bf16, fp16 };
enum class OffloadDevice { none, cpu, nvme };
enum class ShardingStrategy { FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD };
enum class BackwardPrefetch { BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH };
enum class AutoWrapPolicy { TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP };
enum class StateDictType { FULL_STATE_DICT, SHARDED_STATE_DICT };
enum class PrecisionMode { mixed, low };
enum class ModelName { gpt, mlp, llama };
enum class RopeScaling { none, llama3 };
enum class ParamDtype { fp32, bf16 };
enum class DataKind { synthetic, text, tokens };
enum class DataOrder { sequential, shuffled };
enum class DataFormat { text, jsonl };
enum class OptimizerName { adamw, sgd };
enum class FusedKernel { auto_, yes, no };
enum class SchedulerName { cosine, constant };
enum class ElasticBatch { keep_global, keep_micro };
enum class RdzvBackend { static_, etcd };
enum class ExportFormat { safetensors, hf };
enum class ExportDtype { fp32, bf16, fp16 };

template <class E>
using EnumTable = std::vector<std::pair<E, std::string_view>>;

template <class E>
const EnumTable<E>& enum_table();

#define ACCEL_ENUM_TABLE(E, ...)                   \
  template <>                                      \
  inline const EnumTable<E>& enum_table<E>() {     \
    static const EnumTable<E> table{__VA_ARGS__};  \
    return table;                                  \
  }

ACCEL_ENUM_TABLE(Device, {Device::auto_, "auto"}, {Device::cpu, "cpu"}, {Device::cuda, "cuda"})
ACCEL_ENUM_TABLE(CudaCollectives, {CudaCollectives::nccl, "nccl"}, {CudaCollectives::gloo, "gloo"})
ACCEL_ENUM_TABLE(MixedPrecision, {MixedPrecision::no, "no"}, {MixedPrecision::bf16, "bf16"},
                 {MixedPrecision::fp16, "fp16"})
ACCEL_ENUM_TABLE(OffloadDevice, {OffloadDevice::none, "none"}, {OffloadDevice::cpu, "cpu"},
                 {OffloadDevice::nvme, "nvme"})
ACCEL_ENUM_TABLE(ShardingStrategy, {ShardingStrategy::FULL_SHARD, "FULL_SHARD"},
                 {ShardingStrategy::SHARD_GRAD_OP, "SHARD_GRAD_OP"}, {ShardingStrategy::NO_SHARD, "NO_SHARD"},
                 {ShardingStrategy::HYBRID_SHARD, "HYBRID_SHARD"})
ACCEL_ENUM_TABLE(BackwardPrefetch, {BackwardPrefetch::BACKWARD_PRE, "BACKWARD_PRE"},
                 {BackwardPrefetch::BACKWARD_POST, "BACKWARD_POST"}, {BackwardPrefetch::NO_PREFETCH, "NO_PREFETCH"})
ACCEL_ENUM_TABLE(AutoWrapPolicy, {AutoWrapPolicy::TRANSFORMER_BASED_WRAP, "TRANSFORMER_BASED_WRAP"},
                 {AutoWrapPolicy::SIZE_BASED_WRAP, "SIZE_BASED_WRAP"}, {AutoWrapPolicy::NO_WRAP, "NO_WRAP"})
ACCEL_ENUM_TABLE(StateDictType, {StateDictType::FULL_STATE_DICT, "FULL_STATE_DICT"},
                 {StateDictType::SHARDED_STATE_DICT, "SHARDED_STATE_DICT"})
ACCEL_ENUM_TABLE(PrecisionMode, {PrecisionMode::mixed, "mixed"}, {PrecisionMode::low, "low"})
ACCEL_ENUM_TABLE(ModelName, {ModelName::gpt, "gpt"}, {ModelName::mlp, "mlp"}, {ModelName::llama, "llama"})
ACCEL_ENUM_TABLE(RopeScaling, {RopeScaling::none, "none"}, {RopeScaling::llama3, "llama3"})
ACCEL_ENUM_TABLE(ParamDtype, {ParamDtype::fp32, "fp32"}, {ParamDtype::bf16, "bf16"})
ACCEL_ENUM_TABLE(DataKind, {DataKind::synthetic, "synthetic"}, {DataKind::text, "text"}, {DataKind::tokens, "tokens"})
ACCEL_ENUM_TABLE(DataOrder, {DataOrder::sequential, "sequential"}, {DataOrder::shuffled, "shuffled"})
ACCEL_ENUM_TABLE(DataFormat, {DataFormat::text, "text"}, {DataFormat::jsonl, "jsonl"})
ACCEL_ENUM_TABLE(OptimizerName, {OptimizerName::adamw, "adamw"}, {OptimizerName::sgd, "sgd"})
ACCEL_ENUM_TABLE(FusedKernel, {FusedKernel::auto_, "auto"}, {FusedKernel::yes, "true"}, {FusedKernel::no, "false"})
ACCEL_ENUM_TABLE(SchedulerName, {SchedulerName::cosine, "cosine"}, {SchedulerName::constant, "constant"})
ACCEL_ENUM_TABLE(ElasticBatch, {ElasticBatch::keep_global, "keep_global"}, {ElasticBatch::keep_micro, "keep_micro"})
ACCEL_ENUM_TABLE(RdzvBackend, {RdzvBackend::static_, "static"}, {RdzvBackend::etcd, "etcd"})
ACCEL_ENUM_TABLE(ExportFormat, {ExportFormat::safetensors, "safetensors"}, {ExportFormat::hf, "hf"})
ACCEL_ENUM_TABLE(ExportDtype, {ExportDtype::fp32, "fp32"}, {ExportDtype::bf16, "bf16"}, {ExportDtype::fp16, "fp16"})

#undef ACCEL_ENUM_TABLE

template <class E>
std::string to_string(E value) {
  for (const auto& [v, name] : enum_table<E>())
    if (v == value) return std::string(name);
  return "?";
}

template <class E>
std::optional<E> enum_from_string(std::string_view text) {
  for (const auto& [v, name] : enum_table<E>())
    if (name == text) return v;
  return std::nullopt;
}

template <class E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const auto& entry : enum_table<E>()) names.emplace_back(entry.second);
  return names;
}

}  // namespace accel::config
