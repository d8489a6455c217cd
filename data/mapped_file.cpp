#include "data/mapped_file.h"

#include "data/error.h"
#include "util/input_file.h"

namespace troupe::data {

int open_input_file(const std::string& path, const std::string& what) {
  try {
    return util::open_regular_file(path, what);
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
}

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  try {
    return util::read_regular_file(path, what, max_bytes);
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
}

util::MappedFile map_input_file(const std::string& path, const std::string& what) {
  try {
    return util::MappedFile::open(path, what);
  } catch (const util::FileError& e) {
    throw DataError(e.what());
  }
}

}  // namespace troupe::data
