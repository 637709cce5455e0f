// Catch2's main, compiled once for every test executable (Catch2's implementation: catch_session.cpp).
#include "tests/support/catch_session.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

int main(int argc, char* argv[]) {
  const int status = accel::test::run_catch_session(argc, argv);
  // The session and every test's objects are gone by now; what remains is the static teardown,
  // which in a torch-linked executable deregisters each of libtorch's operators again (a tenth of
  // a second per ctest entry). Flush the report and leave without it.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
}
