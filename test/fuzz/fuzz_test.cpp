// troupe's own fuzz harness: hundreds of damaged inputs of each kind a user hands it
// (configs, --set values, checkpoints, datasets, command lines), each answered with one
// clear error or a correct result, never a crash, a hang, an allocation failure, an
// exception of an unexpected type or success on garbage. Cases come from a fixed seed
// (std::mt19937_64 seeded per kind), so a failure names a case that reproduces.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/reader.h"
#include "config/embedded_default.h"
#include "config/error.h"
#include "config/override.h"
#include "config/text_format.h"
#include "config/validate.h"
#include "data/error.h"
#include "data/indexed_dataset.h"
#include "engine/host_capacity.h"
#include "sched/planner_report.h"
#include "test/ckpt/ckpt_test_util.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using Rng = std::mt19937_64;

size_t pick(Rng& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// Values that break things: extremes of every type, non-numbers, garbage and text that
// is not one value.
const std::vector<std::string> kValues = {
    "0", "-1", "1", "2", "3", "7", "1000000", "2147483647", "-2147483648", "2147483648", "4294967296",
    "9223372036854775807", "-9223372036854775808", "99999999999999999999", "1e308", "-1e308", "1e-320", "nan",
    "inf", "-inf", "0.5", "1.5", "true", "false", "\"\"", "\"x\"", "\"/dev/zero\"", "\"/nonexistent\"", "CUDA",
    "GPT2", "COSINE", "NOPE", "{", "}", "64 # comment", "1 2", "0x10", "1e3", "--", "\"\\xff\\xfe\"", ""};

// The value part of every "field: value" line of a config text, by offset and length.
std::vector<std::pair<size_t, size_t>> value_spans(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const size_t colon = text.find(':', pos);
    if (colon != std::string::npos && colon < end) {
      size_t v = colon + 1, e = text.find('#', v);
      if (e == std::string::npos || e > end) e = end;
      out.push_back({v, e - v});
    }
    pos = end + 1;
  }
  return out;
}

std::string mutate_config(Rng& rng, std::string text) {
  const auto spans = value_spans(text);
  switch (pick(rng, 5)) {
    case 0:
    case 1: {  // one value replaced by a bad one
      const auto [at, len] = spans[pick(rng, spans.size())];
      return text.replace(at, len, " " + kValues[pick(rng, kValues.size())]);
    }
    case 2:  // cut anywhere
      return text.substr(0, pick(rng, text.size()));
    case 3: {  // a random byte anywhere
      text[pick(rng, text.size())] = char(pick(rng, 256));
      return text;
    }
    default: {  // two values replaced
      for (int i = 0; i < 2; ++i) {
        const auto s = value_spans(text);
        const auto [at, len] = s[pick(rng, s.size())];
        text.replace(at, len, " " + kValues[pick(rng, kValues.size())]);
      }
      return text;
    }
  }
}

// A config that passed validation must also plan and pass the capacity check, or be
// refused by them with a clear message; the plan never prints a negative count.
void plan_or_refuse(const Config& c) {
  try {
    engine::check_host_capacity(c, 1e12);
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).size() > 10);
    return;
  }
  try {
    const std::string plan = sched::render_plan(c, sched::PlanInputs{});
    // No count wrapped negative (the AdamW example's parameter may go negative with a
    // large lr x weight decay: a value, not a count).
    std::istringstream lines(plan);
    for (std::string line; std::getline(lines, line);)
      if (line.find("lr x") == std::string::npos) CHECK_FALSE(std::regex_search(line, std::regex(" -[0-9]")));
  } catch (const std::overflow_error& e) {
    CHECK(std::string(e.what()).find("more than a 64-bit count holds") != std::string::npos);
  }
}

// Runs `argv` with a 30 s limit; returns the exit status (or 128 + signal, or -1 for the
// limit) and the combined output.
int run_command(const std::vector<std::string>& argv, std::string& out) {
  std::string cmd = "timeout -s KILL 30";
  for (const auto& a : argv) {
    std::string q = "'";
    for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += " " + q + "'";
  }
  cmd += " 2>&1 </dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 137 ? -1 : WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

// Flips one bit of one byte of the file at `path`, both chosen at random.
void flip_bit(Rng& rng, const fs::path& path) {
  const auto size = fs::file_size(path);
  if (size == 0) return;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = std::streamoff(pick(rng, size_t(size)));
  f.seekg(at);
  const char c = char(f.get() ^ (1 << pick(rng, 8)));
  f.seekp(at);
  f.put(c);
}

}  // namespace

TEST_CASE("configs: 400 damaged texts of the default, each valid or one error naming its line") {
  Rng rng(20261201);
  const std::string base(config::embedded_default_text());
  int refused = 0, accepted = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string text = mutate_config(rng, base);
    CAPTURE(i);
    CAPTURE(text);
    try {
      const Config c = config::load_config_text(text, "fuzz.textproto");
      ++accepted;
      plan_or_refuse(c);
    } catch (const config::ConfigError& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind("fuzz.textproto", 0) == 0);  // names the file (and line)
    }
  }
  MESSAGE("configs: " << refused << " refused, " << accepted << " accepted");
  CHECK(refused > 100);
  CHECK(accepted > 20);
}

