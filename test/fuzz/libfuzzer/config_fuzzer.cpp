// libFuzzer: any bytes as a config text. Parsing and validation either give a Config or
// throw ConfigError; anything else (another exception, a crash, a sanitizer report) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/error.h"
#include "config/text_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    troupe::config::load_config_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.textproto");
  } catch (const troupe::config::ConfigError&) {
  }
  return 0;
}
