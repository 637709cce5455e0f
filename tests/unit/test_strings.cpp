// runtime/common/strings.hpp: the one join, join_first and trim that messages use.
#include <catch2/catch.hpp>

#include "runtime/common/strings.hpp"

TEST_CASE("join, join_first and trim", "[strings]") {
  CHECK(accel::join({"a", "b", "c"}) == "a, b, c");
  CHECK(accel::join({"one note", "another"}, "; ") == "one note; another");
  CHECK(accel::join({}) == "");
  CHECK(accel::join_first({"a", "b"}, 5) == "a, b");
  CHECK(accel::join_first({"a", "b", "c", "d"}, 2) == "a, b, ... (4 in all)");
  CHECK(accel::trim(" \t yes \r\n") == "yes");
  CHECK(accel::trim(" \r\n") == "");
  CHECK(accel::trim("a b") == "a b");
}
