#include "fl/common/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fl {

std::string HostOf(const std::string& address) {
  std::string rest = address;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (rest.rfind(scheme, 0) == 0) {
      rest = rest.substr(std::strlen(scheme));
      break;
    }
  }
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    return close == std::string::npos ? rest.substr(1) : rest.substr(1, close - 1);
  }
  if (std::count(rest.begin(), rest.end(), ':') == 1) return rest.substr(0, rest.find(':'));
  return rest;  // no port, or a bare IPv6 address
}

bool IsLoopbackAddress(const std::string& address) {
  const std::string host = HostOf(address);
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckListenAddress(const std::string& address) {
  size_t colon = std::string::npos;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close != std::string::npos && close + 1 < address.size() && address[close + 1] == ':') {
      colon = close + 1;
    }
  } else if (std::count(address.begin(), address.end(), ':') == 1) {
    colon = address.find(':');
  }
  const std::string example = "e.g. 0.0.0.0:7443, 127.0.0.1:7443 or [::]:7443";
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", address, "' is not host:port (", example, ")"));
  }
  uint32_t port = 0;
  const std::string port_text = address.substr(colon + 1);
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535 ||
      port_text.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen address '", address, "' has no port 0-65535 after the last ':' (", example, ")"));
  }
  return absl::OkStatus();
}

}  // namespace fl
