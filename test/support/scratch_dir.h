// Temporary folders for tests. ScratchDir: a fresh folder for one test, removed with
// everything in it when the object goes away; mkdtemp names it troupe-NAME-XXXXXX, so
// suites of several builds running at once never share one. fresh_temp_dir: a named
// folder emptied for a run, kept afterwards so that what the run wrote can be read.
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

// The path troupe-NAME under the system's temporary directory, with whatever was there
// removed (the folder itself is not created).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace troupe::testing
