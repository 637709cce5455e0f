// safetensors I/O: exact round trips, the byte layout of a tiny file, a file written by an
// independent (Python struct + json) producer, atomic replacement, and one clear error, naming
// the file, for each kind of damage.
#include "tests/support/catch_with_torch.hpp"

#include <filesystem>
#include <fstream>

#include <ATen/CPUGeneratorImpl.h>

#include "engine/format/safetensors.hpp"
#include "runtime/common/errors.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/model/model_test_support.hpp"

using accel::engine::load_safetensors;
using accel::engine::NamedTensors;
using accel::engine::save_safetensors;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A file from raw parts: the 8-byte little-endian length field, the header text, the data.
std::string write_raw(const accel::test::TempDir& dir, const std::string& name, uint64_t header_len,
                      const std::string& header, const std::string& data) {
  std::string file(reinterpret_cast<const char*>(&header_len), 8);
  file += header + data;
  const auto path = (dir.path() / name).string();
  std::ofstream(path, std::ios::binary) << file;
  return path;
}

std::string write_file(const accel::test::TempDir& dir, const std::string& name, const std::string& header,
                       const std::string& data) {
  return write_raw(dir, name, header.size(), header, data);
}

}  // namespace

TEST_CASE("safetensors round trip is exact, in order, for every supported dtype", "[safetensors]") {
  accel::test::TempDir dir;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor f32 = at::randn({5, 7}, g, at::TensorOptions(at::kFloat));
  NamedTensors saved = {
      {"z.f32", f32},
      {"a.bf16", at::randn({3, 4}, g, at::TensorOptions(at::kFloat)).to(at::kBFloat16)},
      {"m.f16", at::randn({6}, g, at::TensorOptions(at::kFloat)).to(at::kHalf)},
      {"ids", at::randint(-1000000, 1000000, {2, 3}, g, at::TensorOptions(at::kLong)) * 4096},
      {"f64", at::randn({2}, g, at::TensorOptions(at::kDouble))},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},
      {"empty", at::empty({0, 3}, at::kFloat)},
      {"transposed", f32.t()},  // non-contiguous input is written contiguous
  };
  const auto path = (dir.path() / "t.safetensors").string();
  save_safetensors(path, saved);
  NamedTensors loaded = load_safetensors(path);
  REQUIRE(loaded.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    INFO(saved[i].first);
    CHECK(loaded[i].first == saved[i].first);
    CHECK(loaded[i].second.scalar_type() == saved[i].second.scalar_type());
    CHECK(loaded[i].second.sizes() == saved[i].second.sizes());
    CHECK(at::equal(loaded[i].second, saved[i].second));
  }
}

