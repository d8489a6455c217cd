// Reading configs written in protobuf text format.
#pragma once

#include <string>
#include <string_view>

#include "config/origins.h"
#include "messages/config.pb.h"

namespace troupe::config {

// A config as parsed, before validation, with the line of every field it sets.
struct ParsedConfig {
  Config config;
  Origins origins;
};

// Parses `text` (protobuf text format) named `source_name` in messages. Syntax
// errors, unknown fields, wrong types and repeated singular fields throw one
// ConfigError: "<source>:<line>: <field path>: <what>". Does not validate.
ParsedConfig parse_config_text(std::string_view text, const std::string& source_name);

// Reads a whole file; throws ConfigError naming the path when it cannot.
std::string read_config_file(const std::string& path);

// parse + validate (config/validate.h): the Config is good to run.
Config load_config_text(std::string_view text, const std::string& source_name);
Config load_config_file(const std::string& path);

}  // namespace troupe::config
