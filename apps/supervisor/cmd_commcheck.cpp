// `supervisor commcheck`: the network check before a run (docs/comm.md), in the manner of
// nccl-tests, over Gloo on CPU. One process per rank of the config's layout on this
// machine (this binary, spawned with hidden worker flags); each checks its groups
// (comm/gloo_check.h) and writes its rows to a job directory; this process prints them.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "comm/gloo_check.h"
#include "comm/gloo_groups.h"
#include "comm/gloo_store.h"
#include "config/derived.h"
#include "model/param_registry.h"
#include "model/stage_range.h"
#include "util/durable_file.h"

extern char** environ;

namespace troupe::cli {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: supervisor commcheck [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE]\n"
    "                            [--full] [--reduction rank-order|ring] [--host ADDR]\n"
    "                            [--timeout MS] [--deadline S] [--store-dir DIR] [--max-ranks N]\n\n"
    "Checks the communicators of CONFIG's layout the way nccl-tests check a network: for\n"
    "every group of more than one rank (DP, TP, pipeline neighbours, tied embedding) it runs\n"
    "all-reduce, reduce-scatter, all-gather and send/recv over message sizes from 4 bytes up\n"
    "to the largest the run will use (DP: a stage's gradient buffer; TP and PP: the\n"
    "activations of a microbatch; embedding: the token embedding), first one group at a\n"
    "time, then all groups at once. Every element of every result is verified exactly.\n"
    "Prints the algorithm, time, algorithm bandwidth and bus bandwidth per size.\n\n"
    "Each rank runs as its own process on this machine, connected by Gloo over TCP\n"
    "(loopback by default), meeting through a store directory. Exit status: 0 when every\n"
    "result was right, 1 when any was wrong or any rank failed.\n\n"
    "options:\n";

const char* kCheckOptions =
    "  --full                   sizes a factor 2 apart (default 16) and more iterations\n"
    "  --reduction R            all-reduce algorithm: rank-order (default, what training uses:\n"
    "                           bitwise equal to the in-process run) or ring (Gloo's ring)\n"
    "  --host ADDR              address every rank listens on (default 127.0.0.1)\n"
    "  --timeout MS             deadline of each operation (default 30000)\n"
    "  --deadline S             the whole check; ranks still running then are killed\n"
    "                           (default 300, with --full 1800)\n"
    "  --store-dir DIR          where the job directory (rendezvous store, results) is made\n"
    "                           (default: the system temporary directory); removed afterwards\n"
    "  --max-ranks N            refuse layouts with more ranks than N (default 16)\n"
    "  -h, --help               this text\n";

struct Options {
  bool full = false;
  std::string reduction = "rank-order";
  std::string host = "127.0.0.1";
  int64_t timeout_ms = 30000;
  int64_t deadline_s = 0;  // 0: 300, or 1800 with --full
  std::string store_dir;
  int max_ranks = 16;
  // Hidden: set on the processes this command spawns.
  int worker_rank = -1;
  std::string job_dir;
  int64_t parent_pid = 0;
};

// The largest message of each kind of group, in floats, from the config.
std::map<comm::GroupKind, size_t> largest_messages(const Config& c) {
  const int pp = c.parallel().pipeline();
  int64_t grads = 0;
  for (int p = 0; p < pp; ++p)
    grads = std::max(grads, model::ParameterRegistry(c, model::StageRange::pipeline(c, p, pp)).total());
  const int64_t activations = int64_t(c.batch().micro_batch_size()) * c.batch().seq_length() * c.model().width();
  const int64_t wte = config::padded_vocab(c) * c.model().width();
  return {{comm::GroupKind::kDataParallel, size_t(grads)},
          {comm::GroupKind::kTensorParallel, size_t(activations)},
          {comm::GroupKind::kPipelineNeighbours, size_t(activations)},
          {comm::GroupKind::kEmbedding, size_t(wte)}};
}

comm::LayoutCheck make_check(const Config& c, const Options& o) {
  comm::LayoutCheck check;
  check.dp = c.parallel().data();
  check.pp = c.parallel().pipeline();
  check.tp = c.parallel().tensor();
  check.max_count = largest_messages(c);
  check.factor = o.full ? 2 : 16;
  check.full = o.full;
  check.options.host = o.host;
  check.options.timeout = std::chrono::milliseconds(o.timeout_ms);
  check.options.reduction = comm::parse_reduction(o.reduction);
  check.world_timeout = std::chrono::seconds(o.deadline_s);
  return check;
}

std::string results_path(const std::string& job, int rank) { return fmt::format("{}/results/rank-{}.tsv", job, rank); }

// One rank's process: run its part, write its rows (temporary name, fsync, rename).
int worker_main(const Config& config, const Options& o) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != pid_t(o.parent_pid)) return 4;  // the parent is gone already
  ::alarm(unsigned(o.deadline_s + 10));              // ends by itself, whatever happens
  const comm::LayoutCheck check = make_check(config, o);
  comm::DirectoryStore store(o.job_dir + "/store");
  std::vector<comm::GroupRows> groups;
  try {
    groups = comm::run_layout_check(check, o.worker_rank, store, "commcheck");
  } catch (const comm::CommError& e) {
    std::fprintf(stderr, "supervisor commcheck: rank %d: %s\n", o.worker_rank, e.what());
    return 2;
  }
  std::ostringstream text;
  for (const auto& g : groups)
    for (const auto& r : g.rows)
      text << g.phase << '\t' << g.group.name << '\t' << comm::check_op_name(r.op) << '\t' << r.count << '\t'
           << r.iterations << '\t' << fmt::format("{:.9g}", r.median_s) << '\t' << r.wrong << '\n';
  util::write_file_atomically(results_path(o.job_dir, o.worker_rank), text.str());
  return 0;
}

