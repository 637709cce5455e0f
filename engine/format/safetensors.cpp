// safetensors reading (whole files, or tensors and element ranges on demand) and writing (see safetensors.hpp).
#include "engine/format/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/progress.hpp"
#include "runtime/common/safe_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace accel::engine {

namespace {

using Json = nlohmann::ordered_json;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
    {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool},
};

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

std::optional<at::ScalarType> dtype_from_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  return std::nullopt;
}

std::string supported_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : " ") + std::string(d.name);
  return out;
}

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw RunError("safetensors file '" + path + "': " + problem);
}

// A parsed header entry.
struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

uint64_t as_offset(const std::string& path, const std::string& name, const Json& value, const char* what) {
  if (!value.is_number_unsigned()) fail(path, "tensor '" + name + "': " + what + " must be non-negative integers");
  return value.get<uint64_t>();
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& spec) {
  if (!spec.is_object()) fail(path, "tensor '" + name + "': header entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!spec.contains(key)) fail(path, "tensor '" + name + "': header entry lacks \"" + key + "\"");
  Entry e;
  e.name = name;
  if (!spec["dtype"].is_string()) fail(path, "tensor '" + name + "': dtype is not a string");
  const std::string dtype = spec["dtype"].get<std::string>();
  auto type = dtype_from_name(dtype);
  if (!type) fail(path, "tensor '" + name + "': unknown dtype '" + dtype + "' (supported: " + supported_dtypes() + ")");
  e.dtype = *type;
  if (!spec["shape"].is_array()) fail(path, "tensor '" + name + "': shape is not an array");
  // Every size is computed with overflow checks: a hostile shape whose product (or its byte count)
  // wraps past 2^64 would otherwise match a small byte range and fail later inside PyTorch.
  std::vector<uint64_t> dims;
  for (const auto& dim : spec["shape"]) dims.push_back(as_offset(path, name, dim, "shape entries"));
  const auto too_large = [&](const std::string& why) {
    std::string shape;
    for (uint64_t d : dims) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    fail(path, "tensor '" + name + "': shape [" + shape + "] of " + dtype + " is too large: " + why);
  };
  uint64_t numel = 1;
  for (uint64_t d : dims) {
    if (d > uint64_t(INT64_MAX)) too_large("a dimension past 2^63 - 1");
    if (__builtin_mul_overflow(numel, d, &numel) || numel > uint64_t(INT64_MAX))
      too_large("its element count overflows 64 bits");
    e.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t need = 0;
  if (__builtin_mul_overflow(numel, uint64_t(c10::elementSize(e.dtype)), &need))
    too_large("its byte count (" + std::to_string(numel) + " elements of " + std::to_string(c10::elementSize(e.dtype)) +
              " bytes) overflows 64 bits");
  const Json& offsets = spec["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) fail(path, "tensor '" + name + "': data_offsets must be [begin, end]");
  e.begin = as_offset(path, name, offsets[0], "data_offsets");
  e.end = as_offset(path, name, offsets[1], "data_offsets");
  const std::string range = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  if (e.end < e.begin) fail(path, "tensor '" + name + "': " + range + " end before they begin");
  if (e.end - e.begin != need)
    fail(path, "tensor '" + name + "': " + range + " hold " + std::to_string(e.end - e.begin) + " bytes but " + dtype +
                   " of that shape needs " + std::to_string(need));
  return e;
}

void write_at(int fd, const void* data, uint64_t n, uint64_t offset, const std::string& tmp) {
  const auto* in = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, in, n, off_t(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw RunError("safetensors: writing '" + tmp + "' failed: " + std::strerror(errno));
    in += put;
    n -= uint64_t(put);
    offset += uint64_t(put);
  }
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (d.type == dtype) return d.name;
  return "";
}

void save_safetensors(const std::string& path, const NamedTensors& tensors) {
  std::vector<TensorSpec> specs;
  std::vector<at::Tensor> data;
  for (const auto& [name, tensor] : tensors) {
    data.push_back(tensor.detach().to(at::kCPU).contiguous());
    specs.push_back({name, tensor.scalar_type(), data.back().sizes().vec()});
  }
  save_safetensors_streamed(path, specs, [&](size_t i) { return data[i]; });
}

void save_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                               const std::function<at::Tensor(size_t)>& produce) {
  SafetensorsFileWriter writer(path, specs);
  for (size_t i = 0; i < specs.size(); ++i) writer.write(i, produce(i));
  writer.commit();
}

SafetensorsFileWriter::SafetensorsFileWriter(std::string path, std::vector<TensorSpec> specs)
    : path_(std::move(path)), specs_(std::move(specs)), written_(specs_.size(), false) {
  const std::string& p = path_;
  Json header = Json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& spec : specs_) {
    const std::string& name = spec.name;
    if (name.empty() || name == "__metadata__" || !seen.insert(name).second)
      fail(p, "cannot save tensor '" + name + "': names must be non-empty, unique and not __metadata__");
    const std::string dtype = safetensors_dtype_name(spec.dtype);
    if (dtype.empty())
      fail(p, "cannot save tensor '" + name + "' of dtype " + std::string(c10::toString(spec.dtype)) +
                  " (supported: " + supported_dtypes() + ")");
    uint64_t numel = 1, bytes = 0, end = 0;
    for (int64_t d : spec.shape)
      if (d < 0 || __builtin_mul_overflow(numel, uint64_t(d), &numel))
        fail(p, "cannot save tensor '" + name + "': its shape has a negative dimension or too many elements");
    if (__builtin_mul_overflow(numel, uint64_t(c10::elementSize(spec.dtype)), &bytes) ||
        __builtin_add_overflow(offset, bytes, &end))
      fail(p, "cannot save tensor '" + name + "': the file's size overflows 64 bits");
    Json entry = Json::object();
    entry["dtype"] = dtype;
    entry["shape"] = spec.shape;
    entry["data_offsets"] = Json::array({offset, offset + bytes});
    header[name] = std::move(entry);
    offsets_.push_back(offset);
    sizes_.push_back(bytes);
    offset += bytes;
  }
  data_bytes_ = offset;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t header_len = text.size();
  data_start_ = 8 + header_len;

  // Staged beside under the process's own name, created afresh and never through a link; a link
  // at `path` itself is refused rather than silently replaced (runtime/common/safe_file.hpp).
  files::refuse_link(p);
  tmp_ = p + ".tmp." + std::to_string(::getpid());
  try {
    fd_ = files::create_fresh(tmp_);
  } catch (const RunError& e) {
    fail(p, std::string("cannot create '") + tmp_ + "': " + e.what());
  }
  std::string head(reinterpret_cast<const char*>(&header_len), sizeof header_len);  // little-endian host
  head += text;
  try {
    write_at(fd_, head.data(), head.size(), 0, tmp_);
  } catch (...) {  // no destructor runs for a constructor that throws
    ::close(fd_);
    std::remove(tmp_.c_str());
    throw;
  }
}