TEST_CASE("--set: 400 assignments of bad values to every field, each applied and valid or one error") {
  Rng rng(7);
  // Every scalar field path of the config (repeated messages left out: faults take [i]).
  std::vector<std::string> paths;
  std::function<void(const google::protobuf::Descriptor*, const std::string&)> walk =
      [&](const google::protobuf::Descriptor* d, const std::string& prefix) {
        for (int f = 0; f < d->field_count(); ++f) {
          const auto* field = d->field(f);
          if (field->is_repeated()) continue;
          if (field->message_type())
            walk(field->message_type(), prefix + field->name() + ".");
          else
            paths.push_back(prefix + field->name());
        }
      };
  walk(Config::descriptor(), "");
  REQUIRE(paths.size() > 60);
  const Config base = config::load_config_text(config::embedded_default_text(), "default");
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string assignment = paths[pick(rng, paths.size())] + "=" + kValues[pick(rng, kValues.size())];
    CAPTURE(assignment);
    Config c = base;
    config::Origins origins;
    try {
      config::apply_override(c, assignment, &origins);
      config::validate(c, origins);
      plan_or_refuse(c);
    } catch (const config::ConfigError& e) {
      ++refused;
      CHECK(std::string(e.what()).find("--set " + assignment) != std::string::npos);
    }
  }
  MESSAGE("--set: " << refused << " of 400 refused");
  CHECK(refused > 150);
}

TEST_CASE("checkpoints: 250 damaged roots, each loading an intact checkpoint or reporting the damage") {
  Rng rng(99);
  const testing::ScratchDir scratch("fuzz-ckpt");
  const fs::path work = scratch.path();
  const fs::path good = work / "good";
  for (int64_t step : {4, 8}) ckpt::testing::save_test_checkpoint(good.string(), step, 2, 1, 0);
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(good))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), good));
  std::sort(files.begin(), files.end());
  int fell_back = 0;
  for (int i = 0; i < 250; ++i) {
    const fs::path root = work / "case";
    fs::remove_all(root);
    fs::copy(good, root, fs::copy_options::recursive);
    const fs::path target = root / files[pick(rng, files.size())];
    const auto size = fs::file_size(target);
    std::string what;
    switch (pick(rng, 6)) {
      case 0:  // one bit flipped
        flip_bit(rng, target);
        what = "flip";
        break;
      case 1:  // cut
        fs::resize_file(target, pick(rng, size_t(size)));
        what = "cut";
        break;
      case 2:  // extended
        fs::resize_file(target, size + 1 + pick(rng, 4096));
        what = "extend";
        break;
      case 3:  // a FIFO in its place
        fs::remove(target);
        REQUIRE(::mkfifo(target.c_str(), 0600) == 0);
        what = "fifo";
        break;
      case 4:  // a link to /dev/zero
        fs::remove(target);
        fs::create_symlink("/dev/zero", target);
        what = "dev-zero";
        break;
      default:  // garbage of another length
        std::ofstream(target, std::ios::binary | std::ios::trunc) << std::string(pick(rng, 300), char(pick(rng, 256)));
        what = "garbage";
    }
    CAPTURE(i);
    CAPTURE(what);
    CAPTURE(target.string());
    // Every byte of a checkpoint is covered by a check: the damaged step never loads, the
    // other one always does (damage in `latest` leaves both intact).
    const bool in_latest = target.filename() == "latest";
    const int64_t damaged = in_latest ? -1 : (target.string().find(ckpt::step_dir_name(8)) != std::string::npos ? 8 : 4);
    const ckpt::LoadOutcome out = ckpt::load_latest(root.string());  // never throws for damage
    REQUIRE(out.checkpoint);
    CHECK(out.checkpoint->step() != damaged);
    if (damaged == 8) CHECK(out.damage_found);
    if (damaged == 8 || out.checkpoint->step() == 4) ++fell_back;
    for (int64_t step : {4, 8}) {
      CAPTURE(step);
      const auto dir = (root / ckpt::step_dir_name(step)).string();
      if (step == damaged) {
        CHECK_THROWS_AS(ckpt::open_checkpoint_path(dir, nullptr), ckpt::CheckpointError);
      } else {
        CHECK_NOTHROW(ckpt::open_checkpoint_path(dir, nullptr));
      }
    }
  }
  MESSAGE("checkpoints: " << fell_back << " of 250 fell back to step 4");
  CHECK(fell_back > 50);
}

