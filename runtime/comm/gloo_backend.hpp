// Creates libtorch's own Gloo backend (c10d::ProcessGroupGloo, linked inside libtorch_cpu) as a
// plain c10d::Backend. This is the only place accel names ProcessGroupGloo: its header needs Gloo's
// headers, which the torch wheel does not ship, so gloo_backend.cpp alone compiles against Debian's
// Gloo headers (declarations only; Debian's libgloo is never linked, so one process holds one Gloo,
// torch's). Every other file talks to the result through c10d::Backend (docs/design/0012).
// Invariant: returns only once every rank of the group is connected, or throws.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace accel::comm {

struct GlooBackendOptions {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};  // every Gloo wait, the connection set-up included
  std::string bind_address;              // the address the TCP device listens on
  int threads = 1;                       // Gloo's worker threads (accel issues one op at a time)
};

// Rendezvouses through `store` (give each backend its own prefix, e.g. a c10d::PrefixStore) and
// connects the full mesh. Throws whatever torch throws; the caller adds rank and op context.
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const GlooBackendOptions& options);

}  // namespace accel::comm
