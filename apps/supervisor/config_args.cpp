#include "apps/supervisor/config_args.h"

#include "config/embedded_default.h"
#include "config/error.h"
#include "config/megatron_args.h"
#include "config/override.h"
#include "config/text_format.h"
#include "config/validate.h"

namespace troupe::cli {

namespace po = boost::program_options;

void add_config_options(po::options_description& options,
                        po::positional_options_description& positional, ConfigArgs& args) {
  options.add_options()
      ("config", po::value<std::string>(&args.config_path)->value_name("CONFIG"),
       "config in protobuf text format (default: the embedded default)")
      ("set", po::value<std::vector<std::string>>(&args.sets)->composing()->value_name("PATH=VALUE"),
       "override one field, e.g. --set batch.global_batch_size=32 (repeatable)")
      ("megatron-args", po::value<std::string>(&args.megatron_args)->value_name("FILE"),
       "read a Megatron-LM argument fragment instead of CONFIG");
  positional.add("config", 1);
}

const char* config_options_help() {
  return "  CONFIG                   config in protobuf text format; without it the embedded\n"
         "                           default (configs/default.textproto) is used\n"
         "  --set PATH=VALUE         override one field (repeatable, applied in order), e.g.\n"
         "                           --set batch.global_batch_size=32 --set optimizer.lr=1e-4\n"
         "  --megatron-args FILE     read a Megatron-LM argument fragment instead of CONFIG\n"
         "                           (see docs/configuration.md)\n";
}

std::string LoadedConfig::describe() const {
  std::string out = source;
  for (const auto& s : sets) out += " --set " + s;
  return out;
}

LoadedConfig load_config(const ConfigArgs& args) {
  if (!args.config_path.empty() && !args.megatron_args.empty())
    throw config::ConfigError("give either CONFIG (" + args.config_path + ") or --megatron-args (" +
                              args.megatron_args + "), not both");
  config::ParsedConfig parsed;
  std::string source;
  if (!args.megatron_args.empty()) {
    parsed = config::parse_megatron_args_file(args.megatron_args);
    source = "Megatron-LM arguments " + args.megatron_args;
  } else if (!args.config_path.empty()) {
    parsed = config::parse_config_text(config::read_config_file(args.config_path), args.config_path);
    source = args.config_path;
  } else {
    source = std::string(config::kEmbeddedDefaultName);
    parsed = config::parse_config_text(config::embedded_default_text(), source);
  }
  for (const auto& s : args.sets) config::apply_override(parsed.config, s, &parsed.origins);
  config::validate(parsed.config, parsed.origins);
  return LoadedConfig{std::move(parsed.config), std::move(source), args.sets, std::move(parsed.origins)};
}

}  // namespace troupe::cli
