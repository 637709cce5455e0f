#include "runtime/tracking/event_file.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/tracking/protobuf_wire.hpp"
#include "runtime/tracking/tfrecord.hpp"

namespace accel::tracking {
namespace {

// Field numbers: Event {wall_time 1, step 2, file_version 3, summary 5}; Summary {value 1};
// Summary.Value {tag 1, simple_value 2, tensor 8, metadata 9}; SummaryMetadata {plugin_data 1,
// data_class 4}; PluginData {plugin_name 1}; TensorProto {dtype 1, tensor_shape 2, string_val 8}.
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
constexpr int kValue = 1;
constexpr int kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
constexpr int kPluginData = 1, kDataClass = 4, kPluginName = 1;
constexpr int kDtype = 1, kTensorShape = 2, kStringVal = 8;
constexpr uint64_t kDtString = 7, kDataClassTensor = 2;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_with_summary(double wall_time, int64_t step, const std::string& summary) {
  proto::Writer event;
  event.fixed64_double(kWallTime, wall_time).int64(kStep, step).bytes(kSummary, summary);
  return event.data();
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  proto::Writer event;
  event.fixed64_double(kWallTime, wall_time).bytes(kFileVersion, "brain.Event:2");
  return event.data();
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& values) {
  proto::Writer summary;
  for (const auto& [tag, v] : values) {
    proto::Writer value;
    value.bytes(kTag, tag).fixed32_float(kSimpleValue, float(v));
    summary.bytes(kValue, value.data());
  }
  return event_with_summary(wall_time, step, summary.data());
}

std::string encode_text_event(double wall_time, int64_t step, const std::string& tag, const std::string& text) {
  proto::Writer plugin, metadata, shape, tensor, value, summary;
  plugin.bytes(kPluginName, "text");
  metadata.bytes(kPluginData, plugin.data()).varint(kDataClass, kDataClassTensor);
  tensor.varint(kDtype, kDtString).bytes(kTensorShape, shape.data()).bytes(kStringVal, text);  // a scalar
  value.bytes(kTag, tag).bytes(kTensor, tensor.data()).bytes(kMetadata, metadata.data());
  summary.bytes(kValue, value.data());
  return event_with_summary(wall_time, step, summary.data());
}

std::optional<EventFacts> decode_event(const std::string& payload) {
  auto fields = proto::parse(payload);
  if (!fields) return std::nullopt;
  EventFacts facts;
  bool has_summary = false, all_scalar = true;
  for (const auto& f : *fields) {
    if (f.field == kStep && f.type == proto::WireType::varint) facts.step = int64_t(f.number);
    if (f.field != kSummary || f.type != proto::WireType::length_delimited) continue;
    has_summary = true;
    auto values = proto::parse(f.bytes);
    if (!values) return std::nullopt;
    for (const auto& v : *values) {
      if (v.field != kValue) continue;
      auto parts = proto::parse(v.bytes);
      if (!parts) return std::nullopt;
      bool simple = false;
      for (const auto& p : *parts) simple = simple || p.field == kSimpleValue;
      all_scalar = all_scalar && simple;
    }
  }
  facts.scalars = has_summary && all_scalar;
  return facts;
}

EventFile::EventFile(const std::string& dir, int64_t keep_below) {
  std::filesystem::create_directories(dir);
  path_ = (std::filesystem::path(dir) / kFileName).string();
  files::refuse_link(path_);  // neither read through nor silently replaced (safe_file.hpp)
  std::string kept = tfrecord_frame(encode_file_version_event(now_seconds()));
  if (keep_below > 0) {
    const TfRecords old = read_tfrecords(path_);
    for (size_t i = 0; i < old.payloads.size(); ++i) {
      const auto facts = decode_event(old.payloads[i]);
      if (!facts)
        throw RunError(path_ + ": record " + std::to_string(i + 1) + " is not an event; move the file away to resume");
      if (facts->scalars && facts->step < keep_below) kept += tfrecord_frame(old.payloads[i]);
    }
  }
  const std::string staged = path_ + ".tmp";
  checkpoint::write_file_synced(staged, kept);
  std::error_code ec;
  std::filesystem::rename(staged, path_, ec);
  if (ec) throw RunError("cannot replace " + path_ + ": " + ec.message());
  file_ = files::fopen_for_write(path_, files::WriteMode::append);
}

EventFile::~EventFile() {
  if (file_) std::fclose(file_);
}

void EventFile::append(const std::string& event) {
  const std::string record = tfrecord_frame(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw RunError("cannot write " + path_ + ": " + std::strerror(errno));
}

void EventFile::scalars(int64_t step, const Scalars& values) {
  if (!values.empty()) append(encode_scalars_event(now_seconds(), step, values));
}

void EventFile::text(int64_t step, const std::string& tag, const std::string& text) {
  append(encode_text_event(now_seconds(), step, tag, text));
}

}  // namespace accel::tracking
