// FaultCommunicator: a Communicator in front of another that tells the FaultInjector about every
// collective before issuing it, so ACCEL_FAULT's collective points fire inside a real collective of
// the real communicator (fault_injection.hpp): it dies or stops there, issues late, or issues
// another collective than its peers (none, a barrier, half the all_reduce).
// Invariants: apart from the armed fault, every op is forwarded unchanged, in order, to the wrapped communicator; stats() mirror
// the wrapped one's after each op; groups from split() are wrapped too, so a fault fires in whichever
// group issues the step's first collective. The trainer uses it only when such a fault is armed.
#pragma once

#include <memory>

#include "runtime/comm/communicator.hpp"
#include "trainer/fault_injection.hpp"

namespace accel::train {

// `inner` (borrowed, or owned when `owned` is set) must outlive the result; so must `faults`.
std::unique_ptr<comm::Communicator> make_fault_communicator(comm::Communicator& inner, const FaultInjector& faults,
                                                            std::unique_ptr<comm::Communicator> owned = nullptr);

}  // namespace accel::train