TEST_CASE("datasets: 250 damaged .idx/.bin pairs, each refused naming the file or read within bounds") {
  Rng rng(5);
  const testing::ScratchDir scratch("fuzz-data");
  const fs::path work = scratch.path();
  const std::string good = (work / "good").string();
  {
    data::IndexedDatasetWriter w(good, data::TokenDType::UInt16, 300);
    for (int d = 0; d < 20; ++d) {
      std::vector<int32_t> doc(1 + pick(rng, 50));
      for (auto& t : doc) t = int32_t(pick(rng, 300));
      w.add_document(doc);
    }
    w.finish();
  }
  int refused = 0, opened = 0;
  for (int i = 0; i < 250; ++i) {
    const std::string prefix = (work / "case").string();
    for (const char* ext : {".idx", ".bin"}) {
      fs::remove(prefix + ext);
      fs::copy_file(good + ext, prefix + ext);
    }
    const std::string target = prefix + (pick(rng, 3) == 0 ? ".bin" : ".idx");
    const auto size = fs::file_size(target);
    std::string what;
    switch (pick(rng, 4)) {
      case 0:
        flip_bit(rng, target);
        what = "flip";
        break;
      case 1:
        fs::resize_file(target, pick(rng, size_t(size)));
        what = "cut";
        break;
      case 2:
        fs::resize_file(target, size + 1 + pick(rng, 100));
        what = "extend";
        break;
      default:
        fs::remove(target);
        REQUIRE(::mkfifo(target.c_str(), 0600) == 0);
        what = "fifo";
    }
    CAPTURE(i);
    CAPTURE(what);
    CAPTURE(target);
    try {
      const auto ds = data::IndexedDataset::open(prefix);
      ++opened;
      // Opened: every sequence reads within the mapped files.
      for (int64_t s = 0; s < ds.sequences(); ++s) CHECK(ds.sequence(s).size() == size_t(ds.sequence_length(s)));
    } catch (const data::DataError& e) {
      ++refused;
      CHECK(std::string(e.what()).find(prefix) != std::string::npos);
    }
  }
  MESSAGE("datasets: " << refused << " refused, " << opened << " opened");
  CHECK(refused > 100);
}

TEST_CASE("command lines: 200 malformed supervisor invocations, each a non-zero exit with one message") {
  Rng rng(3);
  const std::vector<std::string> commands = {"run", "plan", "inspect", "export", "prepare-data", "acceptance",
                                             "scaling", "commcheck", "inspect-update", "worker", "nope", ""};
  const std::vector<std::string> flags = {"--set", "--inject", "--megatron-args", "--out", "--throughput",
                                          "--dp", "--steps", "--input", "--format", "--tokenizer", "--connect",
                                          "--secret-file", "--listen", "--deadline", "--bogus", "-x", "--"};
  const std::vector<std::string> values = {"", "=", "a=b", "model.width=", "model.nope=1", "model.width=-4",
                                           "x@y", "stage/dp9/pp0/tp0@1:forward:kill", "1,2,x", "-5", "1e999",
                                           "/dev/zero", "/nonexistent", "/tmp", "--set", "nan", "\xff\xfe"};
  const testing::ScratchDir scratch("fuzz-cli");
  const fs::path work = scratch.path();
  int n = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<std::string> argv = {TROUPE_SUPERVISOR_BIN};
    if (const auto& c = commands[pick(rng, commands.size())]; !c.empty()) argv.push_back(c);
    const size_t k = 1 + pick(rng, 3);
    for (size_t j = 0; j < k; ++j) {
      argv.push_back(flags[pick(rng, flags.size())]);
      if (pick(rng, 4) != 0) argv.push_back(values[pick(rng, values.size())]);
    }
    // One piece that is garbage for every command, somewhere after it: no case may be a
    // valid invocation by chance.
    const std::vector<std::vector<std::string>> poison = {
        {"--bogus"}, {"--set", "model.nope=1"}, {"--set", "model.width=-4"}, {"/dev/zero"}, {"--inject", "x@y"}};
    const auto& bad = poison[pick(rng, poison.size())];
    argv.insert(argv.begin() + long(std::min(argv.size(), size_t(2)) + pick(rng, argv.size() - 1)), bad.begin(),
                bad.end());
    // Whatever else it says, a run may not write into the source tree or the cwd's runs/.
    argv.push_back("--set");
    argv.push_back("logging.run_dir=" + (work / std::to_string(i)).string());
    std::string out;
    const int rc = run_command(argv, out);
    std::string line;
    for (const auto& a : argv) line += a + " ";
    CAPTURE(line);
    CAPTURE(out.substr(0, 2000));
    CHECK(rc != -1);  // no hang
    CHECK(rc < 128);  // no crash
    CHECK(rc != 0);   // garbage is never a success
    CHECK(out.find("terminate called") == std::string::npos);
    CHECK(out.find("std::bad_alloc") == std::string::npos);
    // One message that names the command (or, without one, the usage).
    CHECK((out.rfind("supervisor", 0) == 0 || out.find("\nsupervisor") != std::string::npos ||
           out.find("usage") != std::string::npos));
    ++n;
  }
  CHECK(n == 200);
}
