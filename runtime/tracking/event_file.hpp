// TensorBoard's event file for one run (docs/design/0024): <dir>/events.out.tfevents.accel, a
// TFRecord file (tfrecord.hpp) of Event protobufs: first the file_version event, then scalar
// summaries (Value.simple_value, a float32) and text summaries (the text plugin's string tensor).
// Invariant: opening after a checkpoint of N steps keeps exactly the scalar events of the steps
// the caller keeps, rewritten atomically (beside the file, fsynced, renamed over it); every event
// is flushed when written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::tracking {

using Scalars = std::vector<std::pair<std::string, double>>;

// The Event messages, encoded (field numbers of tensorflow/core/util/event.proto and summary.proto).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& values);
std::string encode_text_event(double wall_time, int64_t step, const std::string& tag, const std::string& text);

// What resume needs of an event: its step, and whether it is a summary of scalars only.
struct EventFacts {
  int64_t step = 0;
  bool scalars = false;
};
std::optional<EventFacts> decode_event(const std::string& payload);

class EventFile {
 public:
  static constexpr const char* kFileName = "events.out.tfevents.accel";

  // Creates `dir` and opens its event file for appending after keeping only the scalar events with
  // step < keep_below (0: none) and writing a new file_version event first. Throws RunError on I/O
  // errors and on a damaged record before the last (a last record cut short is dropped).
  EventFile(const std::string& dir, int64_t keep_below);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  void scalars(int64_t step, const Scalars& values);
  void text(int64_t step, const std::string& tag, const std::string& text);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace accel::tracking
