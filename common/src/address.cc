#include "fl/common/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

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

}  // namespace fl
