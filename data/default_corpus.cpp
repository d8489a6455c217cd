#include "data/default_corpus.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "data/atomic_file.h"
#include "data/error.h"
#include "data/mapped_file.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace troupe::data {
namespace fs = std::filesystem;
namespace {

// Fixed: the corpus is shared by every config, so its order does not follow training.seed.
constexpr uint64_t kFortuneOrderSeed = 20240917;

// The fortune files of `dir` (none when it does not exist), as prepare-data lists them.
std::vector<std::string> fortune_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  return expand_inputs({dir}, InputFormat::Fortune);
}

std::string listing(const std::vector<std::string>& files) {
  std::ostringstream s;
  s << "troupe default corpus v1: byte tokenizer, fortune format, order seed " << kFortuneOrderSeed << "\n";
  for (const auto& f : files) {
    struct stat st {};
    ::stat(f.c_str(), &st);
    s << f << " " << st.st_size << " " << int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec << "\n";
  }
  return s.str();
}

// The .sources listing, or "" when it is absent or unusable (then the corpus is
// prepared again and the listing rewritten). Never blocks: a FIFO there is refused.
std::string read_sources(const std::string& path) {
  try {
    return read_input_file(path, "default corpus listing", size_t(16) << 20);
  } catch (const DataError&) {
    return {};
  }
}

}  // namespace

std::string default_data_dir() {
  const char* env = std::getenv("TROUPE_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("runs/data");
}

std::string ensure_default_corpus(const std::string& fortunes_dir, const std::string& data_dir) {
  const std::string prefix = (fs::path(data_dir) / "fortunes-bytes").string();
  const std::string sources = prefix + ".sources";
  const std::vector<std::string> files = fortune_files(fortunes_dir);
  if (files.empty()) {
    // A machine without the fortunes package (a GPU machine the GPU check runs on) can
    // still use a corpus prepared elsewhere and copied into the data dir.
    if (fs::exists(sources) && fs::exists(prefix + ".bin") && fs::exists(prefix + ".idx")) {
      spdlog::info("data: {} has no fortune files; using the default corpus already prepared at {}", fortunes_dir,
                   prefix);
      return prefix;
    }
    throw DataError(fortunes_dir + ": no fortune files; the embedded default corpus needs Debian's "
                    "fortunes package (scripts/setup.sh installs it), a corpus prepared by it in " + data_dir +
                    ", or data.prefix");
  }
  const std::string want = listing(files);
  if (read_sources(sources) == want && fs::exists(prefix + ".bin") && fs::exists(prefix + ".idx")) {
    return prefix;
  }
  spdlog::info("data: preparing the default corpus from {} into {}", fortunes_dir, prefix);
  fs::create_directories(data_dir);
  PrepareOptions opt;
  opt.inputs = files;
  opt.output_prefix = prefix;
  opt.format = InputFormat::Fortune;
  opt.shuffle_seed = kFortuneOrderSeed;
  auto tok = make_byte_tokenizer();
  const PrepareSummary sum = prepare_dataset(opt, *tok);
  write_file_atomically(sources, want);
  spdlog::info("data: default corpus: {} files, {} fortunes, {} tokens", sum.files, sum.documents, sum.tokens);
  return prefix;
}

}  // namespace troupe::data
