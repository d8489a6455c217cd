#include "data/prepare.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "data/error.h"
#include "data/indexed_dataset.h"
#include "data/mapped_file.h"
#include "data/random.h"

namespace troupe::data {
namespace fs = std::filesystem;
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void skip_not_text(PrepareSummary& summary, const std::string& path, const std::string& why) {
  spdlog::warn("prepare-data: skipped {}: not text ({}); format auto reads text files only", path, why);
  summary.skipped_not_text.push_back({path, why});
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, InputFormat format) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    if (ec || !fs::exists(st)) throw DataError(in + ": input does not exist");
    if (!fs::is_directory(st)) {
      // Named explicitly, so it must be a regular file: a FIFO would block the run, a
      // device be read without end. (Listed directories skip such entries below.)
      ::close(open_input_file(in, "prepare-data input"));
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(in)) {
      if (e.is_symlink() || !e.is_regular_file()) continue;
      const std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      if (format == InputFormat::Fortune &&
          (e.path().extension() == ".dat" || e.path().extension() == ".u8")) {
        continue;
      }
      found.push_back(e.path().string());
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

PrepareSummary prepare_dataset(const PrepareOptions& options, Tokenizer& tokenizer) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double cpu_start = thread_cpu_seconds();
  const std::vector<std::string> files = expand_inputs(options.inputs, options.format);
  if (files.empty()) throw DataError("prepare-data: no input files");

  PrepareProgress progress;
  for (const auto& f : files) progress.bytes_total += int64_t(fs::file_size(f));
  auto last_report = start;
  auto report = [&](bool force) {
    const auto now = clock::now();
    if (!options.progress || (!force && now - last_report < std::chrono::milliseconds(500))) return;
    last_report = now;
    progress.seconds = std::chrono::duration<double>(now - start).count();
    options.progress(progress);
  };

  const fs::path parent = fs::path(options.output_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  IndexedDatasetWriter writer(options.output_prefix, dtype_for_vocab(tokenizer.vocab_size()),
                              tokenizer.vocab_size());
  PrepareSummary summary;
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> held;  // only with shuffle_seed
  auto on_document = [&](std::string_view doc) {
    ids.clear();
    if (options.add_special_tokens) tokenizer.encode_with_special_tokens(doc, ids);
    else tokenizer.encode(doc, ids);
    ids.push_back(tokenizer.eod());
    progress.tokens += int64_t(ids.size());
    ++progress.documents;
    if (options.shuffle_seed) {
      held.push_back(ids);
    } else {
      writer.add_document(ids);
    }
  };
  auto on_bytes = [&](size_t n) {
    progress.bytes_done += int64_t(n);
    report(false);
  };
  for (const auto& f : files) {
    const ReadStats rs = read_documents(f, options.format, on_document, on_bytes);
    summary.skipped_empty += rs.skipped_empty;
    if (rs.not_text) skip_not_text(summary, f, *rs.not_text);
  }
  if (progress.documents == 0) {
    const size_t skipped = summary.skipped_not_text.size();
    throw DataError("empty corpus: no document in " + std::to_string(files.size()) + " input file(s) (first: " +
                    files.front() + (skipped > 0 ? "; " + std::to_string(skipped) + " skipped as not text" : "") +
                    ")");
  }
  if (options.shuffle_seed) {
    std::vector<int64_t> order(held.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    shuffle(order, *options.shuffle_seed);
    for (const int64_t i : order) writer.add_document(held[size_t(i)]);
  }
  writer.finish();
  report(true);

  summary.files = int64_t(files.size() - summary.skipped_not_text.size());
  summary.documents = progress.documents;
  summary.tokens = progress.tokens;
  summary.input_bytes = progress.bytes_total;
  summary.seconds = std::chrono::duration<double>(clock::now() - start).count();
  summary.cpu_seconds = thread_cpu_seconds() - cpu_start;
  summary.bin_path = options.output_prefix + ".bin";
  summary.idx_path = options.output_prefix + ".idx";
  summary.dtype = dtype_name(dtype_for_vocab(tokenizer.vocab_size()));
  return summary;
}

}  // namespace troupe::data
