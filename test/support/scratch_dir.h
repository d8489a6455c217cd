// A fresh folder under the system's temporary directory for one test, removed with
// everything in it when the object goes away. mkdtemp names it troupe-NAME-XXXXXX, so
// suites of several builds running at once never share one.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace troupe::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name = "test") {
    std::string pattern = (std::filesystem::temp_directory_path() / ("troupe-" + name + "-XXXXXX")).string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  const std::string& path() const { return path_; }
  // The path of `name` in the folder.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace troupe::testing
