// `supervisor prepare-data`: corpus files -> a Megatron indexed dataset
// (PREFIX.bin + PREFIX.idx). See data/prepare.h and data/corpus_reader.h.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "apps/supervisor/cli_args.h"
#include "data/corpus_reader.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace troupe::cli {

int prepare_data_main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::vector<std::string> inputs;
  std::string output, tokenizer, vocab, merges, tokenizer_file, format, parquet_column;
  uint64_t shuffle_seed = 0;
  int32_t eod_id = -1;
  int threads = 0;
  CommandLine cmd("prepare-data",
      "usage: supervisor prepare-data --input PATH... --output PREFIX [options]\n\n"
      "Tokenizes documents, appends EOD to each, and writes PREFIX.bin + PREFIX.idx in\n"
      "Megatron-LM's indexed dataset format (uint16 tokens when the vocabulary has\n"
      "fewer than 65500 entries, int32 otherwise). Output is written to temporary\n"
      "names and renamed into place at the end.\n\noptions");
  cmd.ignore_positional = true;
  cmd.error_shows_help = true;
  cmd.options.add_options()
      ("help,h", "show this help")
      ("input,i", po::value(&inputs)->multitoken()->required(),
       "input files, directories (their regular files, sorted; not symlinks), or quoted patterns "
       "('shards/*.jsonl.zst': their matches, sorted)")
      ("output,o", po::value(&output)->required(), "output prefix (PREFIX.bin, PREFIX.idx)")
      ("tokenizer,t", po::value(&tokenizer)->default_value("bytes"),
       "bytes | gpt2 | hf (a Hugging Face tokenizer.json of a byte-level BPE model)")
      ("vocab", po::value(&vocab), "GPT-2 vocab.json (tokenizer gpt2)")
      ("merges", po::value(&merges), "GPT-2 merges.txt (tokenizer gpt2)")
      ("tokenizer-file", po::value(&tokenizer_file), "tokenizer.json (tokenizer hf)")
      ("eod-id", po::value(&eod_id),
       "end-of-document ID (tokenizer hf; default: the file's <|endoftext|>, <|end_of_text|>, </s> or <eos>)")
      ("format,f", po::value(&format)->default_value("auto"),
       "auto | text (one document per file) | blank-lines | jsonl (\"text\" field) | "
       "fortune ('%' lines); auto skips files that are not text (a NUL byte, or over 1% "
       "invalid UTF-8), naming each. gzip and zstd files (by their first bytes) are JSON lines, "
       "decompressed as read: auto takes .jsonl.gz / .jsonl.zst. parquet: a string column (auto takes "
       "files starting PAR1), read by pyarrow in a python3 child ($TROUPE_PYTHON, else python3)")
      ("parquet-column", po::value(&parquet_column)->default_value("text"),
       "the string column of Parquet inputs that holds the documents")
      ("add-special-tokens",
       "encode each document with the tokenizer's special tokens, as HF's add_special_tokens=True "
       "(tokenizer hf: the post-processor's template, a Llama 3 file's <|begin_of_text|> first), as Megatron-LM's "
       "HuggingFaceTokenizer does by default; default: none, as its GPT2BPETokenizer")
      ("shuffle-seed", po::value(&shuffle_seed),
       "write documents in an order shuffled with this seed (holds them in memory)")
      ("threads,j", po::value(&threads)->default_value(0),
       "files tokenized at once, each with a tokenizer of its own (0: the machine's cores); the dataset "
       "is the same whatever the number")
      ("quiet,q", "no progress lines");
  std::ostringstream help;
  help << cmd.options << "\n";
  if (const auto status = cmd.parse(argc, argv, help.str())) return *status;

  data::PrepareOptions o;
  o.inputs = inputs;
  o.output_prefix = output;
  o.format = data::parse_input_format(format);
  o.parquet_column = parquet_column;
  if (cmd.has("shuffle-seed")) o.shuffle_seed = shuffle_seed;
  o.add_special_tokens = cmd.has("add-special-tokens");
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  double last_line = -10;
  if (!cmd.has("quiet")) {
    o.progress = [&](const data::PrepareProgress& p) {
      // Only inputs that take a while get progress lines. On a terminal the line
      // updates in place; in logs, one line every 5 s.
      if (p.seconds < 1 || (!tty && p.seconds - last_line < 5 && p.bytes_done < p.bytes_total)) return;
      last_line = p.seconds;
      const double pct = p.bytes_total > 0 ? 100.0 * double(p.bytes_done) / double(p.bytes_total) : 100;
      const double eta = p.eta_seconds();
      const std::string eta_text = eta < 0 ? "" : ", ETA " + std::to_string(int64_t(eta + 0.5)) + " s";
      std::fprintf(stderr,
                   "%sprepare-data: %.1f / %.1f MB (%.0f%%), files %lld / %lld, %lld documents, %lld tokens, "
                   "%.1f MB/s%s%s",
                   tty ? "\r" : "", double(p.bytes_done) / 1e6, double(p.bytes_total) / 1e6, pct,
                   static_cast<long long>(p.files_done), static_cast<long long>(p.files_total),
                   static_cast<long long>(p.documents), static_cast<long long>(p.tokens),
                   p.seconds > 0 ? double(p.bytes_done) / 1e6 / p.seconds : 0.0, eta_text.c_str(),
                   tty ? "" : "\n");
      std::fflush(stderr);
    };
  }
  data::TokenizerSpec spec{tokenizer, vocab, merges, tokenizer_file, std::nullopt};
  if (cmd.has("eod-id")) spec.eod_id = eod_id;
  auto tok = data::make_tokenizer(spec);
  if (threads < 0) return cmd.usage_error("--threads " + std::to_string(threads) + ": 0 (the cores) or more");
  o.threads = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  o.make_tokenizer = [spec] { return data::make_tokenizer(spec); };
  const data::PrepareSummary s = data::prepare_dataset(o, *tok);
  if (tty && o.progress && s.seconds >= 1) std::fprintf(stderr, "\n");
  const std::string not_text =
      s.skipped_not_text.empty() ? "" : " (" + std::to_string(s.skipped_not_text.size()) + " not text, skipped)";
  std::printf("prepare-data: %lld files%s, %lld documents (%lld empty skipped), %lld tokens (%s, %s, "
              "vocabulary %lld, EOD %d)\n",
              static_cast<long long>(s.files), not_text.c_str(), static_cast<long long>(s.documents),
              static_cast<long long>(s.skipped_empty), static_cast<long long>(s.tokens), tok->name().c_str(),
              s.dtype.c_str(), static_cast<long long>(tok->vocab_size()), tok->eod());
  std::printf("prepare-data: %.2f MB in %.3f s = %.1f MB/s (%.3f s of CPU = %.1f MB/s per core)\n",
              double(s.input_bytes) / 1e6, s.seconds, s.mb_per_s(), s.cpu_seconds, s.mb_per_cpu_s());
  std::printf("prepare-data: wrote %s (%.2f MB) and %s\n", s.bin_path.c_str(),
              double(std::filesystem::file_size(s.bin_path)) / 1e6, s.idx_path.c_str());
  return 0;
}

}  // namespace troupe::cli
