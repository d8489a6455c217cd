#include "metrics/files.h"

#include <utility>

#include "metrics/error.h"

namespace troupe::metrics {
namespace {

// util's error, as the MetricsError that callers catch, with the same text.
constexpr util::FileErrorsAs<MetricsError> translated;

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  translated([&] { util::write_file_atomically(path, bytes); });
}

std::string read_file(const std::string& path) {
  return translated([&] { return util::read_file(path); });
}

AppendFile::AppendFile(const std::string& path, Create mode, bool line_oriented)
    : util::AppendFile(translated([&] { return util::AppendFile(path, mode, line_oriented); })) {}

void AppendFile::append(std::string_view bytes) {
  translated([&] { util::AppendFile::append(bytes); });
}

void AppendFile::sync() {
  translated([&] { util::AppendFile::sync(); });
}

}  // namespace troupe::metrics