struct Row {
  comm::CheckOp op;
  size_t count;
  int iterations;
  double median_s;
  uint64_t wrong;
};

// Rows by (phase, group name), from every rank's results file. Throws naming the file
// and line of anything malformed.
std::map<std::pair<std::string, std::string>, std::vector<Row>> read_results(const std::string& job, int ranks) {
  std::map<std::pair<std::string, std::string>, std::vector<Row>> out;
  for (int r = 0; r < ranks; ++r) {
    const std::string path = results_path(job, r);
    std::ifstream f(path);
    if (!f) continue;  // that rank failed; its error went to stderr
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      std::istringstream in(line);
      std::string phase, group, op;
      Row row{};
      if (!std::getline(in, phase, '\t') || !std::getline(in, group, '\t') || !std::getline(in, op, '\t') ||
          !(in >> row.count >> row.iterations >> row.median_s >> row.wrong))
        throw std::runtime_error(fmt::format("{}:{}: malformed result line", path, n));
      row.op = comm::parse_check_op(op);
      out[{phase, group}].push_back(row);
    }
  }
  return out;
}

std::string members_text(const std::vector<int>& m) {
  std::string s;
  for (int r : m) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(r));
  }
  return s;
}

// Spawns one process per rank (this binary, same arguments plus the worker flags)
// and waits for them, killing those still running at the deadline. Returns how many
// did not exit with status 0.
int run_workers(int argc, char** argv, int ranks, const Options& o, const std::string& job) {
  std::vector<char> exe(4096);
  const ssize_t len = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (len <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  exe[size_t(len)] = '\0';
  const std::string parent = std::to_string(::getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> args{exe.data(), "commcheck"};
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    for (const std::string& a : {std::string("--worker-rank"), std::to_string(r), std::string("--job-dir"), job,
                                 std::string("--parent-pid"), parent})
      args.push_back(a);
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, exe.data(), nullptr, nullptr, cargs.data(), environ);
    if (rc != 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      throw std::runtime_error(fmt::format("cannot start rank {}: {}", r, std::strerror(rc)));
    }
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadline_s + 15);
  int failed = 0;
  std::vector<bool> done(pids.size(), false);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failed;
        if (WIFSIGNALED(status))
          std::fprintf(stderr, "supervisor commcheck: rank %zu ended by signal %d\n", i, WTERMSIG(status));
      }
    }
    if (left > 0 && Clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) {
          std::fprintf(stderr, "supervisor commcheck: rank %zu still running at the deadline; killed\n", i);
          ::kill(pids[i], SIGKILL);
          ::waitpid(pids[i], nullptr, 0);
          ++failed;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return failed;
}

}  // namespace

