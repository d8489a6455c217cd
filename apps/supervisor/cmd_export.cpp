// `supervisor export CKPT_DIR --out DIR`: the model weights of a checkpoint as a
// Hugging Face GPT-2 model directory (model.safetensors + config.json).
#include <boost/program_options.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/supervisor/cli_args.h"
#include "ckpt/hf_export.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "data/hf_tokenizer_files.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor export CKPT_DIR --out DIR [--transformer-prefix]\n\n"
    "Writes DIR/model.safetensors and DIR/config.json, a GPT-2 model that transformers'\n"
    "GPT2LMHeadModel.from_pretrained(DIR) loads. CKPT_DIR is a checkpoint directory or a\n"
    "checkpoint root (the newest complete checkpoint is used; damaged newer ones are\n"
    "reported and skipped). The token embedding is cut to vocab_size rows (the padding\n"
    "rows are dropped); the LM head is tied to it. Every shard is verified first.\n"
    "The run's tokenizer goes beside it: tokenizer.json and tokenizer_config.json (and\n"
    "GPT-2's vocab.json and merges.txt), read from the paths its config names.\n\n"
    "options:\n"
    "  --out DIR             output directory (created)\n"
    "  --transformer-prefix  name tensors \"transformer.wte.weight\" (GPT2LMHeadModel's\n"
    "                        state dict) instead of \"wte.weight\" (the original GPT-2 files)\n"
    "  -h, --help            this text\n";

}  // namespace

int export_main(int argc, char** argv) {
  std::string dir, out;
  CommandLine cmd("export");
  cmd.options.add_options()
      ("dir", po::value<std::string>(&dir))
      ("out", po::value<std::string>(&out))
      ("transformer-prefix", "")
      ("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (dir.empty() || out.empty()) {
    std::fprintf(stderr, "supervisor export: CKPT_DIR and --out DIR are required\n\n%s", kUsage);
    return 2;
  }
  std::vector<std::string> report;
  const ckpt::Checkpoint checkpoint = ckpt::open_checkpoint_path(dir, &report);
  for (const auto& line : report) std::fprintf(stderr, "supervisor export: %s\n", line.c_str());
  ckpt::HfExportOptions o;
  o.transformer_prefix = cmd.has("transformer-prefix");
  // Read before anything is written: a missing tokenizer file leaves no half export.
  const data::TokenizerExport tokenizer =
      data::hf_tokenizer_export(ckpt::manifest_config(checkpoint.manifest(), checkpoint.dir()));
  const auto result = ckpt::export_hf_gpt2(checkpoint, out, o);
  const std::vector<std::string> tokenizer_paths = data::write_tokenizer_export(tokenizer, out);
  std::printf("exported %s (step %lld): %d tensors, %lld parameters\n  %s\n  %s\n",
              checkpoint.dir().c_str(), static_cast<long long>(checkpoint.step()), result.tensors,
              static_cast<long long>(result.parameters), result.safetensors_path.c_str(),
              result.config_path.c_str());
  for (const auto& path : tokenizer_paths) std::printf("  %s\n", path.c_str());
  for (const auto& line : tokenizer.notes) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace troupe::cli
