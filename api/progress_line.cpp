#include "api/progress_line.hpp"

#include <cstdio>
#include <sstream>

#include "runtime/common/human_bytes.hpp"
#include "runtime/common/progress.hpp"

namespace accel::api {
namespace {

std::string human_rate(double per_s) {
  char buf[32];
  if (per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  else if (per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", per_s);
  return buf;
}

}  // namespace

std::string format_progress_line(const StepProgress& p, bool progress_bar) {
  std::ostringstream s;
  if (progress_bar) s << progress::bar(p.done, p.total);
  const int width = int(std::to_string(p.total).size());
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %*lld/%lld | loss %.4f | lr %.2e", width, static_cast<long long>(p.done),
                static_cast<long long>(p.total), p.loss, p.lr);
  s << buf;
  if (p.grad_norm) {
    std::snprintf(buf, sizeof buf, " | grad_norm %.3f", *p.grad_norm);
    s << buf;
  }
  std::snprintf(buf, sizeof buf, " | %s tok/s | %.1f ms | peak %s", human_rate(p.tokens_per_s).c_str(),
                p.step_time_s * 1e3, human_bytes(p.peak_mem_bytes).c_str());
  s << buf;
  if (p.eval_loss) {
    std::snprintf(buf, sizeof buf, " | eval_loss %.4f", *p.eval_loss);
    s << buf;
  }
  if (p.loss_scale) {
    std::snprintf(buf, sizeof buf, " | loss_scale %g%s", *p.loss_scale, p.skipped ? ", skipped: overflow" : "");
    s << buf;
  }
  return s.str();
}

}  // namespace accel::api
