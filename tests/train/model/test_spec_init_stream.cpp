// The spec init as a stream of slices (spec_init_stream.hpp) against the whole-model init: every
// element range a rank asks for, in the order the engine builds units (root first), equals the
// same range of BuiltinModule::initialize's values bit for bit, for gpt and mlp, fp32 and bf16.
#include "tests/support/catch_with_torch.hpp"

#include <map>
#include <random>

#include <ATen/CPUGeneratorImpl.h>

#include "trainer/models/spec_init_stream.hpp"
#include "trainer/models/builtin_module.hpp"
#include "tests/train/model/model_test_support.hpp"

using namespace accel;

namespace {

std::vector<train::SpecParam> spec_params(train::BuiltinModule& model) {
  std::vector<train::SpecParam> out;
  for (const auto& [name, p] : model.spec_parameters()) out.push_back({name, p.sizes().vec(), p.scalar_type()});
  return out;
}

// The engine's unit order for a built-in model: the root's parameters (those outside h./layer.)
// first, then each layer's, as apply_unit_policy lists them.
std::vector<std::string> engine_order(train::BuiltinModule& model) {
  std::vector<std::string> root, layers;
  for (const auto& [name, p] : model.spec_parameters())
    (name.rfind("h.", 0) == 0 || name.rfind("layer.", 0) == 0 ? layers : root).push_back(name);
  root.insert(root.end(), layers.begin(), layers.end());
  return root;
}

void check_slices_equal_whole_init(const config::ModelSection& section, int shards) {
  auto whole = train::make_builtin_module(section);
  whole->initialize(1234);
  std::map<std::string, at::Tensor> expected;
  for (const auto& [name, p] : whole->spec_parameters()) expected[name] = p.detach().reshape(-1);
  auto shape = train::make_builtin_module(section);
  train::SpecInitStream stream(spec_params(*shape), section.n_layer, 1234);
  std::mt19937 pick(7);
  for (const auto& name : engine_order(*shape)) {
    const at::Tensor& want = expected.at(name);
    const int64_t n = want.numel();
    // Each shard's range, then one random range, into fp32 and into the parameter's dtype.
    for (int s = 0; s <= shards; ++s) {
      const int64_t per = (n + shards - 1) / shards;
      int64_t begin = s < shards ? std::min(n, s * per) : int64_t(pick() % uint64_t(n));
      int64_t count = s < shards ? std::min(per, n - begin) : int64_t(pick() % uint64_t(n - begin)) + 1;
      if (count == 0) continue;
      for (auto dtype : {at::kFloat, want.scalar_type()}) {
        at::Tensor dest = at::empty({count}, dtype);
        stream.fill(stream.index_of(name), begin, dest);
        INFO(name << " [" << begin << ", " << begin + count << ") as " << dtype);
        CHECK(at::equal(dest, want.narrow(0, begin, count).to(dtype)));
      }
    }
  }
}

}  // namespace

TEST_CASE("spec init stream: slices equal the whole-model init bit for bit", "[spec_init]") {
  for (int shards : {1, 3, 4}) {
    check_slices_equal_whole_init(test::gpt_section(), shards);
    check_slices_equal_whole_init(test::mlp_section(), shards);
    auto bf16 = test::gpt_section();
    bf16.dtype = config::ParamDtype::bf16;
    check_slices_equal_whole_init(bf16, shards);
  }
}

TEST_CASE("spec init stream: parameters over several draw chunks equal the whole-model init", "[spec_init]") {
  // wte 32789 x 96 = 3,147,744 values: three chunks and 2,016 more; wte 58255 x 18 = 1,048,590: one
  // chunk and 14, fewer than 16, drawn with it as one.
  check_slices_equal_whole_init(test::gpt_section(1, 2, 96, 32789, 8), 3);
  check_slices_equal_whole_init(test::gpt_section(1, 2, 18, 58255, 8), 4);
}

TEST_CASE("spec init stream: chunked normal draws equal one draw of the whole", "[spec_init]") {
  const int64_t c = train::kNormalChunk;
  for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), c - 1, c, c + 1, c + 15, c + 16, c + 17,
                    2 * c + 31, 3 * c}) {
    at::Generator whole_gen = at::make_generator<at::CPUGeneratorImpl>(99);
    at::Tensor whole = at::empty({n}, at::kDouble);
    whole.normal_(0.0, 0.02, whole_gen);
    at::Generator chunk_gen = at::make_generator<at::CPUGeneratorImpl>(99);
    at::Tensor chunked = at::empty({n}, at::kDouble);
    int64_t largest = 0;
    train::draw_normal_in_chunks(chunk_gen, n, 0.02, [&](int64_t at, const at::Tensor& values) {
      chunked.narrow(0, at, values.numel()).copy_(values);
      largest = std::max(largest, values.numel());
      return true;
    });
    INFO("numel " << n);
    CHECK(at::equal(whole, chunked));
    CHECK(largest <= c + 15);
    // The generator is where the whole draw leaves it: the next draws agree too.
    at::Tensor next_whole = at::empty({40}, at::kDouble).normal_(0.0, 1.0, whole_gen);
    at::Tensor next_chunked = at::empty({40}, at::kDouble).normal_(0.0, 1.0, chunk_gen);
    CHECK(at::equal(next_whole, next_chunked));
  }
}

TEST_CASE("spec init stream: a parameter asked for after the stream passed it is refused", "[spec_init]") {
  auto shape = train::make_builtin_module(test::gpt_section());
  train::SpecInitStream stream(spec_params(*shape), test::gpt_section().n_layer, 1);
  at::Tensor dest = at::empty({4});
  stream.fill(stream.index_of("h.1.attn.c_attn.weight"), 0, dest);
  stream.fill(stream.index_of("ln_f.weight"), 0, dest);  // constant: draws nothing, any time
  stream.fill(stream.index_of("h.1.attn.c_attn.weight"), 4, dest);  // the parameter drawn last: kept
  CHECK_THROWS_WITH(stream.fill(stream.index_of("wte.weight"), 0, dest), Catch::Matchers::Contains("went past it"));
  CHECK_THROWS_AS(stream.fill(stream.index_of("h.1.attn.c_attn.weight"), 1'000'000'000, dest), std::out_of_range);
  CHECK_THROWS_AS(stream.index_of("nope"), std::invalid_argument);
}