TEST_CASE("safetensors layout of a tiny file, byte by byte", "[safetensors]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "tiny.safetensors").string();
  save_safetensors(path, {{"a", at::tensor({1.0f, -2.0f})}});
  // 54 bytes of JSON padded with 2 spaces to 56, so the data starts at byte 64 (8-aligned).
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(json.size() == 54);
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + json + "  " +
                               std::string("\x00\x00\x80\x3f" "\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f LE
  CHECK(bytes_of(path) == expected);
}

TEST_CASE("safetensors written by an independent Python producer loads with the right values", "[safetensors][python]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "py.safetensors").string();
  auto run = accel::test::run_python_script("write_safetensors_fixture.py", accel::test::shell_quote(path));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  NamedTensors loaded = load_safetensors(path);
  REQUIRE(loaded.size() == 4);  // __metadata__ is not a tensor; order is the data order
  CHECK(loaded[0].first == "weight");
  CHECK(at::equal(loaded[0].second, at::tensor({0.5f, -1.0f, 2.25f, 3.0f, -4.5f, 1e-3f}).view({2, 3})));
  CHECK(loaded[1].first == "half");
  CHECK(at::equal(loaded[1].second, at::tensor({1.0f, -2.0f, 0.15625f, 384.0f}).to(at::kBFloat16)));
  CHECK(loaded[2].first == "ids");
  CHECK(at::equal(loaded[2].second, at::tensor({int64_t{7}, int64_t{-1}, int64_t{1} << 40})));
  CHECK(loaded[3].first == "scalar");
  CHECK(loaded[3].second.dim() == 0);
  CHECK(loaded[3].second.item<float>() == 3.5f);
}

TEST_CASE("SafetensorsReader reads single tensors and element ranges without the rest of the file", "[safetensors]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "r.safetensors").string();
  at::Tensor big = at::arange(24, at::TensorOptions(at::kFloat)).view({4, 6});
  save_safetensors(path, {{"step", at::scalar_tensor(7, at::kLong)}, {"big", big}, {"half", at::ones({3}, at::kHalf)}});
  accel::engine::SafetensorsReader reader(path);
  REQUIRE(reader.tensors().size() == 3);
  CHECK(reader.tensors()[1].name == "big");
  CHECK(reader.tensors()[1].shape == std::vector<int64_t>{4, 6});
  CHECK(reader.tensors()[1].numel == 24);
  CHECK(reader.find("nope") == nullptr);
  CHECK(reader.read("step").item<int64_t>() == 7);
  CHECK(at::equal(reader.read("big"), big));
  CHECK(at::equal(reader.read_range("big", 5, 9), big.reshape(-1).narrow(0, 5, 9)));
  CHECK(reader.read_range("half", 1, 2).scalar_type() == at::kHalf);
  CHECK(reader.read_range("big", 24, 0).numel() == 0);
  CHECK_THROWS_WITH(reader.read_range("big", 20, 5), Catch::Contains("outside its 24") && Catch::Contains(path));
  CHECK_THROWS_WITH(reader.read("nope"), Catch::Contains("has no tensor 'nope'"));
}

TEST_CASE("SafetensorsReader reads ranges into a buffer and converts them in pieces", "[safetensors]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "c.safetensors").string();
  // Values bf16 cannot hold (so a rounding step shows), stored fp32 and bf16.
  at::Tensor f32 = at::arange(50, at::TensorOptions(at::kFloat)) * 1.0009765625 + 0.33;
  at::Tensor b16 = f32.to(at::kBFloat16);
  save_safetensors(path, {{"f32", f32}, {"b16", b16}});
  accel::engine::SafetensorsReader reader(path);

  at::Tensor into = at::empty({9}, at::kFloat);
  reader.read_range_into("f32", 5, into);
  CHECK(at::equal(into, f32.narrow(0, 5, 9)));
  CHECK_THROWS_WITH(reader.read_range_into("f32", 45, into), Catch::Contains("outside its 50") && Catch::Contains(path));
  CHECK_THROWS_WITH(reader.read_range_into("b16", 0, into), Catch::Contains("not contiguous BFloat16"));
  CHECK_THROWS_WITH(reader.read_range_into("f32", 0, at::empty({20}, at::kFloat).slice(0, 0, 20, 2)),
                    Catch::Contains("not contiguous Float"));

  // Pieces of 7 over 43 elements (the last one short), into a strided fp32 destination: each value
  // equals the whole range converted at once, through the parameter's dtype.
  for (int64_t piece : {int64_t(7), int64_t(43), int64_t(1000)})
    for (const char* name : {"f32", "b16"})
      for (at::ScalarType via : {at::kFloat, at::kBFloat16, at::kHalf}) {
        CAPTURE(piece, name, via);
        const at::Tensor expected = reader.read_range(name, 4, 43).to(via).to(at::kFloat);
        at::Tensor wide = at::full({86}, -1.0f);
        reader.read_range_converted(name, 4, wide.slice(0, 0, 86, 2), via, piece);
        CHECK(at::equal(wide.slice(0, 0, 86, 2), expected));
        CHECK(at::equal(wide.slice(0, 1, 86, 2), at::full({43}, -1.0f)));  // nothing written between
        at::Tensor dense = at::empty({43}, at::kDouble);
        reader.read_range_converted(name, 4, dense, via, piece);
        CHECK(at::equal(dense, reader.read_range(name, 4, 43).to(via).to(at::kDouble)));
      }
  // The rounding through a third dtype is kept (fp32 stored, bf16 parameter, fp32 buffer).
  at::Tensor out = at::empty({50}, at::kFloat);
  reader.read_range_converted("f32", 0, out, at::kBFloat16, 7);
  CHECK(at::equal(out, b16.to(at::kFloat)));
  CHECK_FALSE(at::equal(out, f32));
  const uint64_t before = reader.data_bytes_read();
  reader.read_range_converted("b16", 10, at::empty({30}, at::kFloat), at::kFloat, 4);
  CHECK(reader.data_bytes_read() - before == 30 * 2);  // exactly the range's bytes, piece by piece
}

TEST_CASE("save_safetensors replaces a file atomically and leaves no temporary", "[safetensors]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "w.safetensors").string();
  save_safetensors(path, {{"x", at::ones({4})}});
  save_safetensors(path, {{"y", at::zeros({2})}});
  auto loaded = load_safetensors(path);
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].first == "y");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.is_regular_file() ? 1 : 0;
  CHECK(entries == 1);
  const auto nowhere = (dir.path() / "no-such-dir" / "w.safetensors").string();
  CHECK_THROWS_WITH(save_safetensors(nowhere, {{"x", at::ones({1})}}), Catch::Contains(nowhere));
}

TEST_CASE("save_safetensors refuses a symbolic link at its path, and what it points at stays", "[safetensors]") {
  // weights.safetensors in output_dir, or merge-weights' --output: a link planted there is
  // reported (UsageError, exit 2), neither written through nor silently replaced.
  accel::test::TempDir dir;
  const auto victim = dir.write("victim", "the user's file\n");
  const auto link = (dir.path() / "weights.safetensors").string();
  std::filesystem::create_symlink(victim, link);
  CHECK_THROWS_AS(save_safetensors(link, {{"x", at::ones({4})}}), accel::UsageError);
  CHECK_THROWS_WITH(save_safetensors(link, {{"x", at::ones({4})}}),
                    Catch::Contains(link) && Catch::Contains("symbolic link") && Catch::Contains("never follows"));
  CHECK(bytes_of(victim) == "the user's file\n");
  CHECK(std::filesystem::is_symlink(link));
}

