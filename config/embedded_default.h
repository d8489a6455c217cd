// configs/default.textproto, compiled into every binary that links troupe_config
// (config/embed_text.cmake turns it into a C++ source at build time).
#pragma once

#include <string_view>

namespace troupe::config {

// The source name errors and logs use for the embedded default.
inline constexpr std::string_view kEmbeddedDefaultName = "embedded default (configs/default.textproto)";

// The text of configs/default.textproto as it was at build time.
std::string_view embedded_default_text();

}  // namespace troupe::config
