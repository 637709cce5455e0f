// Reading and writing the safetensors format (the public one, as Hugging Face's library writes):
// an 8-byte little-endian u64 N, then N bytes of JSON header mapping each name to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the data section, which
// follows the header), with an optional "__metadata__" object, then the raw little-endian data.
// Invariants: save writes tensors in the given order, contiguous, the header space-padded so the
// data starts 8-byte aligned, and replaces `path` atomically (tmp file + rename); load returns the
// tensors ordered by data offset (so a saved list comes back in its order), or throws
// accel::RunError naming the file and the problem. Dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/named_tensors.hpp"

namespace accel::engine {

// Writes `tensors` (any device; copied to CPU) to `path`. Throws accel::RunError on an empty,
// duplicate or reserved name, an unsupported dtype, or an I/O failure; accel::UsageError for a
// symbolic link at `path`, which is never followed nor replaced (runtime/common/safe_file.hpp).
void save_safetensors(const std::string& path, const NamedTensors& tensors);

// The same file written tensor by tensor: `specs` gives each tensor's name, dtype and shape up
// front (the header), then `produce(i)` is called once per tensor, in order, for its values (CPU,
// matching the spec). So a writer of states kept on disk holds one tensor at a time.
struct TensorSpec {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
};
void save_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                               const std::function<at::Tensor(size_t)>& produce);

// The same format written by position: the header (names, dtypes, shapes of `specs`, in that
// order) is written at construction, then each tensor's values go straight to their place in the
// file, in any order, so a writer fed one unit at a time by a gathering engine holds nothing but
// the tensor it is given. commit() (every tensor written once) syncs and renames the staged file
// onto `path`; a writer destroyed uncommitted removes it. Errors as save_safetensors_streamed's.
class SafetensorsFileWriter {
 public:
  SafetensorsFileWriter(std::string path, std::vector<TensorSpec> specs);
  ~SafetensorsFileWriter();
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;

  // Tensor i's values (any device, its spec's dtype and element count).
  void write(size_t i, const at::Tensor& value);
  void commit();
  const std::vector<TensorSpec>& specs() const { return specs_; }
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  std::string path_, tmp_;
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> offsets_, sizes_;
  std::vector<bool> written_;
  uint64_t data_start_ = 0, data_bytes_ = 0;
  int fd_ = -1;
};

// Reads every tensor of `path` onto the CPU. Throws accel::RunError, naming the file, for a missing
// file, a truncated file, a header length beyond the file, bad JSON, an unknown dtype, a shape that
// does not match its byte range or whose sizes overflow 64 bits (naming the tensor; every product
// is checked, so no wrapped size can match), and offsets out of range or overlapping.
NamedTensors load_safetensors(const std::string& path);

// Random access to one safetensors file: the header is parsed and checked once, with the same
// checks and errors as load_safetensors; tensors, or element ranges of them, are read on demand
// (so a reader of one shard of a large file never holds the rest). Not copyable.
class SafetensorsReader {
 public:
  struct Info {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t numel = 0;
  };

  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Info>& tensors() const { return tensors_; }  // in data order (= save order)
  const Info* find(const std::string& name) const;               // nullptr when absent
  // The whole tensor `name`, in its dtype and shape. RunError naming the file when it is absent.
  at::Tensor read(const std::string& name) const;
  // Elements [begin, begin + count) of the flattened tensor `name`, as a 1-D tensor of its dtype.
  at::Tensor read_range(const std::string& name, int64_t begin, int64_t count) const;
  // The same dst.numel() elements from `begin` straight into `dst` (contiguous, the tensor's stored
  // dtype, on the CPU; RunError otherwise): a caller reading in pieces needs no tensor per piece.
  void read_range_into(const std::string& name, int64_t begin, const at::Tensor& dst) const;
  // out.numel() elements from `begin` into `out` (1-D, any dtype and stride), each value converted
  // to `via` and then to out's dtype (as a parameter of dtype `via` would hold it), in pieces of at
  // most `piece` elements: the stored dtype's piece is all it holds beside `out`, where reading the
  // range whole and converting it held two more copies of it. No piece when `out` can take the
  // bytes as stored.
  static constexpr int64_t kDefaultPiece = int64_t(1) << 20;  // 2 MiB of bf16
  void read_range_converted(const std::string& name, int64_t begin, const at::Tensor& out, at::ScalarType via,
                            int64_t piece = kDefaultPiece) const;
  // Bytes of tensor data read so far (the header not counted): what a sliced load costs.
  uint64_t data_bytes_read() const { return data_bytes_read_; }
  // The same, by every reader on the calling thread (a rank's, where ranks are threads): what a
  // load costs when its readers are internal to it.
  static uint64_t data_bytes_read_on_this_thread();

 private:
  void parse_header(uint64_t file_size);
  void read_bytes(void* dst, uint64_t offset, uint64_t bytes, const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<Info> tensors_;
  std::vector<uint64_t> offsets_;  // byte offset of each tensor in the data section
  std::unordered_map<std::string, size_t> index_;
  mutable uint64_t data_bytes_read_ = 0;
};

// The safetensors name of a torch dtype ("F32"), or "" when the format has none.
std::string safetensors_dtype_name(at::ScalarType dtype);

}  // namespace accel::engine
