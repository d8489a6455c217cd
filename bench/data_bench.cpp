// data_bench: throughput of prepare-data and the cost of producing microbatches.
//
//   1. prepare-data on Debian's fortunes (byte tokenizer; GPT-2 BPE too when
//      --vocab/--merges are given), median MB/s of --repeats runs. prepare-data is
//      single-threaded, so MB/s is MB/s per core.
//   2. prepare-data on generated text of --gen-mb MB (pseudo-words from a large
//      random lexicon, numbers and punctuation, blank-line paragraphs).
//   3. Microbatch production from the mmapped fortunes dataset with the embedded
//      default config (seq 128, mbs 2, global batch 16) against one training step of
//      the same tiny model (engine::ReferenceTrainer, the whole global batch, forward +
//      backward + AdamW on --threads CPU threads). Both are medians.
//
// Usage: data_bench [--workdir runs/bench-data] [--gen-mb 100] [--repeats 5]
//                   [--threads 1] [--vocab gpt2/vocab.json --merges gpt2/merges.txt]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/embedded_default.h"
#include "config/derived.h"
#include "config/text_format.h"
#include "data/batch_source.h"
#include "data/default_corpus.h"
#include "data/prepare.h"
#include "data/random.h"
#include "kernels/cpu/cpu_device.h"
#include "engine/reference_trainer.h"
#include "bench/stats.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

using troupe::bench::median;

// Deterministic text: words drawn (Zipf-like) from a 50,000-word random lexicon.
void generate_text(const std::string& path, int64_t bytes) {
  data::SplitMix64 rng(2024);
  const char* syllables[] = {"ka", "to", "ri", "men", "sel", "an", "qu", "or", "is", "th", "er", "ple",
                             "ba", "dro", "ven", "li", "nu", "che", "sto", "wa", "ex", "gy", "o", "e"};
  std::vector<std::string> lexicon;
  for (int i = 0; i < 50000; ++i) {
    std::string w;
    const int n = 1 + int(rng.below(4));
    for (int k = 0; k < n; ++k) w += syllables[rng.below(sizeof syllables / sizeof *syllables)];
    if (rng.below(10) == 0) w[0] = char(std::toupper(static_cast<unsigned char>(w[0])));
    lexicon.push_back(w);
  }
  std::string out;
  out.reserve(size_t(bytes) + 4096);
  while (int64_t(out.size()) < bytes) {
    const int sentences = 1 + int(rng.below(8));
    for (int s = 0; s < sentences; ++s) {
      const int words = 4 + int(rng.below(20));
      for (int w = 0; w < words; ++w) {
        // Squaring a uniform draw skews towards frequent words.
        const double u = double(rng.below(1u << 30)) / double(1u << 30);
        out += w ? " " : "";
        if (rng.below(40) == 0) {
          out += std::to_string(rng.below(100000));
        } else {
          out += lexicon[size_t(u * u * double(lexicon.size()))];
        }
        if (rng.below(12) == 0) out += ",";
      }
      out += rng.below(5) == 0 ? "?\n" : ".\n";
    }
    out += "\n";
  }
  std::ofstream(path, std::ios::binary) << out;
}

struct PrepareRun {
  double mb_per_s = 0;
  double mb_per_cpu_s = 0;
  int64_t documents = 0, tokens = 0;
  double mb = 0;
};

PrepareRun bench_prepare(const std::vector<std::string>& inputs, data::InputFormat format,
                         data::Tokenizer& tok, const std::string& out, int repeats) {
  std::vector<double> rates, cpu_rates;
  PrepareRun r;
  for (int i = 0; i < repeats; ++i) {
    data::PrepareOptions o;
    o.inputs = inputs;
    o.output_prefix = out;
    o.format = format;
    const data::PrepareSummary s = data::prepare_dataset(o, tok);
    rates.push_back(s.mb_per_s());
    cpu_rates.push_back(s.mb_per_cpu_s());
    r.documents = s.documents;
    r.tokens = s.tokens;
    r.mb = double(s.input_bytes) / 1e6;
  }
  r.mb_per_s = median(rates);
  r.mb_per_cpu_s = median(cpu_rates);
  return r;
}

void print_prepare(const char* what, const PrepareRun& r, int repeats) {
  std::printf("%-34s %7.2f MB %7lld docs %10lld tokens  median %6.1f MB/s wall, %6.1f MB/s per CPU-second (%d runs)\n",
              what, r.mb, static_cast<long long>(r.documents), static_cast<long long>(r.tokens), r.mb_per_s,
              r.mb_per_cpu_s, repeats);
}

}  // namespace

