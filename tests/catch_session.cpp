// Catch2's implementation (the session, the reporters, the matchers), compiled once for every test
// executable: catch_main.cpp's main and the executables with a main of their own (the gpu tests, the
// etcd client test) link it. Catch2 v2 is a single header, and its implementation is the costliest
// translation unit of the tests (about 14 s of a 2-core machine's CPU), so it is not compiled twice.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/catch_session.hpp"

int accel::test::run_catch_session(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
