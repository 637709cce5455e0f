// Turns one worker stream (stdout or stderr) into lines: each complete line goes to the launcher's
// terminal as "[rank r] line\n" in a single write() (so ranks never interleave inside a line), and
// unprefixed to the rank's log; the last lines of a rank are kept for the failure summary.
// Invariant: every byte fed is emitted exactly once; a partial last line is emitted by finish(), and
// a line longer than kMaxLine bytes is emitted in pieces rather than buffered without bound.
// On a terminal (`draws_status`), a segment ending in "\r" (not "\r\n") is a status line
// (runtime/common/progress.hpp: "text\x1b[K\r", an empty one clears): it is drawn in place as
// "\r[rank r] text\x1b[K", cut to the terminal's width, and neither logged nor kept in the tail;
// the next complete line, from any rank or stream, first clears it.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace accel::launch {

// The last `capacity` lines one rank printed (stdout and stderr interleaved as read).
class LineTail {
 public:
  explicit LineTail(size_t capacity = 10) : capacity_(capacity) {}
  void push(const std::string& line);
  std::vector<std::string> lines() const { return {lines_.begin(), lines_.end()}; }

 private:
  size_t capacity_;
  std::deque<std::string> lines_;
};

// Writes all of `text` to `fd`, retrying on EINTR and short writes; errors (a closed terminal,
// a full disk) are ignored: losing a copy of the output must not stop supervision.
void write_all(int fd, const std::string& text);

class LineRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // `terminal_fd`: 1 or 2 of the launcher; `log_fd`: the rank's log or -1; `tail` may be null;
  // `draws_status`: terminal_fd is a terminal (status lines drawn in place; otherwise "\r" is a
  // byte like any other).
  LineRelay(std::string prefix, int terminal_fd, int log_fd, LineTail* tail, bool draws_status = false)
      : prefix_(std::move(prefix)), terminal_fd_(terminal_fd), log_fd_(log_fd), tail_(tail),
        draws_status_(draws_status) {}

  void feed(const char* data, size_t size);
  void finish();  // end of stream: emit the partial last line, if any

 private:
  void emit(const std::string& line);
  void draw_status(std::string text);

  std::string prefix_;
  int terminal_fd_;
  int log_fd_;
  LineTail* tail_;
  std::string partial_;
  bool draws_status_ = false;
  bool pending_cr_ = false;  // a read ended in "\r": partial_ was drawn as a status, unless "\n" follows
};

}  // namespace accel::launch