SafetensorsFileWriter::~SafetensorsFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    std::remove(tmp_.c_str());
  }
}

void SafetensorsFileWriter::write(size_t i, const at::Tensor& value) {
  if (i >= specs_.size() || written_[i]) throw RunError("safetensors: tensor " + std::to_string(i) + " of '" + path_ + "' written twice");
  const at::Tensor t = value.detach().to(at::kCPU).contiguous();
  if (t.scalar_type() != specs_[i].dtype || uint64_t(t.numel()) * t.element_size() != sizes_[i])
    throw RunError("safetensors: tensor '" + specs_[i].name + "' does not match its declared dtype and shape");
  write_at(fd_, t.data_ptr(), sizes_[i], data_start_ + offsets_[i], tmp_);
  written_[i] = true;
  progress::bytes_written(sizes_[i]);  // the caller's progress line, if it has one
}

void SafetensorsFileWriter::commit() {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (!written_[i]) throw RunError("safetensors: tensor '" + specs_[i].name + "' of '" + path_ + "' was never written");
  if (::fsync(fd_) != 0) fail(path_, std::string("flushing '") + tmp_ + "' failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    fail(path_, "cannot finish writing (" + why + ")");
  }
  progress::file_written();
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path, "does not exist");
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, "is not a regular file");
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  try {
    parse_header(file_size);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::read_bytes(void* dst, uint64_t offset, uint64_t bytes, const std::string& what) const {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_, "cannot read " + what + (n < 0 ? std::string(": ") + std::strerror(errno) : std::string()));
    out += n;
    offset += uint64_t(n);
    bytes -= uint64_t(n);
  }
}

