// step_bench: full training steps of the reference trainer (forward + backward +
// global norm + clip + AdamW) on the CPU device, against the machine's own
// cblas_sgemm rate measured in the same run.
//
//   step_bench                      every case below, each in its own process
//   step_bench --case NAME --threads N [--steps S]   one case (prints one line)
//
// GPT-2 cases (model.architecture GPT2): tiny (2 layers, 4 heads, width 64, vocab 256,
// seq 64, batch 8), small (4, 4, 256, vocab 4096, seq 128, batch 8), gpt2-124m (12, 12,
// 768, vocab 50257, seq 64, batch 4). Llama cases (LLAMA: RMSNorm, rotary, grouped-query
// attention, SwiGLU, untied head, no biases): llama-small (small's L, D, V, T, B; 4
// heads of 64 sharing 2 kv heads, SwiGLU of F = 688, about 8D/3 rounded to 16),
// llama-124m (gpt2-124m's L, D, V, T, B; 12 heads of 64 sharing 4 kv heads, F = 2048).
// 1 and 2 threads.
//
// Model FLOPs per step (multiply-add = 2 FLOPs; embedding lookups, norms, rotary and
// elementwise work not counted):
//   B*T * (6 * N_mm + 6 * L * D * (T + 1))
//   GPT-2: N_mm = L * 12 D^2 + D * V  (the four block matrices and the tied LM head over
//   V real rows).
//   Llama: N_mm = L * (2 D^2 + 2 D * KV * hs + 3 D F) + D * V  (q and o: D^2 each; k and
//   v: D * KV * hs each; gate, up and down: D * F each; the untied head over V real rows).
//   6 = 2 (forward) + 4 (backward: input and weight gradients); the attention term is
//   QK^T and AV over the causal average of (T + 1) / 2 keys, times 3 (the same for both:
//   the query heads span D, whatever KV).
// sgemm reference: the kernel the step's GEMMs use (kernels/cpu/gemm.h; the first line
// printed names it): cblas_sgemm with OpenBLAS itself running N threads, or troupe's
// AVX-512 sgemm split over N threads as the device splits it, timed right
// before every step (so both see the same machine load) on two shapes: the case's MLP
// up-projection (M = B*T, N = F, K = D; F = 4D for GPT-2) and 1024^3; the reference rate of a step is
// the faster of the two. Reported: median step, median reference, and the median of
// the per-step ratios (model GFLOP/s / reference GFLOP/s). OpenBLAS's idle workers
// spin for about 2^28 cycles after a call and would steal a core from the step that
// follows a probe, so the benchmark re-executes itself with OPENBLAS_THREAD_TIMEOUT=4
// (workers sleep at once) unless that variable is already set.
// Memory: peak RSS (getrusage) against the counted state: parameters, gradients,
// Adam m and v (4 x 4 bytes x parameters), one activation slot and the backward
// scratch. "base" is the RSS before the model was built (libraries, OpenBLAS); the
// benchmark's own sgemm probe buffers are subtracted from both. Then the device's
// own peak over the timed steps, split by its memory ledger (kernels/memory_ledger.h:
// weights, gradients, optimizer state, saved activations, scratch, and their sum), in
// MiB: exact bytes, the same in every run of a case.
//
//   step_bench --repeat R   runs the whole matrix R times (cases interleaved) and ends
//                           with the per-case medians over the R runs
//   step_bench --cases small,llama-small --threads 2 --repeat 3
//                           the same over the named cases and one thread count
//   step_bench --recompute none,selective,full ...
//                           each case under each model.recompute mode (FULL: UNIFORM,
//                           every layer replayed), interleaved; a line names its case
//                           as NAME/MODE (docs/compute.md, "Recomputation")
//   step_bench --case NAME --no-reference
//                           no sgemm probe before the steps (for perf: the probes would
//                           dominate a small case's samples); sgemm and ratio read 0
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cblas.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "config/derived.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/gemm.h"
#include "optim/grad_clip.h"
#include "engine/reference_trainer.h"
#include "bench/stats.h"

using namespace troupe;

