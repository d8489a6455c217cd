// The one exception type of bad configuration input. Its message is the whole
// user-facing error: "<where>: <field path>: <rule broken>", where <where> is
// "file:line", "--set path=value" or "file:line (--megatron-flag)".
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::config {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace troupe::config
