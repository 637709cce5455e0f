// The spec init as a unit source (see spec_init_source.hpp).
#include "trainer/models/spec_init_source.hpp"

#include "trainer/models/spec_init_stream.hpp"

namespace accel::train {
namespace {

class SpecInitSource final : public engine::UnitSource {
 public:
  SpecInitSource(std::vector<SpecParam> params, int n_layer, uint64_t seed)
      : stream_(std::move(params), n_layer, seed), seed_(seed) {}

  void fill(const std::string& name, const at::Tensor&, int64_t begin, at::Tensor dest) override {
    stream_.fill(stream_.index_of(name), begin, std::move(dest));
  }
  std::string describe() const override { return "the spec initializer, seed " + std::to_string(seed_); }

 private:
  SpecInitStream stream_;
  uint64_t seed_;
};

}  // namespace

std::shared_ptr<engine::UnitSource> make_spec_init_source(BuiltinModule& model, int n_layer, uint64_t seed) {
  std::vector<SpecParam> params;
  for (const auto& [name, p] : model.spec_parameters()) params.push_back({name, p.sizes().vec(), p.scalar_type()});
  return std::make_shared<SpecInitSource>(std::move(params), n_layer, seed);
}

}  // namespace accel::train
