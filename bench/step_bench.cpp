// step_bench: full training steps of the reference trainer (forward + backward +
// global norm + clip + AdamW) on the CPU device, against the machine's own
// cblas_sgemm rate measured in the same run.
//
//   step_bench                      every case below, each in its own process
//   step_bench --case NAME --threads N [--steps S]   one case (prints one line)
//
// Cases: tiny (2 layers, 4 heads, width 64, vocab 256, seq 64, batch 8), small (4, 4,
// 256, vocab 4096, seq 128, batch 8), gpt2-124m (12, 12, 768, vocab 50257, seq 64,
// batch 4); 1 and 2 threads.
//
// Model FLOPs per step (multiply-add = 2 FLOPs; embedding lookups, norms and
// elementwise work not counted):
//   B*T * (6 * N_mm + 6 * L * D * (T + 1))
//   N_mm = L * 12 D^2 + D * V  (the four block matrices and the tied LM head over V
//   real rows); 6 = 2 (forward) + 4 (backward: input and weight gradients); the
//   attention term is QK^T and AV over the causal average of (T + 1) / 2 keys, times 3.
// sgemm reference: cblas_sgemm with OpenBLAS running N threads on the case's MLP
// up-projection shape (M = B*T, N = 4D, K = D), median of repeated calls.
// Memory: peak RSS (getrusage) against the counted state: parameters, gradients,
// Adam m and v (4 x 4 bytes x parameters), one activation slot and the backward
// scratch; "base" is the RSS before the model was built (libraries, OpenBLAS).
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cblas.h>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "config/derived.h"
#include "kernels/cpu/cpu_device.h"
#include "optim/grad_clip.h"
#include "optim/reference_trainer.h"

extern char** environ;

using namespace troupe;

namespace {

struct Case {
  const char* name;
  int layers, heads, width, vocab, seq, batch, steps;
};

const Case kCases[] = {
    {"tiny", 2, 4, 64, 256, 64, 8, 60},
    {"small", 4, 4, 256, 4096, 128, 8, 20},
    {"gpt2-124m", 12, 12, 768, 50257, 64, 4, 7},
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

Config make_config(const Case& k) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(k.layers);
  m->set_heads(k.heads);
  m->set_width(k.width);
  m->set_vocab_size(k.vocab);
  m->set_max_positions(std::max(k.seq, 64));
  c.mutable_batch()->set_micro_batch_size(k.batch);
  c.mutable_batch()->set_global_batch_size(k.batch);
  c.mutable_batch()->set_seq_length(k.seq);
  c.mutable_training()->set_train_samples(int64_t(k.batch) * 1000);
  return c;
}

// One microbatch of full windows: documents of 20-200 tokens packed end to end.
data::Microbatch make_batch(const Case& k) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> tok(0, k.vocab - 2), len(20, 200);
  data::Microbatch mb;
  mb.batch = k.batch;
  mb.seq = k.seq;
  for (int b = 0; b < k.batch; ++b) {
    int left = len(rng), seg = 0, pos = 0;
    for (int t = 0; t < k.seq; ++t) {
      const bool eod = left == 0;
      mb.tokens.push_back(eod ? k.vocab - 1 : tok(rng));
      mb.targets.push_back(tok(rng));
      mb.positions.push_back(pos++);
      mb.segments.push_back(seg);
      mb.loss_mask.push_back(eod ? 0.0f : 1.0f);
      mb.loss_tokens += eod ? 0 : 1;
      if (eod) {
        left = len(rng);
        ++seg;
        pos = 0;
      } else {
        --left;
      }
    }
    // segments are contiguous by construction; an EOD ends its document
    mb.sample_ids.push_back(b);
  }
  mb.global_loss_tokens = mb.loss_tokens;
  return mb;
}

double sgemm_gflops(int M, int N, int K, int threads) {
  openblas_set_num_threads(threads);
  std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N);
  auto call = [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N); };
  call();
  std::vector<double> t;
  const double start = now();
  while (t.size() < 5 || (now() - start < 1.5 && t.size() < 50)) {
    const double t0 = now();
    call();
    t.push_back(now() - t0);
  }
  openblas_set_num_threads(1);
  return 2.0 * M * N * K / median(t) / 1e9;
}

