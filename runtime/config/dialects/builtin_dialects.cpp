// One line per dialect accel ships (see builtin_dialects.hpp).
#include "runtime/config/dialects/builtin_dialects.hpp"

namespace accel::config::dialects {

std::vector<plan::Dialect> builtin_dialects() {
  return {
      ddp_dialect(),
      deepspeed_dialect(),
      fsdp_dialect(),
  };
}

}  // namespace accel::config::dialects
