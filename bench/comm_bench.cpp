// comm_bench: Gloo all-reduce bandwidth on loopback between 2 processes, for the
// rank-order algorithm troupe uses by default and for Gloo's own ring, at 1, 16 and
// 64 MB (plus a 4-byte latency row), with reduce-scatter and all-gather alongside.
// Every result is verified exactly (integer-valued floats).
//
//   comm_bench [--iters N] [--host ADDR]
//
// Method: rank 0 (this process) and rank 1 (a forked child) rendezvous through a
// fresh directory store; before each timed operation a barrier lines them up; rank 0
// times the operation alone. Reported: the median over the iterations (after one
// warm-up), algbw = bytes / time, busbw = algbw x 2(n-1)/n for all-reduce and
// x (n-1)/n for reduce-scatter and all-gather (nccl-tests conventions).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 2;

struct Row {
  const char* op;
  const char* algorithm;
  size_t bytes;
  double median_s;
  double busbw_factor;
  size_t wrong;
};

float input(size_t i, int rank) { return float((i * 7 + size_t(rank) * 13) % 101); }

// Runs one operation `iters` times after a warm-up; returns rank 0's median seconds
// and counts wrong elements in every iteration.
template <typename Op>
double timed(comm::Communicator& c, int iters, size_t& wrong, Op op) {
  std::vector<double> t;
  for (int k = -1; k < iters; ++k) {
    c.barrier();
    const auto t0 = Clock::now();
    wrong += op();
    if (k >= 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Every measurement, in the same order on both ranks. Only rank 0's rows are printed.
std::vector<Row> measure(comm::Communicator& ring, comm::Communicator& ordered, int iters) {
  const int r = ordered.rank(), n = ordered.size();
  std::vector<Row> rows;
  const size_t sizes[] = {4, size_t(1) << 20, size_t(16) << 20, size_t(64) << 20};
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    const int it = bytes >= (size_t(64) << 20) ? std::max(3, iters / 2) : iters;
    std::vector<float> v(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      want[i] = 0;
      for (int q = 0; q < n; ++q) want[i] += input(i, q);
    }
    for (auto* c : {&ordered, &ring}) {
      size_t wrong = 0;
      const double s = timed(*c, it, wrong, [&] {
        for (size_t i = 0; i < count; ++i) v[i] = input(i, r);
        c->all_reduce_sum(v);
        return size_t(std::memcmp(v.data(), want.data(), bytes) != 0);
      });
      rows.push_back({"all_reduce", c == &ring ? "ring (Gloo)" : "rank-order", bytes, s, 2.0 * (n - 1) / n, wrong});
    }
    const auto mine = comm::chunk_range(count, n, r);
    std::vector<float> part(mine.size()), in(count);
    for (size_t i = 0; i < count; ++i) in[i] = input(i, r);
    size_t wrong = 0;
    double s = timed(ordered, it, wrong, [&] {
      ordered.reduce_scatter_sum(in, part);
      return size_t(std::memcmp(part.data(), want.data() + mine.begin, part.size() * sizeof(float)) != 0);
    });
    rows.push_back({"reduce_scatter", "direct, rank order", bytes, s, double(n - 1) / n, wrong});
    wrong = 0;
    s = timed(ordered, it, wrong, [&] {
      std::copy(want.begin() + mine.begin, want.begin() + mine.end, part.begin());
      ordered.all_gather(part, v);
      return size_t(std::memcmp(v.data(), want.data(), bytes) != 0);
    });
    rows.push_back({"all_gather", "direct", bytes, s, double(n - 1) / n, wrong});
  }
  return rows;
}

int run_rank(int rank, const std::string& dir, const std::string& host, int iters, std::vector<Row>* out) {
  comm::DirectoryStore store(dir);
  comm::GlooOptions o;
  o.host = host;
  o.timeout = std::chrono::seconds(60);
  auto ordered = comm::connect_gloo(store, "bench", "rank-order", rank, kRanks, o);
  o.reduction = comm::GlooReduction::kRing;
  auto ring = comm::connect_gloo(store, "bench", "ring", rank, kRanks, o);
  auto rows = measure(*ring, *ordered, iters);
  size_t wrong = 0;
  for (const auto& row : rows) wrong += row.wrong;
  if (out) *out = std::move(rows);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 9;
  std::string host = "127.0.0.1";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--host") && i + 1 < argc) {
      host = argv[++i];
    } else {
      std::fprintf(stderr, "usage: comm_bench [--iters N] [--host ADDR]\n");
      return 2;
    }
  }
  if (iters < 1) {
    std::fprintf(stderr, "comm_bench: --iters must be at least 1\n");
    return 2;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "troupe-comm-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    std::perror("comm_bench: mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;

  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(4);
    ::alarm(600);
    int rc = 3;
    try {
      rc = run_rank(1, dir, host, iters, nullptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm_bench rank 1: %s\n", e.what());
    }
    ::_exit(rc);
  }
  std::vector<Row> rows;
  int rc = 1;
  try {
    rc = run_rank(0, dir, host, iters, &rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench rank 0: %s\n", e.what());
    ::kill(child, SIGKILL);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;

  std::printf("# comm_bench: %d processes on %s, Gloo TCP, median of %d timed iterations (64 MB: %d)\n", kRanks,
              host.c_str(), iters, std::max(3, iters / 2));
  std::printf("# %-15s %-19s %12s %11s %12s %12s %6s\n", "op", "algorithm", "size(B)", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)", "wrong");
  for (const auto& r : rows) {
    const double algbw = double(r.bytes) / r.median_s / 1e9;
    std::printf("  %-15s %-19s %12zu %11.1f %12.3f %12.3f %6zu\n", r.op, r.algorithm, r.bytes, r.median_s * 1e6,
                algbw, algbw * r.busbw_factor, r.wrong);
  }
  if (rc != 0) std::fprintf(stderr, "comm_bench: FAILED (wrong results or a rank failed)\n");
  return rc;
}
