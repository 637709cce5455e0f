// ShmCollectives (docs/design/0020). The segment: a header page (identity, a futex word, a failure
// flag, one arrival counter per rank on its own cache line), then one slot of kSlotBytes per rank.
#include "runtime/comm/shm_collectives.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>

#include "runtime/comm/shard_layout.hpp"
#include "runtime/common/job_secret.hpp"
#include "runtime/common/shm_segment_name.hpp"

namespace accel::comm {
namespace {

constexpr uint64_t kMagic = 0x616363656c73686dULL;  // "accelshm"
constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
constexpr int kSpinChecks = 1000;  // a few microseconds before sleeping on the futex

// A rank's arrivals, and the signature of the op it arrived in, by the arrival's parity: a peer can
// be at most one arrival ahead of a rank that has not yet arrived, so the slot of arrival n stays
// unchanged until every rank has passed it.
struct alignas(kLine) ArrivalCounter {
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> signature[2];
};

// What every rank of one collective agrees on: its kind, element count and element size.
enum class OpKind : uint64_t { AllReduce = 1, ReduceScatter = 2, AllGather = 3 };

uint64_t signature_of(OpKind kind, int64_t count, size_t elem_size) {
  return (static_cast<uint64_t>(kind) << 60) | (static_cast<uint64_t>(elem_size & 0xff) << 52) |
         (static_cast<uint64_t>(count) & ((uint64_t{1} << 52) - 1));
}

std::string describe_signature(uint64_t signature) {
  static const char* const kinds[] = {"an unknown op", "all_reduce", "reduce_scatter", "all_gather"};
  const uint64_t kind = signature >> 60;
  return std::string(kinds[kind < 4 ? kind : 0]) + " of " + std::to_string(signature & ((uint64_t{1} << 52) - 1)) +
         " elements of " + std::to_string((signature >> 52) & 0xff) + " bytes";
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Shared (not FUTEX_PRIVATE): the word lives in a mapping several processes share.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds within) {
  timespec ts{static_cast<time_t>(within.count() / 1000000000), static_cast<long>(within.count() % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

std::string system_error(const std::string& what, int err) { return what + ": " + std::strerror(err); }

int64_t clamp_piece(int64_t shard_size, int64_t offset, int64_t piece) {
  return std::clamp<int64_t>(shard_size - offset, 0, piece);
}

}  // namespace

struct ShmCollectives::Header {
  uint64_t magic;
  std::atomic<uint64_t> token;  // written last by the creator: attach() trusts nothing before it
  uint64_t world;
  uint64_t slot_bytes;
  alignas(kLine) std::atomic<uint32_t> epoch;    // bumped by every arrival; waiters sleep on it
  alignas(kLine) std::atomic<uint32_t> waiters;  // ranks asleep on epoch (arrivals skip the wake when 0)
  alignas(kLine) std::atomic<uint32_t> failed;     // set once the first failure's reason is written
  std::atomic<uint32_t> reason_claimed;             // the first rank to fail writes `reason`
  char reason[256];                                 // NUL-terminated: what failed, on which rank
  // Followed by `world` ArrivalCounters.
  ArrivalCounter* arrivals() {
    return reinterpret_cast<ArrivalCounter*>(reinterpret_cast<char*>(this) + sizeof(Header));
  }
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

size_t ShmCollectives::header_bytes(int world) {
  return round_up(sizeof(Header) + static_cast<size_t>(world) * sizeof(ArrivalCounter), kPage);
}

size_t ShmCollectives::segment_bytes(int world) {
  return header_bytes(world) + static_cast<size_t>(world) * kSlotBytes;
}

ShmCollectives::ShmCollectives(int rank, int world, std::chrono::milliseconds timeout, std::string name, void* base,
                               size_t bytes)
    : rank_(rank),
      world_(world),
      timeout_(timeout),
      name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      header_(static_cast<Header*>(base)) {}

ShmCollectives::~ShmCollectives() {
  if (rank_ == 0) unlink_name();
  munmap(base_, bytes_);
}

std::unique_ptr<ShmCollectives> ShmCollectives::create(int world, std::chrono::milliseconds timeout) {
  if (world < 2) throw std::runtime_error("a shared-memory segment needs at least 2 ranks");
  // Name and token from the kernel's CSPRNG: another user can neither guess the name to plant a
  // segment first nor forge the token. The launcher's pid in the name lets it remove a segment a
  // rank left when it was killed before unlinking it (runtime/launch/shm_sweep.hpp).
  uint64_t token = 0;
  while (token == 0) secret::random_bytes(&token, sizeof token);
  const std::string name = "/" + shm_name::segment_prefix(getppid()) + secret::random_hex(16);
  const size_t bytes = segment_bytes(world);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error(system_error("shm_open " + name, errno));
  auto fail = [&](const std::string& what, int err) {
    close(fd);
    shm_unlink(name.c_str());
    throw std::runtime_error(system_error(what, err));
  };
  if (fchmod(fd, 0600) != 0) fail("fchmod of " + name, errno);  // whatever the umask
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) fail("ftruncate of " + name, errno);
  // Reserve the pages now: a full /dev/shm fails here, not as SIGBUS in the middle of a step.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    fail("reserving " + std::to_string(bytes >> 20) + " MiB in /dev/shm for " + name, err);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) fail("mmap of " + name, errno);
  close(fd);
  auto* header = new (base) Header{};
  header->magic = kMagic;
  header->world = static_cast<uint64_t>(world);
  header->slot_bytes = kSlotBytes;
  for (int r = 0; r < world; ++r) new (&header->arrivals()[r]) ArrivalCounter{};
  header->token.store(token, std::memory_order_release);
  return std::unique_ptr<ShmCollectives>(new ShmCollectives(0, world, timeout, name, base, bytes));
}

std::string ShmCollectives::descriptor() const {
  std::ostringstream out;
  out << name_ << " " << header_->token.load(std::memory_order_acquire) << " " << world_;
  return out.str();
}

std::unique_ptr<ShmCollectives> ShmCollectives::attach(const std::string& descriptor, int rank, int world,
                                                       std::chrono::milliseconds timeout) {
  std::istringstream in(descriptor);
  std::string name;
  uint64_t token = 0;
  int described_world = 0;
  if (!(in >> name >> token >> described_world) || described_world != world || rank <= 0 || rank >= world) {
    throw std::runtime_error("bad shared-memory descriptor '" + descriptor + "' for rank " + std::to_string(rank) +
                             " of " + std::to_string(world));
  }
  if (name.rfind("/accel-shm-", 0) != 0 || name.find('/', 1) != std::string::npos)
    throw std::runtime_error("bad shared-memory descriptor '" + descriptor + "': not a segment name accel creates");
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW, 0);
  if (fd < 0) {
    const int err = errno;
    const std::string what = system_error("shm_open " + name, err);
    if (err == ENOENT) throw ShmNotHere(what + " (rank 0 is on another host)");
    throw std::runtime_error(what);
  }
  // Before anything is mapped: the segment must be this user's, private to it, and of the size this
  // world needs. A name another user created (or replaced) is never attached: its owner could read
  // every gradient piece this rank writes there.
  const size_t bytes = segment_bytes(world);
  struct stat st {};
  std::string refused;
  if (fstat(fd, &st) != 0) refused = system_error("fstat", errno);
  else if (!S_ISREG(st.st_mode)) refused = "it is not a regular file";
  else if (st.st_uid != geteuid())
    refused = "it belongs to uid " + std::to_string(st.st_uid) + ", not to this job's user (uid " +
              std::to_string(geteuid()) + ")";
  else if ((st.st_mode & 07777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    refused = std::string("its mode is ") + mode + ", not 0600";
  } else if (static_cast<size_t>(st.st_size) != bytes)
    refused = "it does not have the size this world needs";
  if (!refused.empty()) {
    close(fd);
    throw std::runtime_error("shared-memory segment " + name + " is refused: " + refused);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) throw std::runtime_error(system_error("mmap of " + name, err));
  auto* header = static_cast<Header*>(base);
  if (header->token.load(std::memory_order_acquire) != token || header->magic != kMagic ||
      header->world != static_cast<uint64_t>(world) || header->slot_bytes != kSlotBytes) {
    munmap(base, bytes);
    throw std::runtime_error("shared-memory segment " + name + " is not the one rank 0 described");
  }
  return std::unique_ptr<ShmCollectives>(new ShmCollectives(rank, world, timeout, name, base, bytes));
}

void ShmCollectives::unlink_name() noexcept {
  if (unlinked_) return;
  unlinked_ = true;
  shm_unlink(name_.c_str());
}

char* ShmCollectives::slot(int rank, int half) const {
  return static_cast<char*>(base_) + header_bytes(world_) + static_cast<size_t>(rank) * kSlotBytes +
         static_cast<size_t>(half) * (kSlotBytes / 2);
}

void ShmCollectives::mark_failed(const std::string& reason) noexcept {
  if (header_->reason_claimed.exchange(1, std::memory_order_acq_rel) == 0) {
    const std::string text = reason.empty() ? "rank " + std::to_string(rank_) + " failed" : reason;
    const size_t n = std::min(text.size(), sizeof(header_->reason) - 1);
    std::memcpy(header_->reason, text.data(), n);
    header_->reason[n] = '\0';
  }
  header_->failed.store(1, std::memory_order_seq_cst);
  header_->epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&header_->epoch);
}

std::string ShmCollectives::failure_reason() const {
  // The reason is complete once `failed` is set (the failing rank writes it first). A rank that
  // marks failed without winning the claim still sets `failed`: then the first rank's text may be
  // mid-write for a moment, so it is read up to its terminator or the buffer's end.
  const char* r = header_->reason;
  return std::string(r, strnlen(r, sizeof(header_->reason)));
}

void ShmCollectives::barrier(uint64_t signature) {
  ArrivalCounter* arrivals = header_->arrivals();
  if (header_->failed.load(std::memory_order_acquire) != 0) {
    throw std::runtime_error("shared memory: an earlier collective failed: " + failure_reason());
  }
  ++arrivals_;
  arrivals[rank_].signature[arrivals_ & 1].store(signature, std::memory_order_relaxed);
  arrivals[rank_].count.store(arrivals_, std::memory_order_release);
  header_->epoch.fetch_add(1, std::memory_order_seq_cst);
  if (header_->waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(&header_->epoch);

  auto all_arrived = [&] {
    for (int r = 0; r < world_; ++r) {
      if (arrivals[r].count.load(std::memory_order_acquire) < arrivals_) return false;
    }
    return true;
  };
  auto check_failed = [&] {
    if (header_->failed.load(std::memory_order_acquire) != 0) {
      throw std::runtime_error("shared memory: the collective failed while this rank waited: " + failure_reason());
    }
  };
  // Ranks that issued different ops (or sizes) meet at the same arrival: fail at once, naming both,
  // instead of going on with each other's bytes. The acquire loads of the counts made the peers'
  // signatures of this arrival visible.
  auto check_signatures = [&] {
    for (int r = 0; r < world_; ++r) {
      const uint64_t theirs = arrivals[r].signature[arrivals_ & 1].load(std::memory_order_relaxed);
      if (theirs == signature) continue;
      const std::string what = "rank " + std::to_string(rank_) + " is in " + describe_signature(signature) +
                               " but rank " + std::to_string(r) + " is in " + describe_signature(theirs) +
                               " (every rank must issue the same collectives in the same order)";
      mark_failed(what);
      throw std::runtime_error("shared memory: " + what);
    }
  };
  for (int i = 0; i < kSpinChecks; ++i) {
    if (all_arrived()) return check_signatures();
    check_failed();
    cpu_relax();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const uint32_t epoch = header_->epoch.load(std::memory_order_seq_cst);
    if (all_arrived()) return check_signatures();
    check_failed();
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) {
      std::ostringstream missing;
      for (int r = 0; r < world_; ++r) {
        if (arrivals[r].count.load(std::memory_order_acquire) >= arrivals_) continue;
        missing << (missing.tellp() > 0 ? ", " : "") << r;
      }
      const std::string what = "timed out after " + std::to_string(timeout_.count()) + " ms waiting for rank(s) " +
                               missing.str();
      mark_failed("rank " + std::to_string(rank_) + " " + what);
      throw std::runtime_error("shared memory: " + what);
    }
    header_->waiters.fetch_add(1, std::memory_order_seq_cst);
    futex_wait(&header_->epoch, epoch, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    header_->waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmCollectives::all_reduce(void* data, int64_t count, size_t elem_size, Reduce reduce) {
  const uint64_t signature = signature_of(OpKind::AllReduce, count, elem_size);
  auto* bytes = static_cast<char*>(data);
  const int64_t piece = static_cast<int64_t>(kSlotBytes / 2 / elem_size);
  for (int64_t offset = 0; offset < count; offset += piece) {
    const int64_t len = std::min(piece, count - offset);
    const int half = next_half();
    char* mine = slot(rank_, half);
    std::memcpy(mine, bytes + offset * elem_size, static_cast<size_t>(len) * elem_size);
    barrier(signature);
    // This rank's share of the piece, summed over the slots in rank order into slot 0's copy of that
    // share: until the next barrier only this rank touches a share, in any slot.
    const ShardRange share = shard_range(len, world_, rank_);
    if (share.size() > 0) {
      const size_t at = static_cast<size_t>(share.begin) * elem_size;
      char* sum = slot(0, half) + at;
      for (int r = 1; r < world_; ++r) reduce(sum, sum, slot(r, half) + at, static_cast<size_t>(share.size()));
    }
    barrier(signature);
    std::memcpy(bytes + offset * elem_size, slot(0, half), static_cast<size_t>(len) * elem_size);
  }
}

void ShmCollectives::reduce_scatter(const void* input, void* output, int64_t count, size_t elem_size, Reduce reduce) {
  const uint64_t signature = signature_of(OpKind::ReduceScatter, count, elem_size);
  const auto* in = static_cast<const char*>(input);
  auto* out = static_cast<char*>(output);
  // A piece gives every rank a region of `piece` elements in each slot half.
  const int64_t piece = static_cast<int64_t>(kSlotBytes / 2 / elem_size / static_cast<size_t>(world_));
  const ShardRange own = shard_range(count, world_, rank_);
  for (int64_t offset = 0; offset < shard_chunk(count, world_); offset += piece) {
    const int half = next_half();
    char* mine = slot(rank_, half);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const ShardRange s = shard_range(count, world_, r);
      const int64_t len = clamp_piece(s.size(), offset, piece);
      std::memcpy(mine + static_cast<size_t>(r * piece) * elem_size, in + (s.begin + offset) * elem_size,
                  static_cast<size_t>(len) * elem_size);
    }
    barrier(signature);
    const int64_t len = clamp_piece(own.size(), offset, piece);
    if (len == 0) continue;
    // Every rank's term in rank order, as all_reduce adds them, so both give the same bits. The
    // partial sums go to this rank's own region of its slot, which no peer reads; `dst` is written
    // by the last add only, after every read of this piece (so `out` may alias `in`).
    const size_t region = static_cast<size_t>(rank_ * piece) * elem_size;
    auto term = [&](int r) -> const char* {
      return r == rank_ ? in + (own.begin + offset) * elem_size : slot(r, half) + region;
    };
    char* dst = out + offset * elem_size;
    const char* acc = term(0);
    for (int r = 1; r < world_; ++r) {
      char* sum = r == world_ - 1 ? dst : mine + region;
      reduce(sum, acc, term(r), static_cast<size_t>(len));
      acc = sum;
    }
  }
}

void ShmCollectives::all_gather(void* output, int64_t count, size_t elem_size) {
  const uint64_t signature = signature_of(OpKind::AllGather, count, elem_size);
  auto* out = static_cast<char*>(output);
  const int64_t piece = static_cast<int64_t>(kSlotBytes / 2 / elem_size);
  const ShardRange own = shard_range(count, world_, rank_);
  for (int64_t offset = 0; offset < shard_chunk(count, world_); offset += piece) {
    const int half = next_half();
    std::memcpy(slot(rank_, half), out + (own.begin + offset) * elem_size,
                static_cast<size_t>(clamp_piece(own.size(), offset, piece)) * elem_size);
    barrier(signature);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const ShardRange s = shard_range(count, world_, r);
      std::memcpy(out + (s.begin + offset) * elem_size, slot(r, half),
                  static_cast<size_t>(clamp_piece(s.size(), offset, piece)) * elem_size);
    }
  }
}

}  // namespace accel::comm
