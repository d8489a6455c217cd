#include "data/prepare.h"

#include <glob.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <optional>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "data/compressed_input.h"
#include "data/dataset_tokenizer.h"
#include "data/error.h"
#include "data/indexed_dataset.h"
#include "data/mapped_file.h"
#include "data/random.h"

namespace troupe::data {
namespace fs = std::filesystem;
namespace {

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// What one thread tokenizes at once: a whole file, or a piece of a large JSON-lines one
// (corpus_reader.h, jsonl_pieces), so that one big file is read on every thread too.
struct WorkItem {
  size_t file = 0;                 // index into the file list
  std::optional<FileRange> range;  // the piece; none: the whole file
  bool last_of_file = true;
  double input_bytes = 0;
};

std::vector<WorkItem> work_items(const std::vector<std::string>& files, InputFormat format, size_t piece_bytes) {
  std::vector<WorkItem> items;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto pieces = piece_bytes > 0 ? jsonl_pieces(files[i], format, piece_bytes) : std::vector<FileRange>{};
    if (pieces.empty()) {
      items.push_back({i, std::nullopt, true, double(fs::file_size(files[i]))});
      continue;
    }
    for (size_t k = 0; k < pieces.size(); ++k)
      items.push_back({i, pieces[k], k + 1 == pieces.size(), double(pieces[k].end - pieces[k].begin)});
  }
  return items;
}

// Threads that tokenize items at once without holding more token IDs than half the
// machine's memory: the threads + 1 largest items at 4 bytes a token and at most a
// token a byte (8 bytes a compressed byte: corpora compress about that well). Fewer
// threads when they would not fit, down to 1 (streaming, one file at a time).
int threads_that_fit(const std::vector<std::string>& files, const std::vector<WorkItem>& items, int threads) {
  std::vector<double> held;
  for (const auto& item : items) {
    std::string head(4, '\0');
    if (FILE* in = std::fopen(files[item.file].c_str(), "rb")) {
      head.resize(std::fread(head.data(), 1, 4, in));
      std::fclose(in);
    }
    held.push_back(4.0 * item.input_bytes * (compression_of(head) == Compression::None ? 1.0 : 8.0));
  }
  std::sort(held.rbegin(), held.rend());
  const double budget = 0.5 * double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  while (threads > 1) {
    double sum = 0;
    for (size_t i = 0; i < held.size() && i < size_t(threads) + 1; ++i) sum += held[i];
    if (sum <= budget) break;
    --threads;
  }
  return threads;
}

// The IDs prepare-data writes for one document: its tokens (with the tokenizer's
// special tokens when asked), then EOD.
void encode_document(Tokenizer& tokenizer, std::string_view doc, bool special_tokens, std::vector<int32_t>& ids) {
  ids.clear();
  if (special_tokens) tokenizer.encode_with_special_tokens(doc, ids);
  else tokenizer.encode(doc, ids);
  ids.push_back(tokenizer.eod());
}

// One file's documents as token IDs (EOD included), for a parallel preparation.
struct FileTokens {
  std::vector<int32_t> ids;
  std::vector<int64_t> sizes;  // per document
  ReadStats stats;
  std::exception_ptr error;
  bool ready = false;
};

// Tokenizes the work `items` of `files` on `threads` threads, each with a tokenizer from
// options.make_tokenizer, and hands each item's result to `deliver` in order on the
// calling thread; `waiting` is called about twice a second while the next item is not
// ready. At most threads + 1 items are held at once. The first failing item in order
// (its DataError) ends it; the threads are joined before anything is thrown.
void tokenize_in_parallel(const std::vector<std::string>& files, const std::vector<WorkItem>& items,
                          const PrepareOptions& options, int threads, std::atomic<int64_t>& bytes_done,
                          const std::function<void(size_t, FileTokens&)>& deliver,
                          const std::function<void()>& waiting) {
  const size_t n = items.size();
  std::vector<FileTokens> results(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t claimed = 0, written = 0;
  std::atomic<bool> stop{false};
  const size_t window = size_t(threads) + 1;
  // One tokenizer per thread, made here so that a failure to make one is thrown before
  // any thread starts.
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (int k = 0; k < threads; ++k) tokenizers.push_back(options.make_tokenizer());
  auto work = [&](Tokenizer* tokenizer) {
    for (;;) {
      size_t i;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || claimed == n || claimed < written + window; });
        if (stop || claimed == n) return;
        i = claimed++;
      }
      FileTokens t;
      try {
        std::vector<int32_t> ids;
        const WorkItem& item = items[i];
        t.stats = read_documents(
            files[item.file], options.format,
            [&](std::string_view doc) {
              if (stop) throw DataError("stopped");  // another file failed: give up this one
              encode_document(*tokenizer, doc, options.add_special_tokens, ids);
              t.ids.insert(t.ids.end(), ids.begin(), ids.end());
              t.sizes.push_back(int64_t(ids.size()));
            },
            [&](size_t b) { bytes_done += int64_t(b); }, options.parquet_column, item.range ? &*item.range : nullptr);
      } catch (...) {
        t.error = std::current_exception();
      }
      std::lock_guard lock(mu);
      results[i] = std::move(t);
      results[i].ready = true;
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  try {
    for (int k = 0; k < threads; ++k) {
      try {
        pool.emplace_back(work, tokenizers[size_t(k)].get());
      } catch (const std::system_error& e) {
        throw DataError("prepare-data: cannot start tokenizing thread " + std::to_string(k + 1) + " of " +
                        std::to_string(threads) + ": " + e.what() + " (fewer --threads)");
      }
    }
    for (size_t i = 0; i < n; ++i) {
      {
        std::unique_lock lock(mu);
        while (!results[i].ready) {
          if (cv.wait_for(lock, std::chrono::milliseconds(500)) == std::cv_status::timeout) {
            lock.unlock();
            waiting();
            lock.lock();
          }
        }
      }
      if (results[i].error) std::rethrow_exception(results[i].error);
      deliver(i, results[i]);
      results[i] = FileTokens{};  // its memory back before the next one
      std::lock_guard lock(mu);
      ++written;
      cv.notify_all();
    }
  } catch (...) {
    failure = std::current_exception();
  }
  {
    std::lock_guard lock(mu);
    stop = true;
    cv.notify_all();
  }
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

void skip_not_text(PrepareSummary& summary, const std::string& path, const std::string& why) {
  spdlog::warn("prepare-data: skipped {}: not text ({}); format auto reads text files only", path, why);
  summary.skipped_not_text.push_back({path, why});
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& given, InputFormat format) {
  // A pattern that names no path as it is (quoted past the shell, or from a script):
  // its matches, sorted, each as if named.
  std::vector<std::string> inputs;
  for (const auto& in : given) {
    std::error_code ec;
    if (fs::exists(in, ec) || in.find_first_of("*?[") == std::string::npos) {
      inputs.push_back(in);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(in.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      ::globfree(&g);
      throw DataError(in + ": the pattern matches no file");
    }
    if (rc != 0) {
      ::globfree(&g);
      throw DataError(in + ": cannot expand the pattern (" + (rc == GLOB_NOSPACE ? "out of memory" : "a read error") +
                      ")");
    }
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    ::globfree(&g);
    std::sort(matches.begin(), matches.end());
    inputs.insert(inputs.end(), matches.begin(), matches.end());
  }
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
  const std::vector<std::string> files = expand_inputs(options.inputs, options.format);
  if (files.empty()) throw DataError("prepare-data: no input files");
  // Threads beyond the work items would have nothing to do; a large JSON-lines file is
  // several items (its pieces), so one file is read on several threads too.
  int threads = 1;
  const bool may_split = options.threads > 1 && options.make_tokenizer;
  const std::vector<WorkItem> items = work_items(files, options.format, may_split ? options.piece_bytes : 0);
  if (may_split && items.size() > 1) {
    const int wanted = int(std::min<size_t>(size_t(options.threads), items.size()));
    threads = threads_that_fit(files, items, wanted);
    if (threads < wanted)
      spdlog::info("prepare-data: {} thread(s) instead of {}: the files in flight would hold more token IDs than "
                   "half the memory",
                   threads, wanted);
  }
  const bool parallel = threads > 1;
  const clockid_t cpu_clock = parallel ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID;
  const double cpu_start = cpu_seconds(cpu_clock);

  PrepareProgress progress;
  for (const auto& f : files) progress.bytes_total += int64_t(fs::file_size(f));
  progress.files_total = int64_t(files.size());
  std::atomic<int64_t> bytes_done{0};
  auto last_report = start;
  auto report = [&](bool force) {
    const auto now = clock::now();
    if (!options.progress || (!force && now - last_report < std::chrono::milliseconds(500))) return;
    last_report = now;
    progress.seconds = std::chrono::duration<double>(now - start).count();
    progress.bytes_done = bytes_done;
    options.progress(progress);
  };

  const fs::path parent = fs::path(options.output_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  IndexedDatasetWriter writer(options.output_prefix, dtype_for_vocab(tokenizer.vocab_size()),
                              tokenizer.vocab_size());
  PrepareSummary summary;
  std::vector<std::vector<int32_t>> held;  // only with shuffle_seed
  auto add_document = [&](std::span<const int32_t> ids) {
    progress.tokens += int64_t(ids.size());
    ++progress.documents;
    if (options.shuffle_seed)
      held.emplace_back(ids.begin(), ids.end());
    else
      writer.add_document(ids);
  };
  auto file_done = [&](const std::string& f, const ReadStats& rs) {
    summary.skipped_empty += rs.skipped_empty;
    if (rs.not_text) skip_not_text(summary, f, *rs.not_text);
    ++progress.files_done;
  };
  if (parallel) {
    ReadStats of_file;  // the pieces of the file being delivered, added up
    tokenize_in_parallel(
        files, items, options, threads, bytes_done,
        [&](size_t i, FileTokens& t) {
          int64_t at = 0;
          for (const int64_t size : t.sizes) {
            add_document(std::span<const int32_t>(t.ids.data() + at, size_t(size)));
            at += size;
          }
          of_file.documents += t.stats.documents;
          of_file.skipped_empty += t.stats.skipped_empty;
          if (t.stats.not_text) of_file.not_text = t.stats.not_text;
          if (items[i].last_of_file) {
            file_done(files[items[i].file], of_file);
            of_file = ReadStats{};
          }
          report(false);
        },
        [&] { report(false); });
  } else {
    std::vector<int32_t> ids;
    auto on_document = [&](std::string_view doc) {
      encode_document(tokenizer, doc, options.add_special_tokens, ids);
      add_document(ids);
    };
    auto on_bytes = [&](size_t n) {
      bytes_done += int64_t(n);
      report(false);
    };
    for (const auto& f : files)
      file_done(f, read_documents(f, options.format, on_document, on_bytes, options.parquet_column));
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
  // What the dataset was tokenized with, beside it (a blend checks its datasets agree).
  write_dataset_tokenizer(options.output_prefix, {tokenizer.name(), tokenizer.vocab_size(), tokenizer.eod()});
  report(true);

  summary.files = int64_t(files.size() - summary.skipped_not_text.size());
  summary.documents = progress.documents;
  summary.tokens = progress.tokens;
  summary.input_bytes = progress.bytes_total;
  summary.seconds = std::chrono::duration<double>(clock::now() - start).count();
  summary.cpu_seconds = cpu_seconds(cpu_clock) - cpu_start;
  summary.bin_path = options.output_prefix + ".bin";
  summary.idx_path = options.output_prefix + ".idx";
  summary.dtype = dtype_name(dtype_for_vocab(tokenizer.vocab_size()));
  return summary;
}

}  // namespace troupe::data
