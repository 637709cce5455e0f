#include "runtime/launch/etcd_client.hpp"

#include "runtime/launch/curl_library.hpp"

#include <openssl/evp.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace accel::launch {
namespace {

using nlohmann::json;

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// Throws EtcdError when `text` is not base64 (etcd sent something that is not its answer).
std::string unbase64(const std::string& text) {
  if (text.size() % 4 != 0) throw EtcdError("etcd sent a key or value that is not base64");
  std::string out(3 * text.size() / 4 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) throw EtcdError("etcd sent a key or value that is not base64");
  size_t padding = 0;  // EVP_DecodeBlock counts the bytes '=' stands for
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i) ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// int64 fields come as JSON strings from the gateway (proto3 JSON); absent means 0.
int64_t int64_field(const json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) return 0;
  const json& v = object.at(name);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == s.size() && !s.empty()) return value;
  }
  throw EtcdError(std::string("etcd sent a field ") + name + " that is not an integer");
}

json parse(const std::string& what, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw EtcdError("etcd's answer to " + what + " is not a JSON object");
  return j;
}

EtcdValue value_of(const json& kv) {
  EtcdValue v;
  v.value = kv.contains("value") && kv.at("value").is_string() ? unbase64(kv.at("value").get<std::string>()) : "";
  v.create_revision = int64_field(kv, "create_revision");
  v.lease = int64_field(kv, "lease");
  return v;
}

std::optional<EtcdValue> first_kv(const json& range) {
  if (!range.contains("kvs") || !range.at("kvs").is_array() || range.at("kvs").empty()) return std::nullopt;
  return value_of(range.at("kvs").at(0));
}

size_t collect(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  const size_t n = size * count;
  if (body->size() + n > EtcdClient::kMaxResponse) return 0;  // libcurl then fails the transfer
  body->append(data, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_library().easy_cleanup(c); }
};
struct HeaderListDeleter {
  void operator()(curl_slist* l) const { curl_library().slist_free_all(l); }
};

// The gRPC codes for which another member may answer: Unavailable, DeadlineExceeded.
bool worth_another_member(long http_status, const json& error) {
  const int64_t code = error.is_object() && error.contains("code") && error.at("code").is_number_integer()
                           ? error.at("code").get<int64_t>() : 0;
  return http_status >= 500 || code == 14 || code == 4;
}

std::string error_words(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  for (const char* field : {"message", "error"})
    if (j.is_object() && j.contains(field) && j.at(field).is_string()) return j.at(field).get<std::string>();
  return body.substr(0, 200);
}

}  // namespace

EtcdClient::EtcdClient(std::vector<config::RdzvEndpoint> endpoints, std::chrono::milliseconds request_timeout)
    : endpoints_(std::move(endpoints)), timeout_(request_timeout) {
  curl_library();  // loaded and initialised before any thread of the client runs a request
  if (endpoints_.empty()) throw EtcdError("no etcd endpoint given (rdzv_endpoint)");
}

std::string EtcdClient::endpoints_text() const {
  std::string text;
  for (const auto& e : endpoints_) text += (text.empty() ? "" : ",") + e.text();
  return text;
}

std::string EtcdClient::local_address() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return local_address_;
}

