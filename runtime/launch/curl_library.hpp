#pragma once
// libcurl, loaded when the etcd rendezvous first needs it rather than linked into `accel`: its
// dependency tree (GnuTLS, Kerberos, LDAP, ...) doubled the start of every accel command (2.8 -> 5.8
// ms for `accel --version`), and only an etcd job uses it (docs/design/0034).
#include <curl/curl.h>

namespace accel::launch {

struct CurlLibrary {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL* handle);
  CURLcode (*easy_setopt)(CURL* handle, CURLoption option, ...);
  CURLcode (*easy_perform)(CURL* handle);
  CURLcode (*easy_getinfo)(CURL* handle, CURLINFO info, ...);
  const char* (*easy_strerror)(CURLcode code);
  curl_slist* (*slist_append)(curl_slist* list, const char* text);
  void (*slist_free_all)(curl_slist* list);
};

// libcurl.so.4's functions, loaded and initialised (curl_global_init) once. Throws EtcdError naming
// the library and the package to install when it cannot be loaded.
const CurlLibrary& curl_library();

}  // namespace accel::launch
