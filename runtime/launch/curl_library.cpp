#include "runtime/launch/curl_library.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "runtime/launch/etcd_client.hpp"

namespace accel::launch {
namespace {

constexpr const char* kSoname = "libcurl.so.4";

template <typename Function>
void resolve(void* handle, const char* name, Function& into) {
  void* symbol = ::dlsym(handle, name);
  if (!symbol) throw EtcdError(std::string(kSoname) + " has no " + name + ": install Debian's libcurl4");
  into = reinterpret_cast<Function>(symbol);
}

CurlLibrary load() {
  // RTLD_LOCAL: curl's own dependencies stay out of the launcher's global symbol namespace.
  void* handle = ::dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw EtcdError(std::string("rdzv_backend: etcd needs libcurl, which cannot be loaded (") + (why ? why : kSoname) +
                    "); fix: install it (Debian: apt-get install libcurl4)");
  }
  CurlLibrary lib{};
  resolve(handle, "curl_global_init", lib.global_init);
  resolve(handle, "curl_easy_init", lib.easy_init);
  resolve(handle, "curl_easy_cleanup", lib.easy_cleanup);
  resolve(handle, "curl_easy_setopt", lib.easy_setopt);
  resolve(handle, "curl_easy_perform", lib.easy_perform);
  resolve(handle, "curl_easy_getinfo", lib.easy_getinfo);
  resolve(handle, "curl_easy_strerror", lib.easy_strerror);
  resolve(handle, "curl_slist_append", lib.slist_append);
  resolve(handle, "curl_slist_free_all", lib.slist_free_all);
  // Before any thread of a client runs a request (curl_global_init is not thread-safe).
  if (lib.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw EtcdError("libcurl failed to initialise");
  return lib;  // the handle stays open for the process's life
}

}  // namespace

const CurlLibrary& curl_library() {
  static std::once_flag once;
  static CurlLibrary lib;
  std::call_once(once, [] { lib = load(); });  // a throw leaves the flag unset: the next call retries
  return lib;
}

}  // namespace accel::launch
