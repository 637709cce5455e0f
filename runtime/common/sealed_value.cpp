// Sealed store values; see sealed_value.hpp.
#include "runtime/common/sealed_value.hpp"

#include "runtime/common/errors.hpp"
#include "runtime/common/job_secret.hpp"

namespace accel::secret {

std::string seal(const std::string& key, const std::string& value) {
  return value + "\t" + worker_secret().mac(key + "\n" + value);
}

std::string unseal(const std::string& key, const std::string& stored) {
  const size_t tab = stored.rfind('\t');
  if (tab != std::string::npos) {
    std::string value = stored.substr(0, tab);
    if (worker_secret().verify(key + "\n" + value, std::string_view(stored).substr(tab + 1))) return value;
  }
  throw RunError("the rendezvous store's key " + key + " does not carry this job's MAC: a process outside the job "
                 "wrote it (the store accepts writes from anyone who reaches its port; SECURITY.md). Its value was "
                 "not used; the job stops rather than act on a value it cannot trust");
}

}  // namespace accel::secret
