#include "data/atomic_file.h"

#include <utility>

#include "data/error.h"

namespace troupe::data {
namespace {

// util's error, as the DataError that callers catch, with the same text.
constexpr util::FileErrorsAs<DataError> translated;

util::AtomicFileWriter open_writer(std::string target) {
  return translated([&] { return util::AtomicFileWriter(std::move(target)); });
}

}  // namespace

AtomicFile::AtomicFile(std::string target) : file_(open_writer(std::move(target))) {}

void AtomicFile::write(const void* bytes, size_t n) {
  translated([&] { file_.write(bytes, n); });
}

void AtomicFile::commit() {
  translated([&] { file_.commit(); });
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  translated([&] { util::write_file_atomically(path, bytes); });
}

}  // namespace troupe::data
