// `supervisor import-config DIR`: the model section of a Hugging Face model directory's
// config.json in troupe's text format (config/hf_config.h), checked by troupe's own
// validation, with the parameter count it gives and the tokenizer settings its
// vocabulary fits (config/import_config.h).
#include <cstdio>
#include <filesystem>
#include <string>

#include <boost/program_options.hpp>

#include "apps/supervisor/cli_args.h"
#include "config/import_config.h"
#include "config/text_format.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor import-config DIR\n\n"
    "Prints the model section matching DIR/config.json (a Hugging Face model directory,\n"
    "or the config.json itself) for GPT-2 (model_type gpt2) and Llama-family models\n"
    "(llama, mistral without a sliding window: Llama 2/3, TinyLlama, SmolLM, ...). Paste\n"
    "it into a config; keys troupe cannot express are refused by name. Comment lines\n"
    "before it name the tokenizer settings (data section) the vocabulary fits: the\n"
    "directory's tokenizer.json when it has one, and BYTES from 257 IDs.\n\n"
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
  const std::filesystem::path tokenizer = path.parent_path() / "tokenizer.json";
  const std::string text =
      config::import_config_text(config::read_config_file(path.string()), path.string(),
                                 std::filesystem::is_regular_file(tokenizer) ? tokenizer.string() : std::string());
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace troupe::cli
