// The one exception type of troupe_data. Every message names what was wrong and
// where: the file, and the byte offset, line or field when there is one.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::data {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace troupe::data