std::string EtcdClient::call(const std::string& what, const std::string& path, const std::string& body) {
  size_t start;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    start = preferred_;
  }
  std::string last_error;
  for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
    const size_t index = (start + tried) % endpoints_.size();
    const auto& endpoint = endpoints_[index];
    const CurlLibrary& lib = curl_library();
    std::unique_ptr<CURL, CurlDeleter> curl(lib.easy_init());
    std::unique_ptr<curl_slist, HeaderListDeleter> headers(lib.slist_append(nullptr, "Content-Type: application/json"));
    if (!curl || !headers) throw EtcdError("cannot start an HTTP request to etcd (libcurl is out of memory)");
    const std::string url = "http://" + endpoint.text() + path;
    std::string answer;
    char curl_error[CURL_ERROR_SIZE] = {};
    lib.easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    lib.easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
    lib.easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    lib.easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    lib.easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, collect);
    lib.easy_setopt(curl.get(), CURLOPT_WRITEDATA, &answer);
    lib.easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, curl_error);
    lib.easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
    lib.easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);  // launchers run threads: no SIGALRM for DNS timeouts
    lib.easy_setopt(curl.get(), CURLOPT_PROXY, "");     // etcd is reached directly, whatever http_proxy says
    lib.easy_setopt(curl.get(), CURLOPT_PROTOCOLS_STR, "http");
    const CURLcode rc = lib.easy_perform(curl.get());
    if (rc != CURLE_OK) {
      last_error = endpoint.text() + ": " + (curl_error[0] ? curl_error : lib.easy_strerror(rc));
      continue;
    }
    long status = 0;
    lib.easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
      last_error = endpoint.text() + ": HTTP " + std::to_string(status) + ": " + error_words(answer);
      if (worth_another_member(status, json::parse(answer, nullptr, false))) continue;
      throw EtcdError("etcd refused " + what + ": " + last_error);
    }
    char* local = nullptr;
    lib.easy_getinfo(curl.get(), CURLINFO_LOCAL_IP, &local);
    std::lock_guard<std::mutex> lock(mutex_);
    preferred_ = index;
    if (local) local_address_ = local;
    return answer;
  }
  throw EtcdError("no etcd endpoint of rdzv_endpoint " + endpoints_text() + " answered " + what + " (last: " +
                  last_error + ")");
}

int64_t EtcdClient::grant(int ttl_s, int64_t* granted_ttl_s) {
  const json answer = parse("a lease grant", call("a lease grant", "/v3/lease/grant", json{{"TTL", ttl_s}}.dump()));
  const int64_t id = int64_field(answer, "ID");
  if (id == 0) throw EtcdError("etcd granted no lease: " + answer.dump().substr(0, 200));
  if (granted_ttl_s) *granted_ttl_s = int64_field(answer, "TTL");
  return id;
}

int64_t EtcdClient::keepalive(int64_t lease) {
  // The gateway streams one JSON object per line; the first is the answer to this one renewal.
  const std::string text = call("a lease keepalive", "/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  const json answer = parse("a lease keepalive", text.substr(0, text.find('\n')));
  if (answer.contains("error")) throw EtcdError("etcd refused a lease keepalive: " + error_words(text));
  return answer.contains("result") ? int64_field(answer.at("result"), "TTL") : 0;
}

void EtcdClient::revoke(int64_t lease) {
  call("a lease revoke", "/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
}

std::optional<EtcdValue> EtcdClient::get(const std::string& key) {
  return first_kv(parse("a range of " + key, call("a range of " + key, "/v3/kv/range", json{{"key", base64(key)}}.dump())));
}

void EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", base64(key)}, {"value", base64(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  call("a put of " + key, "/v3/kv/put", body.dump());
}

void EtcdClient::remove(const std::string& key) {
  call("a delete of " + key, "/v3/kv/deleterange", json{{"key", base64(key)}}.dump());
}

bool EtcdClient::create(const std::string& key, const std::string& value, int64_t lease,
                        std::optional<EtcdValue>* existing) {
  json put{{"key", base64(key)}, {"value", base64(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  const json txn{
      {"compare", json::array({{{"key", base64(key)}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", put}}})},
      {"failure", json::array({{{"request_range", {{"key", base64(key)}}}}})}};
  const std::string what = "a create of " + key;
  const json answer = parse(what, call(what, "/v3/kv/txn", txn.dump()));
  const bool succeeded = answer.contains("succeeded") && answer.at("succeeded").is_boolean() &&
                         answer.at("succeeded").get<bool>();
  if (!succeeded && existing) {
    existing->reset();
    if (answer.contains("responses") && answer.at("responses").is_array() && !answer.at("responses").empty()) {
      const json& r = answer.at("responses").at(0);
      if (r.is_object() && r.contains("response_range")) *existing = first_kv(r.at("response_range"));
    }
  }
  return succeeded;
}

}  // namespace accel::launch
