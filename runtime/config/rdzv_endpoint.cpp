#include "runtime/config/rdzv_endpoint.hpp"

#include <cctype>

namespace accel::config {
namespace {

std::string trimmed(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::optional<RdzvEndpoint> parse_one(const std::string& item, std::string* problem) {
  if (item.find("://") != std::string::npos) {
    *problem = "\"" + item + "\" has a scheme: write host:port (accel speaks plain http to etcd)";
    return std::nullopt;
  }
  RdzvEndpoint e;
  std::string port;
  if (!item.empty() && item[0] == '[') {  // [v6]:port
    const size_t close = item.find(']');
    if (close == std::string::npos || close + 1 >= item.size() || item[close + 1] != ':') {
      *problem = "\"" + item + "\" is not [IPv6]:port";
      return std::nullopt;
    }
    e.host = item.substr(1, close - 1);
    port = item.substr(close + 2);
  } else {
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || item.find(':') != colon) {
      *problem = "\"" + item + "\" is not host:port (an IPv6 address goes in brackets, [addr]:port)";
      return std::nullopt;
    }
    e.host = item.substr(0, colon);
    port = item.substr(colon + 1);
  }
  if (e.host.empty()) {
    *problem = "\"" + item + "\" has no host";
    return std::nullopt;
  }
  for (char c : e.host)
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c)) || c == '/' ||
        c == '@' || c == '?' || c == '#') {
      *problem = "\"" + item + "\" has a character a host name cannot have";
      return std::nullopt;
    }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    *problem = "\"" + item + "\" has no port 1..65535 after the colon";
    return std::nullopt;
  }
  e.port = std::stoi(port);
  return e;
}

}  // namespace

std::string RdzvEndpoint::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<std::vector<RdzvEndpoint>> parse_rdzv_endpoints(const std::string& text, std::string* problem) {
  std::vector<RdzvEndpoint> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) {
      *problem = out.empty() && comma == std::string::npos ? "no endpoint" : "an empty item between commas";
      return std::nullopt;
    }
    auto e = parse_one(item, problem);
    if (!e) return std::nullopt;
    out.push_back(*e);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace accel::config