int commcheck_main(int argc, char** argv) {
  ConfigArgs config_args;
  Options o;
  CommandLine cmd("commcheck");
  add_config_options(cmd.options, cmd.positional, config_args);
  cmd.options.add_options()
      ("full", po::bool_switch(&o.full))
      ("reduction", po::value<std::string>(&o.reduction))
      ("host", po::value<std::string>(&o.host))
      ("timeout", po::value<int64_t>(&o.timeout_ms))
      ("deadline", po::value<int64_t>(&o.deadline_s))
      ("store-dir", po::value<std::string>(&o.store_dir))
      ("max-ranks", po::value<int>(&o.max_ranks))
      ("worker-rank", po::value<int>(&o.worker_rank))
      ("job-dir", po::value<std::string>(&o.job_dir))
      ("parent-pid", po::value<int64_t>(&o.parent_pid))
      ("help,h", "");
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kCheckOptions))
    return *status;
  if (o.timeout_ms <= 0) throw std::invalid_argument(fmt::format("--timeout {}: must be positive", o.timeout_ms));
  if (!cmd.has("deadline")) o.deadline_s = o.full ? 1800 : 300;
  if (o.deadline_s <= 0) throw std::invalid_argument(fmt::format("--deadline {}: must be positive", o.deadline_s));
  if (o.max_ranks < 2) throw std::invalid_argument(fmt::format("--max-ranks {}: must be at least 2", o.max_ranks));
  comm::parse_reduction(o.reduction);  // one clear error before anything starts

  const LoadedConfig loaded = load_config(config_args);
  if (o.worker_rank >= 0) return worker_main(loaded.config, o);

  const comm::LayoutCheck check = make_check(loaded.config, o);
  const int ranks = check.dp * check.pp * check.tp;
  const auto groups = comm::layout_groups(check.dp, check.pp, check.tp);
  size_t checked_groups = 0;
  for (const auto& g : groups) checked_groups += g.members.size() > 1;
  std::printf("commcheck: %s\n", loaded.describe().c_str());
  std::printf("layout DP%d x PP%d x TP%d: %d rank%s, one process each, Gloo over TCP on %s\n", check.dp, check.pp,
              check.tp, ranks, ranks == 1 ? "" : "s", o.host.c_str());
  std::printf("largest messages: DP %zu B (a stage's gradient buffer), TP/PP %zu B (activations of a "
              "microbatch), embedding %zu B (wte)\n",
              check.max_count.at(comm::GroupKind::kDataParallel) * 4,
              check.max_count.at(comm::GroupKind::kTensorParallel) * 4,
              check.max_count.at(comm::GroupKind::kEmbedding) * 4);
  if (checked_groups == 0) {
    std::printf("nothing to check: every group of this layout has one rank (no data crosses a process)\n");
    return 0;
  }
  if (ranks > o.max_ranks)
    throw std::invalid_argument(fmt::format("layout has {} ranks, more than --max-ranks {} processes on this "
                                            "machine",
                                            ranks, o.max_ranks));

  const std::string base = o.store_dir.empty() ? std::filesystem::temp_directory_path().string() : o.store_dir;
  std::filesystem::create_directories(base);
  std::string tmpl = base + "/troupe-commcheck-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot make a job directory under " + base);
  const std::string job = tmpl;
  std::filesystem::create_directories(job + "/results");

  const auto t0 = Clock::now();
  int failed = 0;
  std::map<std::pair<std::string, std::string>, std::vector<Row>> results;
  try {
    failed = run_workers(argc, argv, ranks, o, job);
    results = read_results(job, ranks);
  } catch (...) {
    std::filesystem::remove_all(job);
    throw;
  }
  std::filesystem::remove_all(job);

  uint64_t wrong = 0;
  size_t rows = 0;
  for (const char* phase : {"alone", "concurrent"}) {
    for (const auto& g : groups) {
      if (g.members.size() < 2) continue;
      const auto it = results.find({phase, g.name});
      std::printf("\n# %s  %s, %zu members (ranks %s), %s\n", g.name.c_str(), comm::group_kind_name(g.kind),
                  g.members.size(), members_text(g.members).c_str(),
                  std::string(phase) == "alone" ? "alone" : "all groups at once");
      if (it == results.end()) {
        std::printf("#   no results (its first rank failed)\n");
        continue;
      }
      std::printf("# %-15s %-19s %12s %10s %6s %11s %12s %12s %6s\n", "op", "algorithm", "size(B)", "count",
                  "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wrong");
      for (const auto& r : it->second) {
        const double bytes = double(r.count) * sizeof(float);
        const double algbw = r.median_s > 0 ? bytes / r.median_s / 1e9 : 0.0;
        const int n = int(g.members.size());
        std::printf("  %-15s %-19s %12.0f %10zu %6d %11.1f %12.3f %12.3f %6llu\n", comm::check_op_name(r.op),
                    comm::check_algorithm(r.op, check.options.reduction, n).c_str(), bytes, r.count, r.iterations,
                    r.median_s * 1e6, algbw, algbw * comm::bus_factor(r.op, n), (unsigned long long)r.wrong);
        wrong += r.wrong;
        ++rows;
      }
    }
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool ok = failed == 0 && wrong == 0;
  std::printf("\ncommcheck: %zu group%s, %zu rows (size x operation x phase), %llu wrong elements, %d of %d "
              "ranks failed, %.1f s: %s\n",
              checked_groups, checked_groups == 1 ? "" : "s", rows, (unsigned long long)wrong, failed, ranks, took,
              ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace troupe::cli
