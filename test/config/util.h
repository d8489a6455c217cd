// Helpers shared by the config tests.
#pragma once

#include <functional>
#include <string>

#include "config/error.h"
#include "config/text_format.h"

namespace troupe::config::testing {

// The ConfigError message `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// The message of loading `text` as "t.textproto" (parse + validate).
inline std::string load_error(const std::string& text) {
  return error_of([&] { load_config_text(text, "t.textproto"); });
}

inline std::string source_path(const std::string& relative) {
  return std::string(TROUPE_SOURCE_DIR) + "/" + relative;
}

}  // namespace troupe::config::testing
