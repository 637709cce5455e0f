// Catch2 for test files that also use libtorch. A libtorch built with glog (Debian's 1.13 was), whose
// logging.h defines CHECK(cond) as "abort the process on failure"; whichever header comes last owns
// CHECK. This header includes ATen (and so glog) first and Catch second, so CHECK stays Catch's
// reported, non-fatal assertion. Include it first, instead of catch.hpp, in every test file that uses libtorch.
#pragma once

#include <ATen/ATen.h>

#include <catch2/catch.hpp>

// Spells a macro's expansion, to pin CHECK to Catch.
#define ACCEL_TEST_STRINGIFY_(...) #__VA_ARGS__
#define ACCEL_TEST_EXPANSION(...) ACCEL_TEST_STRINGIFY_(__VA_ARGS__)

namespace accel::test {
constexpr bool spelled_with(const char* text, const char* needle) {
  for (; *text; ++text) {
    const char* a = text;
    const char* b = needle;
    while (*a && *b && *a == *b) ++a, ++b;
    if (!*b) return true;
  }
  return false;
}
}  // namespace accel::test

// Put at the end of a test file: fails the build if a later include handed CHECK back to glog.
#define ACCEL_ASSERT_CHECK_IS_CATCH()                                                               \
  static_assert(::accel::test::spelled_with(ACCEL_TEST_EXPANSION(CHECK(true)), "ContinueOnFailure"), \
                "CHECK is not Catch's: include support/catch_with_torch.hpp before other headers")
