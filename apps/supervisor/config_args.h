// The config part of every subcommand's command line:
//   [CONFIG] [--set field.path=value]... [--megatron-args FILE]
// CONFIG is a textproto; without it (and without --megatron-args) the embedded
// default (configs/default.textproto as built in) is used. --megatron-args reads a
// Megatron-LM argument fragment instead of CONFIG. Each --set applies in order on
// top. The result is validated; every error is one ConfigError naming where.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "config/origins.h"
#include "messages/config.pb.h"

namespace troupe::cli {

struct ConfigArgs {
  std::string config_path;         // positional CONFIG ("" when absent)
  std::string megatron_args;       // --megatron-args FILE ("" when absent)
  std::vector<std::string> sets;   // --set assignments, in command-line order
};

// Registers --set and --megatron-args in `options` and CONFIG as the first
// positional argument, all writing into `args`.
void add_config_options(boost::program_options::options_description& options,
                        boost::program_options::positional_options_description& positional,
                        ConfigArgs& args);

// Usage text for the shared options (appended to each command's --help).
const char* config_options_help();

struct LoadedConfig {
  Config config;
  std::string source;              // the CONFIG path, "Megatron-LM arguments FILE" or the embedded default
  std::vector<std::string> sets;   // the --set assignments applied
  config::Origins origins;         // where each field came from

  // One line for logs and reports: "configs/x.textproto --set a=1 --set b=2".
  std::string describe() const;
};

// Reads, overrides and validates. Throws config::ConfigError.
LoadedConfig load_config(const ConfigArgs& args);

}  // namespace troupe::cli