namespace {

struct Case {
  const char* name;
  int layers, heads, width, vocab, seq, batch, steps;
  bool llama = false;
  int kv_heads = 0, ffn = 0;  // LLAMA only (GPT-2: heads, 4 width)
  int ffn_width() const { return llama ? ffn : 4 * width; }
  int kv() const { return llama ? kv_heads : heads; }
};

const Case kCases[] = {
    {"tiny", 2, 4, 64, 256, 64, 8, 60},
    {"small", 4, 4, 256, 4096, 128, 8, 20},
    {"gpt2-124m", 12, 12, 768, 50257, 64, 4, 7},
    {"llama-small", 4, 4, 256, 4096, 128, 8, 20, true, 2, 688},
    {"llama-124m", 12, 12, 768, 50257, 64, 4, 7, true, 4, 2048},
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using troupe::bench::median;

double rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// model.recompute of this process's case (--recompute).
std::string g_recompute = "none";
// --no-reference: no sgemm probe before the steps (for a profiler: the probes would
// dominate a tiny step's samples); the sgemm and ratio columns then read 0.
bool g_reference = true;

Config make_config(const Case& k) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(k.layers);
  m->set_heads(k.heads);
  m->set_width(k.width);
  m->set_vocab_size(k.vocab);
  m->set_max_positions(std::max(k.seq, 64));
  if (k.llama) {
    m->set_architecture(ModelConfig::LLAMA);
    m->set_kv_heads(k.kv_heads);
    m->set_ffn_width(k.ffn);
    m->set_tied_embeddings(false);
  }
  c.mutable_batch()->set_micro_batch_size(k.batch);
  c.mutable_batch()->set_global_batch_size(k.batch);
  c.mutable_batch()->set_seq_length(k.seq);
  c.mutable_training()->set_train_samples(int64_t(k.batch) * 1000);
  m->set_recompute(g_recompute == "full" ? ModelConfig::FULL
                   : g_recompute == "selective" ? ModelConfig::SELECTIVE
                                                : ModelConfig::NONE);
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

// Times one sgemm call (after one untimed call) with the kernel the step's GEMMs run
// (kernels/cpu/gemm.h): OpenBLAS on `threads` threads (the devices keep OpenBLAS at 1
// thread, so it is set back afterwards), or oneDNN's or troupe's AVX-512 kernel split
// over a pool of `threads` as the device splits it.
struct SgemmProbe {
  int M, N, K;
  std::vector<float> A, B, C;
  SgemmProbe(int m, int n, int k)
      : M(m), N(n), K(k), A(size_t(m) * k, 0.5f), B(size_t(k) * n, 0.25f), C(size_t(m) * n) {}
  double gflops(int threads) {
    if (kernels::cpu::gemm_kernel() != kernels::cpu::GemmKernel::kOpenBlas) {
      static kernels::cpu::ThreadPool pool(threads);
      auto call = [&] { kernels::cpu::gemm(pool, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N); };
      call();
      const double t0 = now();
      call();
      return 2.0 * M * N * K / (now() - t0) / 1e9;
    }
    openblas_set_num_threads(threads);
    auto call = [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N); };
    call();
    const double t0 = now();
    call();
    const double t = now() - t0;
    openblas_set_num_threads(1);
    return 2.0 * M * N * K / t / 1e9;
  }
};

int run_case(const Case& k, int threads, int steps) {
  const Config c = make_config(k);
  const int64_t BT = int64_t(k.batch) * k.seq, D = k.width, L = k.layers;
  SgemmProbe shape_probe(int(BT), k.ffn_width(), int(D)), square_probe(1024, 1024, 1024);
  const double probes_mb = double(shape_probe.A.size() + shape_probe.B.size() + shape_probe.C.size() +
                                  square_probe.A.size() + square_probe.B.size() + square_probe.C.size()) * 4 / (1 << 20);
  shape_probe.gflops(threads);  // OpenBLAS's own buffers are part of the base, not the state
  square_probe.gflops(threads);
  const double base = rss_mb() - probes_mb;

  kernels::cpu::CpuDevice dev(threads);
  engine::ReferenceTrainer trainer(c, dev);
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
  dev.memory().reset_peak();
  const double hs = double(D) / k.heads, F = k.ffn_width();
  const double n_mm = k.llama ? double(L) * (2.0 * D * D + 2.0 * D * k.kv() * hs + 3.0 * D * F) + double(D) * k.vocab
                              : double(L) * 12 * D * D + double(D) * k.vocab;
  const double flops = double(BT) * (6 * n_mm + 6.0 * L * D * (k.seq + 1));
  std::vector<double> step, fwd, bwd, ref, ratio;
  for (int i = 0; i < steps; ++i) {
    ref.push_back(g_reference ? std::max(shape_probe.gflops(threads), square_probe.gflops(threads)) : 0.0);
    one_step(t);
    ratio.push_back(g_reference ? flops / (t[3] - t[0]) / 1e9 / ref.back() : 0.0);
    step.push_back(t[3] - t[0]);
    fwd.push_back(t[1] - t[0]);
    bwd.push_back(t[2] - t[1]);
  }
  const double t_step = median(step), t_fwd = median(fwd), t_bwd = median(bwd);
  const double t_best = *std::min_element(step.begin(), step.end());
  const double gflops = flops / t_step / 1e9, sgemm = median(ref);
  const int64_t n = m.param_count();
  const double counted = (4.0 * n + double(m.slot_floats()) + double(m.scratch_floats())) * 4 / (1 << 20);
  const double peak = rss_mb() - probes_mb;
  const kernels::MemorySplit split = dev.memory().peak();
  auto mib = [](int64_t bytes) { return double(bytes) / (1 << 20); };
  const std::string label = g_recompute == "none" ? std::string(k.name) : std::string(k.name) + "/" + g_recompute;
  std::printf("%-11s %2d  %9.0f  %8.4f  %8.4f  %5.1f%% %5.1f%% %5.1f%%  %7.1f  %7.1f  %5.2f  %8.1f  %8.1f  %6.1f  %5.2f"
              "  %7.2f %7.2f %7.2f %7.2f %7.2f %8.2f\n",
              label.c_str(), threads, double(BT) / t_step, t_step, t_best, 100 * t_fwd / t_step, 100 * t_bwd / t_step,
              100 * (t_step - t_fwd - t_bwd) / t_step, gflops, sgemm, median(ratio), counted, peak, base, peak / counted,
              mib(split.weights), mib(split.gradients), mib(split.optimizer_state), mib(split.activations),
              mib(split.scratch), mib(split.total()));
  return 0;
}

void header() {
  std::printf("# %s\n", kernels::cpu::compute_description().c_str());
  std::printf("%-11s %2s  %9s  %8s  %8s  %6s %6s %6s  %7s  %7s  %5s  %8s  %8s  %6s  %5s  %7s %7s %7s %7s %7s %8s\n",
              "case", "th", "tokens/s", "step s", "best s", "fwd", "bwd", "opt", "GFLOP/s", "sgemm", "ratio", "state MB",
              "peak MB", "base", "peak/state", "W MiB", "G MiB", "Adam", "acts", "scratch", "dev peak");
}

}  // namespace

