// A fresh folder under the system's temporary directory for one test, removed after it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace troupe::testing {

struct ScratchDir {
  std::filesystem::path dir;
  explicit ScratchDir(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

}  // namespace troupe::testing
