#include "engine/sharded/unit_param_buffers.hpp"

#include <c10/core/StorageImpl.h>

#include <algorithm>

namespace accel::engine {
namespace {

// Frees or re-allocates a flat buffer's memory while every view of it stays valid (FSDP's
// storage resize): the views hold the storage, not the data pointer. Any device: the new memory
// comes from the storage's own allocator (the unit allocator on the CPU, the caching allocator on
// a GPU). The contents are not kept: a regrown buffer is always overwritten by its gather. On a
// GPU, memory freed here was last used on the current stream (a gather's wait orders that stream
// after the collective), so the caching allocator reuses it only after that work.
void resize_storage(const at::Tensor& t, size_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (bytes == storage->nbytes()) return;
  at::DataPtr data = bytes ? storage->allocator()->allocate(bytes) : at::DataPtr(nullptr, storage->device());
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(bytes);
}

size_t full_bytes(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

}  // namespace

UnitParamBuffers::UnitParamBuffers(comm::Communicator& comm, PrefetchPolicy policy)
    : comm_(comm), policy_(policy) {}

int UnitParamBuffers::add_unit(std::string name, at::Tensor full, at::Tensor source, bool keeps_storage) {
  Entry e;
  e.name = std::move(name);
  e.full = std::move(full);
  e.source = std::move(source);
  e.keeps_storage = keeps_storage;
  units_.push_back(std::move(e));
  return int(units_.size()) - 1;
}

int UnitParamBuffers::add_staged_unit(std::string name, at::Tensor full, int source_unit) {
  int u = add_unit(std::move(name), std::move(full), at::Tensor(), /*keeps_storage=*/false);
  units_[size_t(u)].source_unit = source_unit;
  return u;
}

void UnitParamBuffers::unstage(Entry& e) {
  if (!e.staged.defined()) return;
  e.staged = at::Tensor();  // the buffer goes back to the pool
  shard_source_->unstage(e.source_unit);
  int u = int(&e - units_.data());
  staged_in_flight_.erase(std::find(staged_in_flight_.begin(), staged_in_flight_.end(), u));
}

void UnitParamBuffers::issue(int u) {
  Entry& e = units_[size_t(u)];
  if (e.state != State::released) return;
  at::Tensor source = e.source;
  if (e.source_unit >= 0) {
    // Every staging buffer held by a gather in flight: complete the oldest (a local wait).
    while (!staged_in_flight_.empty() && int(staged_in_flight_.size()) >= shard_source_->capacity())
      wait(staged_in_flight_.front());
    e.staged = shard_source_->stage(e.source_unit);
    // A host shard for a GPU gather: copied on the current stream, which the collective waits for;
    // the copy is held until the gather completes.
    if (e.staged.device() != e.full.device()) e.staged = e.staged.to(e.full.device(), /*non_blocking=*/true);
    staged_in_flight_.push_back(u);
    source = e.staged;
  }
  if (e.full.storage().nbytes() < full_bytes(e.full)) resize_storage(e.full, full_bytes(e.full));
  if (source.numel() == e.full.numel()) {  // a replicated unit: its "shard" is the whole buffer
    e.full.copy_(source);
    e.state = State::ready;
    unstage(e);
    return;
  }
  e.work = comm_.all_gather(source, e.full);
  e.state = State::in_flight;
  note(TraceEvent::gather_issued, e);
  if (!e.keeps_storage) peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes());
}

int64_t UnitParamBuffers::transient_bytes() const {
  int64_t b = 0;
  for (const auto& e : units_)
    if (!e.keeps_storage) b += int64_t(e.full.storage().nbytes());
  return b;
}

int64_t UnitParamBuffers::kept_bytes() const {
  int64_t b = 0;
  for (const auto& e : units_)
    if (e.keeps_storage) b += int64_t(e.full.storage().nbytes());
  return b;
}

void UnitParamBuffers::wait(int u) {
  Entry& e = units_[size_t(u)];
  issue(u);
  if (e.state != State::in_flight) return;
  e.work->wait();
  e.work.reset();
  e.state = State::ready;
  unstage(e);
  note(TraceEvent::gather_done, e);
}

void UnitParamBuffers::finish(int u) {
  if (units_[size_t(u)].state == State::in_flight) wait(u);
}

void UnitParamBuffers::release(int u) {
  Entry& e = units_[size_t(u)];
  if (e.keeps_storage || e.state == State::released) return;
  if (e.state == State::in_flight) wait(u);  // never free memory a collective is writing
  resize_storage(e.full, 0);
  e.state = State::released;
  note(TraceEvent::reshard, e);
}

void UnitParamBuffers::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].pinned = false;
    release(int(u));
  }
}

void UnitParamBuffers::invalidate_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    Entry& e = units_[u];
    if (e.state == State::in_flight) wait(int(u));
    if (e.keeps_storage)
      e.state = State::released;  // storage kept; the next gather overwrites it
    else
      release(int(u));
  }
}

int UnitParamBuffers::live_units() const {
  int n = 0;
  for (const auto& e : units_) n += (counted(e) && e.state != State::released) ? 1 : 0;
  return n;
}

int64_t UnitParamBuffers::live_numel() const {
  int64_t n = 0;
  for (const auto& e : units_)
    if (counted(e) && e.state != State::released) n += e.full.numel();
  return n;
}

void UnitParamBuffers::prefetch_from(int u, int direction) {
  int reached = 0;
  int64_t ahead_numel = 0;
  for (int v = u + direction; v >= 0 && v < size() && reached < policy_.max_prefetch_units; v += direction) {
    Entry& e = units_[size_t(v)];
    if (e.state != State::released) continue;  // already there (or pinned/kept and fresh)
    if (policy_.max_prefetch_numel > 0 && ahead_numel + e.full.numel() > policy_.max_prefetch_numel) return;
    if (counted(e)) {
      if (policy_.max_live_units > 0 && live_units() + 1 > policy_.max_live_units) return;
      if (policy_.max_live_numel > 0 && live_numel() + e.full.numel() > policy_.max_live_numel) return;
    }
    issue(v);
    ahead_numel += e.full.numel();
    ++reached;
  }
}

}  // namespace accel::engine
