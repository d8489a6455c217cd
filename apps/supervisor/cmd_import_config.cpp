// `supervisor import-config DIR`: the model section of a Hugging Face model directory's
// config.json in troupe's text format (config/hf_config.h), checked by troupe's own
// validation, with the parameter count it gives.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <boost/program_options.hpp>

#include "apps/supervisor/cli_args.h"
#include "config/derived.h"
#include "config/hf_config.h"
#include "config/origins.h"
#include "config/text_format.h"
#include "config/validate.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor import-config DIR\n\n"
    "Prints the model section matching DIR/config.json (a Hugging Face model directory,\n"
    "or the config.json itself) for GPT-2 (model_type gpt2) and Llama-family models\n"
    "(llama, mistral without a sliding window: Llama 2/3, TinyLlama, SmolLM, ...). Paste\n"
    "it into a config; keys troupe cannot express are refused by name.\n\n"
    "options:\n"
    "  -h, --help  this text\n";

}  // namespace

int import_config_main(int argc, char** argv) {
  std::string dir;
  CommandLine cmd("import-config");
  cmd.options.add_options()("dir", po::value<std::string>(&dir))("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (dir.empty()) return cmd.usage_error("expects a model directory (or its config.json)");
  const std::filesystem::path path =
      std::filesystem::is_directory(dir) ? std::filesystem::path(dir) / "config.json" : std::filesystem::path(dir);
  const ModelConfig m = config::model_from_hf_config(config::read_config_file(path.string()), path.string());
  // The section must stand on its own as a config: validated like any other.
  Config c;
  *c.mutable_model() = m;
  c.mutable_batch()->set_seq_length(std::min(c.batch().seq_length(), m.max_positions()));
  config::validate(c, config::Origins(path.string()));
  std::printf("# from %s: %s parameters (config::parameter_count, vocabulary padded to %lld rows at TP 1)\n%s",
              path.string().c_str(), std::to_string(config::parameter_count(c)).c_str(),
              (long long)config::padded_vocab(c), config::model_section_text(m).c_str());
  return 0;
}

}  // namespace troupe::cli
