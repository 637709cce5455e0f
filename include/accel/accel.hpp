// accel as a library: include this one header.
#pragma once

#include "accel/accelerator.hpp"
#include "accel/sampler.hpp"
#include "accel/sharded_init.hpp"
#include "accel/sync_batch_norm.hpp"
#include "accel/unit.hpp"
