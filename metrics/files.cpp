#include "metrics/files.h"

#include <utility>

#include "metrics/error.h"

namespace troupe::metrics {
namespace {

// util's error, as the MetricsError that callers catch, with the same text.
template <class F>
auto translated(F&& f) {
  try {
    return f();
  } catch (const util::FileError& e) {
    throw MetricsError(e.what());
  }
}

util::AppendFile open_append(const std::string& path, AppendFile::Create mode, bool line_oriented) {
  return translated([&] {
    return util::AppendFile(path,
                            mode == AppendFile::Create::kExclusive ? util::AppendFile::Create::kExclusive
                                                                   : util::AppendFile::Create::kAppend,
                            line_oriented);
  });
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  translated([&] { util::write_file_atomically(path, bytes); });
}

std::string read_file(const std::string& path) {
  return translated([&] { return util::read_file(path); });
}

AppendFile::AppendFile(const std::string& path, Create mode, bool line_oriented)
    : file_(open_append(path, mode, line_oriented)) {}

AppendFile::AppendFile(AppendFile&& other) noexcept = default;
AppendFile& AppendFile::operator=(AppendFile&& other) noexcept = default;
AppendFile::~AppendFile() = default;

void AppendFile::append(std::string_view bytes) {
  translated([&] { file_.append(bytes); });
}

void AppendFile::sync() {
  translated([&] { file_.sync(); });
}

}  // namespace troupe::metrics
