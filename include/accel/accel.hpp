// accel as a library (docs/design/0015): include this one header.
#pragma once

#include "accel/accelerator.hpp"
#include "accel/sampler.hpp"
#include "accel/sync_batch_norm.hpp"
#include "accel/unit.hpp"