int main(int argc, char** argv) {
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);
    std::perror("step_bench: re-executing with OPENBLAS_THREAD_TIMEOUT=4");
    return 1;
  }
  std::string name, only, modes_arg = "none";
  int threads = 0, steps = 0, repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--case" && i + 1 < argc) name = argv[++i];
    else if (a == "--cases" && i + 1 < argc) only = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--recompute" && i + 1 < argc) modes_arg = argv[++i];
    else if (a == "--no-reference") g_reference = false;
    else if (a == "--header") { header(); return 0; }
    else {
      std::fprintf(stderr,
                   "usage: step_bench [--repeat R] [--cases A,B,...] [--threads N] [--recompute M,...] | --case NAME "
                   "[--threads N] [--steps S] [--recompute M] [--no-reference]\n"
                   "cases: tiny small gpt2-124m llama-small llama-124m; recompute modes: none selective full\n");
      return 2;
    }
  }
  auto known = [](const std::string& n) -> const Case* {
    for (const auto& k : kCases)
      if (n == k.name) return &k;
    std::fprintf(stderr, "step_bench: unknown case '%s' (tiny, small, gpt2-124m, llama-small, llama-124m)\n", n.c_str());
    return nullptr;
  };
  std::vector<std::string> modes;
  for (size_t b = 0; b <= modes_arg.size();) {
    const size_t e = std::min(modes_arg.find(',', b), modes_arg.size());
    modes.push_back(modes_arg.substr(b, e - b));
    if (modes.back() != "none" && modes.back() != "selective" && modes.back() != "full") {
      std::fprintf(stderr, "step_bench: unknown recompute mode '%s' (none, selective, full)\n", modes.back().c_str());
      return 2;
    }
    b = e + 1;
  }
  if (!name.empty()) {
    g_recompute = modes.front();
    const Case* k = known(name);
    return k ? run_case(*k, threads > 0 ? threads : 1, steps > 0 ? steps : k->steps) : 2;
  }
  std::vector<const Case*> cases;
  if (only.empty()) {
    for (const auto& k : kCases) cases.push_back(&k);
  } else {
    for (size_t b = 0; b <= only.size();) {
      const size_t e = std::min(only.find(',', b), only.size());
      const Case* k = known(only.substr(b, e - b));
      if (!k) return 2;
      cases.push_back(k);
      b = e + 1;
    }
  }
  const std::vector<int> counts = threads > 0 ? std::vector<int>{threads} : std::vector<int>{1, 2};
  header();
  std::fflush(stdout);
  // Each case in its own process (a clean peak RSS); lines are collected for the medians.
  // popen runs the line through /bin/sh, where /proc/self/exe would name the shell: the
  // child is started by this binary's resolved path.
  char self[4096];
  const ssize_t self_len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (self_len <= 0) {
    std::perror("step_bench: readlink /proc/self/exe");
    return 1;
  }
  self[self_len] = 0;
  // One row per (case, thread count, mode), modes innermost so that they alternate.
  const size_t per_case = counts.size() * modes.size();
  std::vector<std::vector<std::string>> lines(cases.size() * per_case);
  for (int rep = 0; rep < repeat; ++rep)
    for (size_t ci = 0; ci < cases.size(); ++ci)
      for (size_t row = 0; row < per_case; ++row) {
        const size_t ti = row / modes.size(), mi = row % modes.size();
        const std::string cmd = "'" + std::string(self) + "' --case " + std::string(cases[ci]->name) + " --threads " +
                                std::to_string(counts[ti]) + (steps > 0 ? " --steps " + std::to_string(steps) : "") +
                                " --recompute " + modes[mi];
        FILE* p = popen(cmd.c_str(), "r");
        if (!p) return 1;
        char buf[512];
        std::string line;
        while (std::fgets(buf, sizeof buf, p)) line += buf;
        if (pclose(p) != 0) return 1;
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
        lines[ci * per_case + row].push_back(line);
      }
  if (repeat > 1) {
    std::printf("\nmedians over %d runs:\n", repeat);
    header();
    for (size_t i = 0; i < lines.size(); ++i) {
      // columns: name th tokens/s step best fwd bwd opt GFLOP/s sgemm ratio state peak base peak/state,
      // then the device's split (weights gradients Adam activations scratch peak)
      constexpr int kCols = 19;
      std::vector<std::vector<double>> cols(kCols);
      for (const auto& l : lines[i]) {
        char name[32];
        int th = 0;
        double v[kCols];
        if (std::sscanf(l.c_str(),
                        "%31s %d %lf %lf %lf %lf%% %lf%% %lf%% %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", name,
                        &th, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11],
                        &v[12], &v[13], &v[14], &v[15], &v[16], &v[17], &v[18]) == kCols + 2)
          for (int c = 0; c < kCols; ++c) cols[size_t(c)].push_back(v[c]);
      }
      if (cols[0].empty()) continue;
      const size_t row = i % per_case;
      const std::string& mode = modes[row % modes.size()];
      const std::string label =
          mode == "none" ? std::string(cases[i / per_case]->name) : std::string(cases[i / per_case]->name) + "/" + mode;
      std::printf("%-11s %2d  %9.0f  %8.4f  %8.4f  %5.1f%% %5.1f%% %5.1f%%  %7.1f  %7.1f  %5.2f  %8.1f  %8.1f  %6.1f  %5.2f"
                  "  %7.2f %7.2f %7.2f %7.2f %7.2f %8.2f\n",
                  label.c_str(), counts[row / modes.size()], median(cols[0]), median(cols[1]),
                  median(cols[2]), median(cols[3]), median(cols[4]), median(cols[5]), median(cols[6]), median(cols[7]),
                  median(cols[8]), median(cols[9]), median(cols[10]), median(cols[11]), median(cols[12]),
                  median(cols[13]), median(cols[14]), median(cols[15]), median(cols[16]), median(cols[17]),
                  median(cols[18]));
    }
  }
  return 0;
}