int main(int argc, char** argv) {
  std::string workdir = "runs/bench-data", vocab, merges;
  int64_t gen_mb = 100;
  int repeats = 5, threads = 1;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "data_bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    const std::string a = argv[i];
    if (a == "--workdir") workdir = next();
    else if (a == "--gen-mb") gen_mb = std::stoll(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--vocab") vocab = next();
    else if (a == "--merges") merges = next();
    else {
      std::fprintf(stderr, "usage: data_bench [--workdir D] [--gen-mb N] [--repeats R] [--threads T] "
                           "[--vocab F --merges F]\n");
      return 2;
    }
  }
  fs::create_directories(workdir);
  auto bytes = data::make_byte_tokenizer();
  std::unique_ptr<data::Tokenizer> gpt2;
  if (!vocab.empty()) gpt2 = data::make_gpt2_tokenizer(vocab, merges);

  std::printf("== prepare-data (single thread)\n");
  const auto fortunes = data::expand_inputs({data::kFortunesDir}, data::InputFormat::Fortune);
  print_prepare("fortunes, bytes", bench_prepare(fortunes, data::InputFormat::Fortune, *bytes, workdir + "/fortunes-bytes", repeats), repeats);
  if (gpt2) {
    print_prepare("fortunes, gpt2", bench_prepare(fortunes, data::InputFormat::Fortune, *gpt2, workdir + "/fortunes-gpt2", repeats), repeats);
  }
  const std::string gen = workdir + "/generated.txt";
  if (!fs::exists(gen) || int64_t(fs::file_size(gen)) < gen_mb * 1000000) generate_text(gen, gen_mb * 1000000);
  const int big_repeats = std::max(1, std::min(repeats, 3));
  print_prepare("generated text, bytes, blank-lines",
                bench_prepare({gen}, data::InputFormat::BlankLines, *bytes, workdir + "/generated-bytes", big_repeats), big_repeats);
  if (gpt2) {
    print_prepare("generated text, gpt2, blank-lines",
                  bench_prepare({gen}, data::InputFormat::BlankLines, *gpt2, workdir + "/generated-gpt2", 1), 1);
  }

  std::printf("== microbatch production vs a training step (embedded default config)\n");
  Config cfg = config::load_config_text(config::embedded_default_text(), std::string(config::kEmbeddedDefaultName));
  cfg.mutable_data()->set_prefix(workdir + "/fortunes-bytes");
  const data::BatchSource src = data::BatchSource::open(cfg);
  const int dp = cfg.parallel().data();
  const int m = int(config::microbatches_per_replica(cfg));
  const int64_t G = cfg.batch().global_batch_size();
  std::vector<double> mb_us;
  int64_t consumed = 0;
  for (int rep = 0; rep < 21; ++rep) {
    const auto t0 = Clock::now();
    const int batches = 200;
    for (int b = 0; b < batches; ++b, consumed += G) {
      for (int r = 0; r < dp; ++r) {
        for (int j = 0; j < m; ++j) {
          const data::Microbatch mb = src.microbatch(consumed, r, j);
          if (mb.tokens.empty()) std::abort();
        }
      }
    }
    mb_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / (batches * dp * m));
  }
  const double per_mb_us = median(mb_us);
  const double per_batch_us = per_mb_us * dp * m;

  kernels::cpu::CpuDevice dev(threads);
  engine::ReferenceTrainer trainer(cfg, dev);
  std::vector<data::Microbatch> batch;
  for (int r = 0; r < dp; ++r)
    for (int j = 0; j < m; ++j) batch.push_back(src.microbatch(0, r, j));
  trainer.step(batch);  // warm-up
  std::vector<double> step_ms;
  for (int s = 0; s < 7; ++s) {
    const auto t0 = Clock::now();
    trainer.step(batch);
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double step = median(step_ms);
  std::printf("model: %d layers, width %d, seq %d, global batch %lld (%d replicas x %d microbatches of %d)\n",
              cfg.model().layers(), cfg.model().width(), cfg.batch().seq_length(), static_cast<long long>(G), dp, m,
              cfg.batch().micro_batch_size());
  std::printf("microbatch production: median %.2f us per microbatch, %.1f us per global batch (21 x 200 batches)\n",
              per_mb_us, per_batch_us);
  std::printf("training step (%d thread%s): median %.2f ms (7 steps)\n", threads, threads == 1 ? "" : "s", step);
  std::printf("data cost / step: %.4f%% (goal < 1%%)\n", 100.0 * per_batch_us / (step * 1000.0));
  return 0;
}
