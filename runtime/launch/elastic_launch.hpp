// The launch of one machine of an elastic job (docs/design/0027): instead of a fixed world, every
// generation of workers is one round of machine 0's rendezvous (elastic_host.hpp). Machine 0's
// launcher hosts the rendezvous on master_port and the workers' store on a free port it holds for
// the whole launch; every launcher, machine 0's too, joins each round, runs the round's world
// (machines renumbered densely, RANK = new machine rank x workers per machine + local rank,
// ACCEL_RESTART_COUNT = the round), and reports how its group ended. A machine lost, or a group
// that failed, ends the round for all; the next round gathers the launchers that rejoin.
// With rdzv_backend etcd (plan.rdzv_etcd, docs/design/0034) the host is named in etcd under its
// lease instead: machine 0 at the start, and when the host is lost the survivors elect another
// (etcd_rendezvous.hpp), which hosts the rounds and the store from the next round on.
// Invariant: as run_launch(): every worker of a round is reaped before the next round or the return.
#pragma once

#include "runtime/common/job_secret.hpp"

#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/signal_guard.hpp"
#include "runtime/launch/worker_group.hpp"

namespace accel::launch {

// 1 <= min_machines < num_machines.
bool is_elastic(const LaunchPlan& plan);

// Called by run_launch() with its signal guard, the setup it filled (environment, cores, the
// secret's memfd) and the job secret the membership connections authenticate with.
LaunchResult run_elastic_launch(const LaunchPlan& plan, GroupSetup setup, SignalGuard& guard,
                                const secret::JobSecret& secret);

}  // namespace accel::launch
