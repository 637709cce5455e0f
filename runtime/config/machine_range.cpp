#include "runtime/config/machine_range.hpp"

#include <cctype>

#include "runtime/config/schema.hpp"

namespace accel::config {
namespace {

// A whole number of at most 9 digits (the limit is far below), surrounding blanks allowed.
std::optional<int> whole_number(const std::string& text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  if (b == e || e - b > 9) return std::nullopt;
  int value = 0;
  for (size_t i = b; i < e; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

}  // namespace

std::optional<MachineRange> parse_machine_range(const std::string& text, int limit, std::string* problem) {
  auto fail = [&](std::string what) -> std::optional<MachineRange> {
    if (problem) *problem = std::move(what);
    return std::nullopt;
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return fail("a range needs the form MIN:MAX");
  if (text.find(':', colon + 1) != std::string::npos) return fail("a range has exactly two numbers, MIN:MAX");
  const auto lo = whole_number(text.substr(0, colon));
  const auto hi = whole_number(text.substr(colon + 1));
  if (!lo || !hi) return fail("MIN and MAX of a MIN:MAX range must be whole numbers");
  if (*lo < 1) return fail("MIN must be at least 1 machine");
  if (*hi > limit) return fail("MAX is more than " + std::to_string(limit) + " machines");
  if (*lo > *hi) return fail("MIN is larger than MAX");
  return MachineRange{*lo, *hi};
}

bool is_machine_range(const Assignment& a) {
  return a.path == "num_machines" && a.value.IsScalar() && a.value.Scalar().find(':') != std::string::npos;
}

std::vector<Assignment> expand_machine_range(const Assignment& a, std::vector<Diagnostic>& errors) {
  const FieldSpec* field = find_field("num_machines");
  const int limit = field && field->max ? static_cast<int>(*field->max) : 1024;
  const std::string text = a.value.Scalar();
  std::string problem;
  const auto range = parse_machine_range(text, limit, &problem);
  if (!range) {
    errors.push_back({"num_machines", a.where, problem, text,
                      "N, or MIN:MAX with 1 <= MIN <= MAX <= " + std::to_string(limit),
                      "write e.g. 1:2 (start on up to 2 machines, go on with 1 when one is lost), or one number "
                      "for a fixed world"});
    return {};
  }
  Location where = a.where;
  if (where.origin == Location::Origin::File) where.detail = "from num_machines: " + text;
  return {Assignment{"min_machines", YAML::Node(range->min), where},
          Assignment{"num_machines", YAML::Node(range->max), a.where}};
}

}  // namespace accel::config
