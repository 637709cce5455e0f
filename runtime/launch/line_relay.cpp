// Line splitting, prefixing and teeing of worker output; see line_relay.hpp.
#include "runtime/launch/line_relay.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accel::launch {

void LineTail::push(const std::string& line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.push_back(line);
}

void write_all(int fd, const std::string& text) {
  if (fd < 0) return;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

namespace {

// The status line on the launcher's terminal (one for every relay: the ranks share the screen).
struct ShownStatus {
  int fd = -1;  // where it is drawn; -1: none
  std::string prefix;
};
ShownStatus& shown_status() {
  static ShownStatus status;
  return status;
}

constexpr const char* kClearLine = "\r\x1b[K";

}  // namespace

void LineRelay::feed(const char* data, size_t size) {
  const char* end = data + size;
  if (pending_cr_ && data < end) {
    pending_cr_ = false;
    if (*data == '\n') partial_ += '\r';  // "\r\n" after all: an ordinary line, kept as written
    else partial_.clear();                // the status it was, already drawn
  }
  while (data < end) {
    const char* stop = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    if (draws_status_) {
      const char* cr = static_cast<const char*>(std::memchr(data, '\r', static_cast<size_t>((stop ? stop : end) - data)));
      if (cr) stop = cr;
    }
    if (!stop) {
      partial_.append(data, end);
      while (partial_.size() > kMaxLine) {
        emit(partial_.substr(0, kMaxLine));
        partial_.erase(0, kMaxLine);
      }
      return;
    }
    partial_.append(data, stop);
    data = stop + 1;
    if (*stop == '\r') {
      if (data == end) {  // a status (drawn now: the worker may pause), or half of "\r\n"
        draw_status(partial_);
        pending_cr_ = true;
        return;
      }
      if (*data != '\n') {
        draw_status(partial_);
        partial_.clear();
        continue;
      }
      partial_ += '\r';
      ++data;
    }
    emit(partial_);
    partial_.clear();
  }
}

void LineRelay::finish() {
  if (pending_cr_) {  // a status as the stream's last words: cleared below
    pending_cr_ = false;
    partial_.clear();
  }
  ShownStatus& shown = shown_status();
  if (shown.fd >= 0 && shown.prefix == prefix_ && shown.fd == terminal_fd_) {
    write_all(shown.fd, kClearLine);
    shown.fd = -1;
  }
  if (partial_.empty()) return;
  emit(partial_);
  partial_.clear();
}

void LineRelay::emit(const std::string& line) {
  ShownStatus& shown = shown_status();
  std::string clear;
  if (shown.fd >= 0) {  // the status gives way to the line (the next draw brings it back)
    if (shown.fd == terminal_fd_) clear = kClearLine;
    else write_all(shown.fd, kClearLine);
    shown.fd = -1;
  }
  write_all(terminal_fd_, clear + prefix_ + line + "\n");
  write_all(log_fd_, line + "\n");
  if (tail_) tail_->push(line);
}

void LineRelay::draw_status(std::string text) {
  static const std::string kClearToEnd = "\x1b[K";
  while (text.size() >= kClearToEnd.size() && text.compare(text.size() - kClearToEnd.size(), kClearToEnd.size(), kClearToEnd) == 0)
    text.resize(text.size() - kClearToEnd.size());
  ShownStatus& shown = shown_status();
  if (text.empty()) {
    if (shown.fd >= 0) write_all(shown.fd, kClearLine);
    shown.fd = -1;
    return;
  }
  // Wider than the terminal, it would wrap, and "\r" returns only to its last row.
  struct winsize ws {};
  if (ioctl(terminal_fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_col > prefix_.size() + 1 &&
      prefix_.size() + text.size() >= ws.ws_col)
    text.resize(ws.ws_col - prefix_.size() - 1);
  if (shown.fd >= 0 && shown.fd != terminal_fd_) write_all(shown.fd, kClearLine);
  write_all(terminal_fd_, "\r" + prefix_ + text + "\x1b[K");
  shown = {terminal_fd_, prefix_};
}

}  // namespace accel::launch
