// The one exception type of troupe_metrics. Every message names the file (and the
// byte offset or line when there is one) and what was wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::metrics {

class MetricsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace troupe::metrics
