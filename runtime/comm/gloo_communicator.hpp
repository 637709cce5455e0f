// The Gloo communicator: accel's Communicator over libtorch's Gloo backend (TCP), for CPU tensors.
// It rendezvouses through a c10d::Store (the TCPStore rank 0 hosts) and then talks to its peers over
// a full mesh of TCP connections; when every rank can open one shared-memory segment (one host),
// all_reduce, reduce_scatter and all_gather go through it instead (docs/design/0020).
// Invariants: construction returns only once every rank is connected (or throws CommError after the
// timeout); ops run in issue order on one background thread; every wait on a peer is bounded by the
// timeout; after a failed op, later ops fail fast; destruction never hangs on a failed peer.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "runtime/comm/communicator.hpp"

namespace c10d {
class Store;
}

namespace accel::comm {

// Connects rank `rank` of `size` and returns its communicator. Every rank calls this with the same
// `store`, `size` and `store_prefix`. A prefix must be fresh for every communicator built on a store
// (Gloo would read a previous communicator's stale addresses): derive it from the launch attempt.
// `bind_address` is the local address the TCP device listens on ("127.0.0.1" on one machine).
// Throws CommError naming the rank, world, address and timeout when the rendezvous fails.
std::unique_ptr<Communicator> make_gloo_communicator(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                     std::chrono::milliseconds timeout,
                                                     const std::string& bind_address,
                                                     const std::string& store_prefix = "gloo");

// How `comm`'s bytes travel, for logs and benchmarks: "gloo (shared memory)" when its ranks share a
// segment (docs/design/0020), "gloo (tcp)" otherwise; another communicator's backend_name().
std::string transport_of(const Communicator& comm);

}  // namespace accel::comm
