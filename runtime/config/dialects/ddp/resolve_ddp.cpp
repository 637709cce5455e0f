// backend: ddp, plain data parallelism: nothing sharded, gradients all-reduced in buckets of
// ddp.bucket_cap_mb (torch DDP's bucket_cap_mb). With low-precision compute the sharded engine
// keeps replicated fp32 masters (resolve_plan's engine rule).
#include "runtime/config/dialects/builtin_dialects.hpp"

namespace accel::config::dialects {

namespace {

void resolve_ddp(const plan::DialectInput& in, plan::ResolvedPlan& plan) {
  plan.label = "ddp";
  plan.estimate_row = "ddp / zero-0";
  plan.shards = plan::Shards::none;
  plan.bucket_mb = in.job.ddp.bucket_cap_mb;
}

}  // namespace

plan::Dialect ddp_dialect() { return {"ddp", resolve_ddp}; }

}  // namespace accel::config::dialects
