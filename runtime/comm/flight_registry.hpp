// The process's collective flight recorder: every communicator's FlightRing, and the dump of all
// of them to <dir>/rank<R>.json that the launcher reads after a fault (docs/design/0025).
// Dumps happen on a queue's first failed op, on SIGUSR2 (kFlightDumpSignal; the handler only writes
// a byte to a pipe, a watcher thread dumps), when a communicator closes, and on a fatal signal
// (SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL: the handler asks the watcher for a dump and waits up to
// 2 s for it, then the process dies of the signal as it would have).
// Invariants: a dump reads the rings without stopping their writers (a queue thread stuck in a
// collective does not block it); dump files appear whole (written aside, then renamed); without a
// dump target nothing is written and no signal handler is installed. Torch-free.
#pragma once

#include <signal.h>

#include <memory>
#include <string>

#include "runtime/comm/flight_ring.hpp"
#include "runtime/diag/flight_records.hpp"

namespace accel::comm {

// The signal `accel launch` sends a worker for a dump (also usable by hand: kill -USR2 <pid>).
constexpr int kFlightDumpSignal = SIGUSR2;

// False when ACCEL_FLIGHT_RECORDER=0 (read once): communicators created then keep no ring.
bool flight_recording_enabled();
// Overrides the variable for communicators created from now on (the cost benchmark, tests).
void set_flight_recording(bool on);

// A ring for a new communicator of `group`, registered for dumps; null when recording is off.
std::shared_ptr<FlightRing> open_flight_ring(FlightGroup group);
// Its communicator is being destroyed. With a dump target the ring stays registered (the newest
// few closed ones) and the process dumps, so a rank that finished early leaves its records; without
// one the ring is dropped.
void close_flight_ring(const std::shared_ptr<FlightRing>& ring);

// Where dumps go: <dir>/rank<rank>.json; "" turns dumps off. Unless set here first, the first
// open_flight_ring() reads ACCEL_FLIGHT_DIR, RANK and WORLD_SIZE (set by accel launch). A non-empty
// dir starts the watcher thread and installs the SIGUSR2 and fatal-signal handlers, once per
// process, each only where the signal has its default disposition (a program's own handler stays).
void set_flight_dump_target(const std::string& dir, int rank, int world);

// The host of every rank (index: global rank), written into every later dump (RankDump::hosts).
void set_flight_world_hosts(std::vector<std::string> hosts);

// Every registered ring's records, with this process's identity.
flight::RankDump collect_flight_records(const std::string& reason);

// Writes collect_flight_records(reason) to the target. Thread-safe; never throws. Returns the path
// written, or "" (no target, or the write failed: a line on stderr says why).
std::string dump_flight_records(const std::string& reason) noexcept;

}  // namespace accel::comm
