// Runs Catch2's session over the command line. Catch2 v2 declares its Session only together with
// its implementation, which is compiled once, in tests/catch_session.cpp; a test executable's own
// main calls this instead.
#pragma once

namespace accel::test {

int run_catch_session(int argc, char* argv[]);

}  // namespace accel::test
