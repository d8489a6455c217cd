// `supervisor export CKPT_DIR --out DIR`: the model weights of a checkpoint as a
// Hugging Face model directory (GPT-2 or Llama; ckpt/hf_export.h).
#include <boost/program_options.hpp>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "apps/supervisor/cli_args.h"
#include "ckpt/hf_export.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "data/hf_tokenizer.h"
#include "data/hf_tokenizer_files.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

// "5000000000", "200MB", "5GB", "64KB" (decimal units, as transformers reads them).
std::optional<uint64_t> parse_byte_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  const uint64_t n = std::stoull(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  const uint64_t scale = unit.empty() || unit == "B" ? 1 : unit == "KB" ? 1000 : unit == "MB" ? 1000'000
                         : unit == "GB" ? 1000'000'000 : 0;
  if (scale == 0 || n == 0) return std::nullopt;
  return n * scale;
}

const char* kUsage =
    "usage: supervisor export CKPT_DIR --out DIR [--max-shard-size BYTES] [--transformer-prefix]\n\n"
    "Writes DIR/config.json, DIR/generation_config.json and the weights (DIR/model.safetensors,\n"
    "or model-0000N-of-0000M.safetensors with model.safetensors.index.json past\n"
    "--max-shard-size), a GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM) model that\n"
    "transformers' AutoModelForCausalLM.from_pretrained(DIR) loads. CKPT_DIR is a checkpoint\n"
    "directory or a checkpoint root (the newest complete checkpoint is used; damaged newer\n"
    "ones are reported and skipped). Vocabulary tables are cut to vocab_size rows (the\n"
    "padding rows are dropped). Every shard is verified first. DIR must not exist or be\n"
    "empty; it appears whole or not at all. The run's tokenizer goes beside it:\n"
    "tokenizer.json and tokenizer_config.json (and GPT-2's vocab.json and merges.txt), read\n"
    "from the paths its config names.\n\n"
    "options:\n"
    "  --out DIR             output directory (created)\n"
    "  --max-shard-size N    bytes of tensor data per weights file before sharding\n"
    "                        (default 5000000000, transformers' \"5GB\"; suffixes KB MB GB)\n"
    "  --transformer-prefix  name tensors \"transformer.wte.weight\" (GPT2LMHeadModel's\n"
    "                        state dict) instead of \"wte.weight\" (the original GPT-2 files)\n"
    "  -h, --help            this text\n";

}  // namespace

int export_main(int argc, char** argv) {
  std::string dir, out, max_shard;
  CommandLine cmd("export");
  cmd.options.add_options()
      ("dir", po::value<std::string>(&dir))
      ("out", po::value<std::string>(&out))
      ("max-shard-size", po::value<std::string>(&max_shard))
      ("transformer-prefix", "")
      ("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  if (dir.empty() || out.empty()) {
    std::fprintf(stderr, "supervisor export: CKPT_DIR and --out DIR are required\n\n%s", kUsage);
    return 2;
  }
  ckpt::HfExportOptions o;
  o.transformer_prefix = cmd.has("transformer-prefix");
  if (cmd.has("max-shard-size")) {
    const auto bytes = parse_byte_size(max_shard);
    if (!bytes) {
      std::fprintf(stderr, "supervisor export: --max-shard-size %s: expected a positive byte count such as "
                           "5000000000 or 200MB (see supervisor export --help)\n", max_shard.c_str());
      return 2;
    }
    o.max_shard_bytes = *bytes;
  }
  std::vector<std::string> report;
  const ckpt::Checkpoint checkpoint = ckpt::open_checkpoint_path(dir, &report);
  for (const auto& line : report) std::fprintf(stderr, "supervisor export: %s\n", line.c_str());
  // Read before anything is written: a missing tokenizer file leaves no half export.
  const data::TokenizerExport tokenizer =
      data::hf_tokenizer_export(ckpt::manifest_config(checkpoint.manifest(), checkpoint.dir()));
  const Config config = ckpt::manifest_config(checkpoint.manifest(), checkpoint.dir());
  if (config.data().tokenizer() == DataConfig::HF_JSON) {  // bos/eos: the file's end-of-document token
    const auto& d = config.data();
    o.eod_id = data::read_hf_tokenizer_summary(d.tokenizer_file(), d.eod_id() >= 0 ? std::optional<int32_t>(d.eod_id())
                                                                                    : std::nullopt).eod;
  }
  const auto result = ckpt::export_hf(checkpoint, out, o);
  const std::vector<std::string> tokenizer_paths = data::write_tokenizer_export(tokenizer, out);
  std::printf("exported %s (step %lld): %d tensors, %lld parameters\n", checkpoint.dir().c_str(),
              static_cast<long long>(checkpoint.step()), result.tensors, static_cast<long long>(result.parameters));
  for (const auto& file : result.weight_files) std::printf("  %s/%s\n", out.c_str(), file.c_str());
  std::printf("  %s\n", result.config_path.c_str());
  for (const auto& path : tokenizer_paths) std::printf("  %s\n", path.c_str());
  for (const auto& line : tokenizer.notes) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace troupe::cli
