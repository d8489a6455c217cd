// `supervisor generate CHECKPOINT_OR_HF_DIR --prompt TEXT`: text from a checkpoint or a
// Hugging Face model directory, on the CPU with a KV cache (model/decoder.h), the
// model and its tokenizer from engine/generate_source.h.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "apps/supervisor/cli_args.h"
#include "data/tokenizer.h"
#include "engine/generate_source.h"
#include "kernels/gpu_backend.h"
#include "model/decoder.h"
#include "model/device_decoder.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;

const char* kUsage =
    "usage: supervisor generate CHECKPOINT_OR_HF_DIR (--prompt TEXT | --prompt-ids ID,ID,...)\n"
    "                           [--max-tokens N] [--temperature T] [--top-k K] [--seed S] [--ignore-eod]\n"
    "                           [--tokenizer FILE] [--no-special-tokens] [--skip-special-tokens] [--print-ids]\n"
    "                           [--device cpu|cuda]\n\n"
    "Continues a prompt with the model of a checkpoint (a checkpoint directory or a root:\n"
    "the newest complete checkpoint) or of a Hugging Face model directory (config.json +\n"
    "safetensors, GPT-2 or Llama family), one token at a time on the CPU with a KV cache\n"
    "(sums in double), or with --device cuda on GPU 0 with the training forward's kernels\n"
    "(bf16 GEMM operands) over the sequence so far at each step.\n"
    "Temperature 0 (the default) is greedy; otherwise the logits / T are sampled, among the\n"
    "K most likely with --top-k, from a counter-based stream of the seed: the same seed\n"
    "gives the same text. Generation stops after N tokens, at model.max_positions, or at\n"
    "an end-of-sequence id (unless --ignore-eod): a Hugging Face directory's\n"
    "generation_config.json eos_token_id, a checkpoint's end-of-document id.\n\n"
    "--prompt TEXT is encoded with the model's tokenizer: a Hugging Face directory's\n"
    "tokenizer.json (or GPT-2's vocab.json + merges.txt), a checkpoint's run tokenizer\n"
    "(bytes, GPT-2's files, its tokenizer.json), or --tokenizer FILE; as transformers'\n"
    "tokenizer(TEXT) does, with the special tokens of the file's post-processor (a\n"
    "Llama 3 file's <|begin_of_text|> first) unless --no-special-tokens. Prints the text\n"
    "of prompt and continuation, decoded as Hugging Face's decode does; the ids too with\n"
    "--print-ids, or alone when the model has no tokenizer.\n\n"
    "options:\n"
    "  --prompt TEXT         the prompt as text\n"
    "  --prompt-ids LIST     the prompt as comma-separated token ids\n"
    "  --max-tokens N        tokens to generate (default 64)\n"
    "  --temperature T       0 greedy (default), else the softmax temperature\n"
    "  --top-k K             sample among the K most likely tokens (0: all; default 0)\n"
    "  --seed S              the sampling stream (default 0)\n"
    "  --ignore-eod          do not stop at an end-of-sequence id\n"
    "  --tokenizer FILE      a Hugging Face tokenizer.json to use instead of the model's\n"
    "  --no-special-tokens   encode the prompt without the post-processor's tokens (no BOS)\n"
    "  --skip-special-tokens leave special tokens out of the printed text\n"
    "  --print-ids           print the prompt's and the continuation's ids as well\n"
    "  --device cpu|cuda     where the model runs (default cpu; cuda needs a build with CUDA)\n"
    "  -h, --help            this text\n";

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t t : ids) {
    s += ' ';  // (not " " + ...: GCC 12 warns -Wrestrict on that falsely)
    s += std::to_string(t);
  }
  return s;
}

}  // namespace

