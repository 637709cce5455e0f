// Values accel writes to the c10d rendezvous store and reads back to act on (the shared-memory
// segment's descriptor, checkpoint storage nonces and commit votes, "done" flags): sealed with a
// MAC under the job secret (job_secret.hpp), because the store accepts reads and writes from anyone
// who reaches its port (PyTorch's store has no authentication; SECURITY.md).
// Format: "<value>\t<HMAC-SHA256(secret, key "\n" value), hex>". The key is in the MAC, so a sealed
// value cannot be moved to another key.
// Invariant: unseal() returns a value only when its MAC verifies; otherwise it throws RunError
// naming the key, and the caller's job ends at once with that message.
#pragma once

#include <string>

namespace accel::secret {

std::string seal(const std::string& key, const std::string& value);
std::string unseal(const std::string& key, const std::string& stored);

}  // namespace accel::secret