TEST_CASE("save_safetensors refuses bad names and unsupported dtypes", "[safetensors]") {
  accel::test::TempDir dir;
  const auto path = (dir.path() / "bad.safetensors").string();
  CHECK_THROWS_WITH(save_safetensors(path, {{"x", at::ones({1})}, {"x", at::ones({1})}}), Catch::Contains("'x'"));
  CHECK_THROWS_AS(save_safetensors(path, {{"__metadata__", at::ones({1})}}), accel::RunError);
  CHECK_THROWS_WITH(save_safetensors(path, {{"c", at::ones({1}, at::kComplexFloat)}}), Catch::Contains("dtype"));
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("each kind of damaged safetensors file gives its own error naming the file", "[safetensors]") {
  accel::test::TempDir dir;
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  auto error_of = [](const std::string& path) -> std::string {
    try {
      load_safetensors(path);
    } catch (const accel::RunError& e) {
      return e.what();
    }
    return "(no error)";
  };
  struct Case {
    const char* what;
    std::string path;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"missing file", (dir.path() / "missing.safetensors").string(), "does not exist"},
      {"header length beyond the file", write_raw(dir, "long", 4096, good_header, data),
       "header length 4096 runs past the end of the file"},
      {"bad JSON", write_file(dir, "json", R"({"a": {"dtype": )", data), "bad JSON header"},
      {"not an object", write_file(dir, "array", "[1, 2]", data), "not an object"},
      {"unknown dtype", write_file(dir, "dtype", R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", data),
       "unknown dtype 'Q4'"},
      {"offsets past the data (truncated data)", write_file(dir, "trunc", good_header, data.substr(0, 5)),
       "run past the end of the data"},
      {"overlapping offsets",
       write_file(dir, "overlap",
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  data),
       "'a' and 'b' have overlapping data_offsets"},
      {"byte range that does not match the shape",
       write_file(dir, "size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data), "needs 12"},
      {"negative offset", write_file(dir, "neg", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data),
       "non-negative"},
      {"missing field", write_file(dir, "field", R"({"a":{"dtype":"F32","shape":[2]}})", data), "lacks \"data_offsets\""},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string message = error_of(c.path);
    CHECK_THAT(message, Catch::Contains(c.expected));
    CHECK_THAT(message, Catch::Contains("'" + c.path + "'"));
  }
  // A file shorter than the 8-byte length field.
  const auto tiny = (dir.path() / "tiny").string();
  std::ofstream(tiny, std::ios::binary) << "abc";
  CHECK_THAT(error_of(tiny), Catch::Contains("truncated: 3 bytes") && Catch::Contains(tiny));
}

TEST_CASE("safetensors sizes that overflow 64 bits are refused, naming the file and the tensor", "[safetensors]") {
  // A hostile header whose sizes wrap past 2^64 to match an empty byte range: without checked
  // arithmetic it passes the "shape matches byte range" check and fails later inside PyTorch (an
  // allocation of 2^62 floats, an invalid view), naming no file.
  accel::test::TempDir dir;
  auto error_of = [](const std::string& path) -> std::string {
    try {
      load_safetensors(path);
    } catch (const accel::RunError& e) {
      return e.what();
    } catch (const std::exception& e) {  // PyTorch's, from a size that slipped through
      const std::string text = e.what();
      return "not accel's error: " + text.substr(0, text.find('\n'));
    }
    return "(no error)";
  };
  struct Case {
    const char* what;
    const char* shape;
    const char* dtype;
  };
  const std::vector<Case> cases = {
      {"numel * element size wraps: 2^62 F32 elements are 2^64 bytes", "[4611686018427387904]", "F32"},
      {"numel * element size wraps: 2^61 F64 elements are 2^64 bytes", "[2305843009213693952]", "F64"},
      {"the shape's product wraps: 2^32 * 2^32 = 2^64", "[4294967296, 4294967296]", "U8"},
      {"the shape's product wraps: (2^32 + 1) * (2^32 - 1) * 2^32 = 2^96 - 2^32", "[4294967297, 4294967295, 4294967296]",
       "U8"},
      {"a dimension past int64 behind a zero one (product 0)", "[0, 18446744073709551615]", "U8"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO(c.what);
    const std::string header = std::string(R"({"w":{"dtype":")") + c.dtype + R"(","shape":)" + c.shape +
                               R"(,"data_offsets":[0,0]}})";
    const std::string path = write_file(dir, "wrap" + std::to_string(i) + ".safetensors", header, "");
    const std::string message = error_of(path);
    CHECK_THAT(message, Catch::Contains("'" + path + "'") && Catch::Contains("tensor 'w'"));
    CHECK_THAT(message, Catch::Contains("shape " + std::string(c.shape)));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();