int generate_main(int argc, char** argv) {
  std::string dir, prompt, prompt_ids, tokenizer_file, device_name = "cpu";
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
      ("tokenizer", po::value<std::string>(&tokenizer_file))
      ("no-special-tokens", "")
      ("skip-special-tokens", "")
      ("print-ids", "")
      ("device", po::value<std::string>(&device_name))
      ("help,h", "");
  cmd.positional.add("dir", 1);
  if (const auto status = cmd.parse(argc, argv, kUsage)) return *status;
  const auto usage_error = [](const std::string& what) {
    std::fprintf(stderr, "supervisor generate: %s (see supervisor generate --help)\n", what.c_str());
    return 2;
  };
  if (dir.empty()) return usage_error("CHECKPOINT_OR_HF_DIR is required");
  if (cmd.has("prompt") == cmd.has("prompt-ids")) return usage_error("give one of --prompt and --prompt-ids");
  if (cmd.has("no-special-tokens") && !cmd.has("prompt")) return usage_error("--no-special-tokens is for --prompt TEXT");
  if (max_tokens < 0) return usage_error("--max-tokens must not be negative");
  if (!(sampling.temperature >= 0)) return usage_error("--temperature must be 0 or positive");
  if (sampling.top_k < 0) return usage_error("--top-k must not be negative");
  if (device_name != "cpu" && device_name != "cuda") return usage_error("--device must be cpu or cuda, not '" + device_name + "'");
  // The GPU first, so that a machine without one says so before the model is read.
  std::shared_ptr<kernels::Device> gpu;
  if (device_name == "cuda") {
    const auto backend = kernels::gpu_backend();
    std::string why;
    if (backend == nullptr) {
      std::fprintf(stderr, "supervisor generate: --device cuda: this supervisor was built without CUDA "
                           "(configure with -DTROUPE_CUDA=ON where nvcc, cuBLAS and NCCL are found; docs/gpu.md)\n");
      return 1;
    }
    if (backend->count(&why) < 1) {
      std::fprintf(stderr, "supervisor generate: --device cuda: no usable GPU: %s\n", why.c_str());
      return 1;
    }
    gpu = backend->make(0);
  }
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

  std::vector<std::string> report;
  const engine::GenerateSource source = engine::open_generate_source(dir, tokenizer_file, &report);
  for (const auto& line : report) std::fprintf(stderr, "supervisor generate: %s\n", line.c_str());
  const int64_t vocab = source.config.model().vocab_size();
  if (cmd.has("prompt")) {
    if (source.tokenizer == nullptr)
      return usage_error("--prompt TEXT needs a tokenizer, and " + source.no_tokenizer +
                         "; give --tokenizer FILE (a tokenizer.json) or --prompt-ids");
    if (cmd.has("no-special-tokens")) source.tokenizer->encode(prompt, ids);
    else source.tokenizer->encode_with_special_tokens(prompt, ids);
  }
  if (ids.empty()) return usage_error("the prompt is empty");
  for (const int32_t t : ids)
    if (t >= vocab)
      return usage_error("prompt id " + std::to_string(t) + " is outside the model's vocabulary of " +
                         std::to_string(vocab) + (cmd.has("prompt") ? " (tokenizer " + source.tokenizer_from + ")" : ""));
  if (int64_t(ids.size()) > source.config.model().max_positions())
    return usage_error("the prompt's " + std::to_string(ids.size()) + " tokens are more than model.max_positions " +
                       std::to_string(source.config.model().max_positions()));
  std::vector<int32_t> out;
  if (gpu != nullptr) {
    // The positions it is fed: the prompt and all but the last generated token.
    const int capacity = int(std::min<int64_t>(int64_t(ids.size()) + std::max(max_tokens, 1),
                                               source.config.model().max_positions()));
    model::DeviceDecoder decoder(source.config, source.params, *gpu, capacity);
    out = model::continue_prompt(decoder, source.config, ids, max_tokens, sampling, source.stop_ids,
                                 cmd.has("ignore-eod"));
  } else {
    out = model::continue_prompt(source.config, source.params, ids, max_tokens, sampling, source.stop_ids,
                                 cmd.has("ignore-eod"));
  }
  if (cmd.has("print-ids") || source.tokenizer == nullptr) {
    if (cmd.has("print-ids")) std::printf("prompt ids:%s\n", join_ids(ids).c_str());
    std::printf("ids:%s\n", join_ids(out).c_str());
  }
  if (source.tokenizer == nullptr) {
    std::fprintf(stderr, "supervisor generate: no text: %s\n", source.no_tokenizer.c_str());
    return 0;
  }
  std::vector<int32_t> all = ids;
  all.insert(all.end(), out.begin(), out.end());
  std::printf("text: %s\n", source.tokenizer->decode(all, cmd.has("skip-special-tokens")).c_str());
  return 0;
}

}  // namespace troupe::cli
