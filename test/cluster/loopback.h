// A blocking TCP connection to 127.0.0.1:port, for the suites and the benchmark that
// play strangers (or workers) against a supervisor's gate; -1 when it cannot connect.
#pragma once

#include <cstdint>

namespace troupe::testing {

int dial_loopback(uint16_t port);

}  // namespace troupe::testing