void SafetensorsReader::parse_header(uint64_t file_size) {
  const std::string& path = path_;
  if (file_size < 8) fail(path, "truncated: " + std::to_string(file_size) + " bytes, less than the 8-byte header length");
  uint64_t header_len = 0;
  read_bytes(&header_len, 0, sizeof header_len, "the header length");
  if (header_len > file_size - 8)
    fail(path, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes; truncated or not a safetensors file?)");
  if (header_len > kMaxHeaderBytes) fail(path, "header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  std::string text(header_len, '\0');
  read_bytes(text.data(), 8, header_len, "the header");

  Json header;
  try {
    header = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(path, "bad JSON header: not an object");

  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") entries.push_back(parse_entry(path, it.key(), it.value()));
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });

  const uint64_t data_size = file_size - 8 - header_len;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.end > data_size)
      fail(path, "tensor '" + e.name + "': data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     ") run past the end of the data (" + std::to_string(data_size) + " bytes; truncated file?)");
    if (i > 0 && e.begin < entries[i - 1].end)
      fail(path, "tensors '" + entries[i - 1].name + "' and '" + e.name + "' have overlapping data_offsets");
  }
  data_start_ = 8 + header_len;
  for (const Entry& e : entries) {
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    index_.emplace(e.name, tensors_.size());
    tensors_.push_back({e.name, e.dtype, e.shape, numel});
    offsets_.push_back(e.begin);
  }
}

namespace {
thread_local uint64_t thread_bytes_read = 0;  // data_bytes_read_on_this_thread()
}  // namespace

const SafetensorsReader::Info* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const Info* info = find(name);
  if (!info) fail(path_, "has no tensor '" + name + "'");
  at::Tensor t = read_range(name, 0, info->numel);
  return t.view(info->shape);
}

at::Tensor SafetensorsReader::read_range(const std::string& name, int64_t begin, int64_t count) const {
  const Info* info = find(name);
  if (!info) fail(path_, "has no tensor '" + name + "'");
  if (count < 0 || count > info->numel)  // before allocating: read_range_into checks the rest
    fail(path_, "tensor '" + name + "': " + std::to_string(count) + " elements from " + std::to_string(begin) +
                    " are outside its " + std::to_string(info->numel));
  at::Tensor t = at::empty({count}, at::TensorOptions(info->dtype));
  read_range_into(name, begin, t);
  return t;
}

void SafetensorsReader::read_range_into(const std::string& name, int64_t begin, const at::Tensor& dst) const {
  const Info* info = find(name);
  if (!info) fail(path_, "has no tensor '" + name + "'");
  const int64_t count = dst.numel();
  if (begin < 0 || begin > info->numel || count > info->numel - begin)  // no overflow
    fail(path_, "tensor '" + name + "': " + std::to_string(count) + " elements from " + std::to_string(begin) +
                    " are outside its " + std::to_string(info->numel));
  if (dst.scalar_type() != info->dtype || !dst.is_contiguous() || !dst.device().is_cpu())
    fail(path_, "tensor '" + name + "': read into a tensor that is not contiguous " +
                    std::string(c10::toString(info->dtype)) + " on the CPU");
  const uint64_t elem = c10::elementSize(info->dtype);
  read_bytes(dst.data_ptr(), data_start_ + offsets_[index_.at(name)] + uint64_t(begin) * elem, uint64_t(count) * elem,
             "the data of tensor '" + name + "'");
  data_bytes_read_ += uint64_t(count) * elem;
  thread_bytes_read += uint64_t(count) * elem;
}

void SafetensorsReader::read_range_converted(const std::string& name, int64_t begin, const at::Tensor& out,
                                             at::ScalarType via, int64_t piece) const {
  const Info* info = find(name);
  if (!info) fail(path_, "has no tensor '" + name + "'");
  if (out.dim() != 1 || piece < 1) fail(path_, "tensor '" + name + "': a converted read needs a 1-D destination");
  const int64_t count = out.numel();
  // stored -> via -> out is one conversion when `via` equals either end; only a third dtype in the
  // middle (fp32 stored, bf16 via, fp32 out) rounds through it.
  const bool through_via = via != info->dtype && via != out.scalar_type();
  if (!through_via && out.scalar_type() == info->dtype && out.is_contiguous() && out.device().is_cpu()) {
    read_range_into(name, begin, out);
    return;
  }
  at::Tensor staging = at::empty({std::min(count, piece)}, at::TensorOptions(info->dtype));
  for (int64_t done = 0; done < count; done += piece) {
    const int64_t n = std::min(piece, count - done);
    at::Tensor values = staging.narrow(0, 0, n);
    read_range_into(name, begin + done, values);
    out.narrow(0, done, n).copy_(through_via ? values.to(via) : values);
  }
}

uint64_t SafetensorsReader::data_bytes_read_on_this_thread() { return thread_bytes_read; }

NamedTensors load_safetensors(const std::string& path) {
  SafetensorsReader reader(path);
  NamedTensors out;
  for (const auto& info : reader.tensors()) out.emplace_back(info.name, reader.read(info.name));
  return out;
}

}  // namespace accel::engine
