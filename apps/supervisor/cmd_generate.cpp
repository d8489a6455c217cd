// `supervisor generate CHECKPOINT_OR_HF_DIR --prompt TEXT`: text from a checkpoint or a
// Hugging Face model directory, on the CPU with a KV cache (model/decoder.h).
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "apps/supervisor/cli_args.h"
#include "ckpt/durable_io.h"
#include "ckpt/flat_layout.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "config/hf_config.h"
#include "data/tokenizer.h"
#include "engine/checkpointing.h"
#include "model/decoder.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor generate CHECKPOINT_OR_HF_DIR (--prompt TEXT | --prompt-ids ID,ID,...)\n"
    "                           [--max-tokens N] [--temperature T] [--top-k K] [--seed S] [--ignore-eod]\n\n"
    "Continues a prompt with the model of a checkpoint (a checkpoint directory or a root:\n"
    "the newest complete checkpoint) or of a Hugging Face model directory (config.json +\n"
    "safetensors, GPT-2 or Llama family), one token at a time on the CPU with a KV cache.\n"
    "Temperature 0 (the default) is greedy; otherwise the logits / T are sampled, among the\n"
    "K most likely with --top-k, from a counter-based stream of the seed: the same seed\n"
    "gives the same text. Generation stops after N tokens, at model.max_positions, or at\n"
    "the end-of-document id (unless --ignore-eod).\n\n"
    "--prompt TEXT is encoded with the run's byte tokenizer (a checkpoint trained with\n"
    "data.tokenizer BYTES, or a Hugging Face model of 257 ids); other vocabularies take\n"
    "--prompt-ids. Prints the generated ids and, for the byte tokenizer, the text.\n\n"
    "options:\n"
    "  --prompt TEXT         the prompt as text (byte tokenizer)\n"
    "  --prompt-ids LIST     the prompt as comma-separated token ids\n"
    "  --max-tokens N        tokens to generate (default 64)\n"
    "  --temperature T       0 greedy (default), else the softmax temperature\n"
    "  --top-k K             sample among the K most likely tokens (0: all; default 0)\n"
    "  --seed S              the sampling stream (default 0)\n"
    "  --ignore-eod          do not stop at the end-of-document id\n"
    "  -h, --help            this text\n";

struct Loaded {
  Config config;
  std::vector<float> params;
  bool byte_tokenizer = false;
};

Loaded load_model(const std::string& dir) {
  Loaded l;
  if (std::filesystem::exists(dir + "/config.json")) {
    *l.config.mutable_model() = config::model_from_hf_config(ckpt::read_file(dir + "/config.json"), dir + "/config.json");
    const model::ParameterRegistry reg(l.config, model::StageRange::whole(l.config));
    l.params.resize(size_t(reg.total()));
    ckpt::HfModel::open(dir, l.config).read_into(reg, l.params.data());
    l.byte_tokenizer = l.config.model().vocab_size() == 257;
    return l;
  }
  std::vector<std::string> report;
  const ckpt::Checkpoint ck = ckpt::open_checkpoint_path(dir, &report);
  for (const auto& line : report) std::fprintf(stderr, "supervisor generate: %s\n", line.c_str());
  l.config = ckpt::manifest_config(ck.manifest(), ck.dir());
  // The manifest spells every field out: an unset norm_eps (meaning layernorm_eps)
  // comes back as 0, which no run can have.
  if (l.config.model().has_norm_eps() && l.config.model().norm_eps() == 0) l.config.mutable_model()->clear_norm_eps();
  l.config.mutable_parallel()->set_tensor(1);  // one whole model, whatever layout wrote it
  l.config.mutable_parallel()->set_pipeline(1);
  const model::ParameterRegistry reg(l.config, model::StageRange::whole(l.config));
  l.params.assign(size_t(reg.total()), 0.0f);
  ckpt::read_flat_range(ck, engine::reading_layout(ck, reg), TensorPiece::PARAM, 0, reg.total(), l.params.data());
  l.byte_tokenizer = l.config.data().tokenizer() == DataConfig::BYTES;
  return l;
}

}  // namespace

int generate_main(int argc, char** argv) {
  std::string dir, prompt, prompt_ids;
  int max_tokens = 64;
  model::SamplingOptions sampling;
  CommandLine cmd("generate");
  cmd.options.add_options()
      ("dir", po::value<std::string>(&dir))
      ("prompt", po::value<std::string>(&prompt))
      ("prompt-ids", po::value<std::string>(&prompt_ids))
      ("max-tokens", po::value<int>(&max_tokens))
      ("temperature", po::value<double>(&sampling.temperature))
      ("top-k", po::value<int>(&sampling.top_k))
      ("seed", po::value<uint64_t>(&sampling.seed))
      ("ignore-eod", "")
      ("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  const auto usage_error = [](const std::string& what) {
    std::fprintf(stderr, "supervisor generate: %s (see supervisor generate --help)\n", what.c_str());
    return 2;
  };
  if (dir.empty()) return usage_error("CHECKPOINT_OR_HF_DIR is required");
  if (cmd.has("prompt") == cmd.has("prompt-ids")) return usage_error("give one of --prompt and --prompt-ids");
  if (max_tokens < 0) return usage_error("--max-tokens must not be negative");
  if (!(sampling.temperature >= 0)) return usage_error("--temperature must be 0 or positive");
  if (sampling.top_k < 0) return usage_error("--top-k must not be negative");
  std::vector<int32_t> ids;
  if (cmd.has("prompt-ids")) {
    std::stringstream ss(prompt_ids);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t used = 0;
      int v = -1;
      try {
        v = std::stoi(item, &used);
      } catch (const std::exception&) {
      }
      if (used != item.size() || v < 0) return usage_error("--prompt-ids: '" + item + "' is not a token id");
      ids.push_back(v);
    }
  }

  const Loaded model = load_model(dir);
  if (cmd.has("prompt")) {
    if (!model.byte_tokenizer)
      return usage_error("--prompt TEXT needs the byte tokenizer; this model's vocabulary (" +
                         std::to_string(model.config.model().vocab_size()) + " ids) takes --prompt-ids");
    data::make_byte_tokenizer()->encode(prompt, ids);
  }
  if (ids.empty()) return usage_error("the prompt is empty");
  const int64_t eod = ckpt::hf_eod_id(model.config);
  model::Decoder decoder(model.config, model.params);
  std::vector<float> logits;
  for (const int32_t t : ids) logits = decoder.step(t);
  std::vector<int32_t> out;
  for (int s = 0; s < max_tokens; ++s) {
    const int32_t next = model::next_token(logits, sampling, s);
    out.push_back(next);
    if ((next == eod && !cmd.has("ignore-eod")) || decoder.position() >= model.config.model().max_positions()) break;
    logits = decoder.step(next);
  }
  std::printf("ids:");
  for (const int32_t t : out) std::printf(" %d", t);
  std::printf("\n");
  if (model.byte_tokenizer) {
    std::string text;
    for (const int32_t t : out)
      if (t < 256) text.push_back(char(t));
    std::printf("text: %s%s\n", prompt.c_str(), text.c_str());
  }
  return 0;
}

}  // namespace troupe::cli
