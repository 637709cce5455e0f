// The launcher's relay on a terminal: a worker's "...\r" status lines drawn in place
// (runtime/launch/line_relay.hpp, runtime/common/progress.hpp).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <string>

#include "support/temp_dir.hpp"
#include "runtime/launch/line_relay.hpp"

using accel::launch::LineRelay;
using accel::launch::LineTail;

namespace {

struct Files {
  accel::test::TempDir dir;
  std::string term_path = (dir.path() / "term").string(), log_path = (dir.path() / "log").string();
  int term = open(term_path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  int log = open(log_path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ~Files() {
    close(term);
    close(log);
  }
};

void feed_in_chunks(LineRelay& relay, const std::string& text, size_t chunk) {
  for (size_t i = 0; i < text.size(); i += chunk) relay.feed(text.data() + i, std::min(chunk, text.size() - i));
}

}  // namespace

TEST_CASE("line relay on a terminal: status lines are drawn in place, not logged, and give way to lines") {
  const std::string text =
      "setup ...\n"
      "ckpt: writing 1 MiB\x1b[K\r"
      "ckpt: writing 2 MiB\x1b[K\r"
      "\x1b[K\r"
      "ckpt took 0.10 s\n"
      "a windows line\r\n"
      "eval: 1/2\x1b[K\r";
  const size_t windows_cr = text.find("line\r\n") + 4;
  for (size_t chunk : {size_t(1), size_t(3), size_t(4), size_t(1000)}) {  // "\r" split from what follows, or not
    Files f;
    LineTail tail;
    {
      LineRelay relay("[rank 0] ", f.term, f.log, &tail, /*draws_status=*/true);
      feed_in_chunks(relay, text, chunk);
      relay.finish();
    }
    INFO("chunk " << chunk);
    // A read that ends in "\r" is drawn as a status at once (the worker may pause there); when
    // "\n" follows, the line replaces it.
    const bool split = (windows_cr + 1) % chunk == 0;
    const std::string windows_line_drawn = split ? "\r[rank 0] a windows line\x1b[K\r\x1b[K" : "";
    CHECK(accel::test::read_file(f.term_path) ==
          "[rank 0] setup ...\n"
          "\r[rank 0] ckpt: writing 1 MiB\x1b[K"
          "\r[rank 0] ckpt: writing 2 MiB\x1b[K"
          "\r\x1b[K"
          "[rank 0] ckpt took 0.10 s\n" +
              windows_line_drawn +
          "[rank 0] a windows line\r\n"
          "\r[rank 0] eval: 1/2\x1b[K"
          "\r\x1b[K");  // the stream ended while its status showed: cleared
    CHECK(accel::test::read_file(f.log_path) == "setup ...\nckpt took 0.10 s\na windows line\r\n");
    CHECK(tail.lines() == std::vector<std::string>{"setup ...", "ckpt took 0.10 s", "a windows line\r"});
  }
}

TEST_CASE("line relay on a terminal: another rank's line clears the status first, in the same write") {
  Files f;
  LineRelay rank0("[rank 0] ", f.term, -1, nullptr, true);
  LineRelay rank1("[rank 1] ", f.term, -1, nullptr, true);
  const std::string status = "eval: 3/8\x1b[K\r";
  rank0.feed(status.data(), status.size());
  rank0.feed("x", 1);  // the byte after "\r" decides it was a status
  rank1.feed("hello\n", 6);
  CHECK(accel::test::read_file(f.term_path) == "\r[rank 0] eval: 3/8\x1b[K\r\x1b[K[rank 1] hello\n");
  rank0.finish();
  rank1.finish();
}

TEST_CASE("line relay off a terminal: a carriage return is an ordinary byte") {
  Files f;
  {
    LineRelay relay("[rank 0] ", f.term, f.log, nullptr);
    const std::string text = "10%\r20%\r\ndone\n";
    relay.feed(text.data(), text.size());
    relay.finish();
  }
  CHECK(accel::test::read_file(f.term_path) == "[rank 0] 10%\r20%\r\n[rank 0] done\n");
  CHECK(accel::test::read_file(f.log_path) == "10%\r20%\r\ndone\n");
}
