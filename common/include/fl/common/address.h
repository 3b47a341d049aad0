// Network addresses as the command line and gRPC take them ("host:port", "[v6]:port",
// optionally with a gRPC scheme such as "ipv4:" or "dns:///").
#ifndef FL_COMMON_ADDRESS_H_
#define FL_COMMON_ADDRESS_H_

#include <string>

#include "absl/status/status.h"

namespace fl {

// The host part of an address: "127.0.0.1:7443" -> "127.0.0.1", "[::1]:7443" -> "::1",
// "dns:///fl.example.org:443" -> "fl.example.org", "::1" -> "::1".
std::string HostOf(const std::string& address);

// True only when the host is "localhost", an address in 127.0.0.0/8, or ::1. A name that merely
// starts like one ("localhost.example.org", "127.0.0.1.nip.io") is not loopback.
bool IsLoopbackAddress(const std::string& address);

// OK when `address` is an address to listen on: "host:port" or "[v6]:port" with a port of
// 0-65535 (0: any free port). INVALID_ARGUMENT otherwise, naming what is missing: gRPC would take
// "127.0.0.1" as port 443 without a word.
absl::Status CheckListenAddress(const std::string& address);

}  // namespace fl

#endif  // FL_COMMON_ADDRESS_H_
