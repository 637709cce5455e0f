// TFRecord framing, the container of TensorBoard's event files: per record a little-endian u64
// payload length, the masked CRC-32C of those 8 bytes, the payload, and the masked CRC-32C of the
// payload (crc32c.hpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace accel::tracking {

// One record's bytes, framed.
std::string tfrecord_frame(std::string_view payload);

struct TfRecords {
  std::vector<std::string> payloads;
  bool cut_short = false;  // the file ends inside a record (a crash while writing it): dropped
};

// Every record of the file at `path`, checked; a file that does not exist holds none. A complete
// record whose length or payload CRC does not match throws RunError naming the file and the
// record's byte offset.
TfRecords read_tfrecords(const std::string& path);

}  // namespace accel::tracking