int run_case(const Case& k, int threads, int steps) {
  const Config c = make_config(k);
  const int64_t BT = int64_t(k.batch) * k.seq, D = k.width, L = k.layers;
  const double sgemm = sgemm_gflops(int(BT), int(4 * D), int(D), threads);
  const double base = rss_mb();

  kernels::cpu::CpuDevice dev(threads);
  optim::ReferenceTrainer trainer(c, dev);
  const std::vector<data::Microbatch> mbs = {make_batch(k)};
  model::GptStage& m = trainer.model();

  // The trainer's step, phase by phase (zero + forward | backward | norm + clip + AdamW),
  // so that the phases are timed inside the same steps as the total.
  const auto ranges = m.registry().norm_ranges();
  auto one_step = [&](double* t) {
    t[0] = now();
    m.zero_grads();
    m.forward(0, mbs[0]);
    t[1] = now();
    m.backward(0);
    t[2] = now();
    const auto d = optim::decide(optim::sum_squares(dev, m.grads(), ranges), c.optimizer().clip_grad());
    if (!d.skip) trainer.optimizer().step(m.params(), m.grads(), trainer.schedule().lr_for_update(0), d.factor);
    t[3] = now();
  };
  double t[4];
  for (int i = 0; i < 2; ++i) one_step(t);  // warm-up: first touch, scratch growth
  std::vector<double> step, fwd, bwd;
  for (int i = 0; i < steps; ++i) {
    one_step(t);
    step.push_back(t[3] - t[0]);
    fwd.push_back(t[1] - t[0]);
    bwd.push_back(t[2] - t[1]);
  }
  const double t_step = median(step), t_fwd = median(fwd), t_bwd = median(bwd);
  const double t_best = *std::min_element(step.begin(), step.end());
  const double n_mm = double(L) * 12 * D * D + double(D) * k.vocab;
  const double flops = double(BT) * (6 * n_mm + 6.0 * L * D * (k.seq + 1));
  const double gflops = flops / t_step / 1e9;
  const int64_t n = m.param_count();
  const double counted = (4.0 * n + double(m.slot_floats()) + double(m.scratch_floats())) * 4 / (1 << 20);
  const double peak = rss_mb();
  std::printf("%-10s %2d  %9.0f  %8.4f  %8.4f  %5.1f%% %5.1f%% %5.1f%%  %7.1f  %7.1f  %5.2f  %8.1f  %8.1f  %6.1f  %5.2f\n",
              k.name, threads, double(BT) / t_step, t_step, t_best, 100 * t_fwd / t_step, 100 * t_bwd / t_step,
              100 * (t_step - t_fwd - t_bwd) / t_step, gflops, sgemm, gflops / sgemm, counted, peak, base, peak / counted);
  return 0;
}

void header() {
  std::printf("%-10s %2s  %9s  %8s  %8s  %6s %6s %6s  %7s  %7s  %5s  %8s  %8s  %6s  %5s\n", "case", "th", "tokens/s",
              "step s", "best s", "fwd", "bwd", "opt", "GFLOP/s", "sgemm", "ratio", "state MB", "peak MB", "base",
              "peak/state");
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  int threads = 1, steps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--case" && i + 1 < argc) name = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--header") { header(); return 0; }
    else {
      std::fprintf(stderr, "usage: step_bench [--case tiny|small|gpt2-124m --threads N [--steps S]]\n");
      return 2;
    }
  }
  if (!name.empty()) {
    for (const auto& k : kCases)
      if (name == k.name) return run_case(k, threads, steps > 0 ? steps : k.steps);
    std::fprintf(stderr, "step_bench: unknown case '%s' (tiny, small, gpt2-124m)\n", name.c_str());
    return 2;
  }
  header();
  std::fflush(stdout);
  for (const auto& k : kCases)
    for (int t : {1, 2}) {
      const std::string th = std::to_string(t);
      std::vector<std::string> args = {"/proc/self/exe", "--case", k.name, "--threads", th};
      std::vector<char*> cargs;
      for (auto& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      pid_t pid;
      if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0) {
        std::perror("posix_spawn");
        return 1;
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
  return 0;
}
