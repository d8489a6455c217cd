// gpu_bench: full training steps of GPT-2 124M (engine::ReferenceTrainer: forward,
// backward, global norm, clip, AdamW) on one GPU through the CUDA device, against the
// GPU's bf16 dense GEMM rate measured in the same run.
//
//   gpu_bench [--micro 16] [--accum 4] [--seq 1024] [--steps 5] [--warmup 2]
//             [--gemm bf16|fp32] [--layers 12 --heads 12 --width 768 --vocab 50257]
//             [--peak-size 8192] [--json FILE]
//
// Global batch = micro x accum sequences (default 64 x 1024 tokens). Documents of
// random length (geometric, mean 512 tokens) are packed into every row, so the
// per-document mask and position resets are exercised as in training.
//
// Model FLOPs per step, as bench/step_bench.cpp counts them (multiply-add = 2;
// embedding lookups, norms and elementwise work not counted):
//   B*T * (6 * N_mm + 6 * L * D * (T + 1)),   N_mm = L * 12 D^2 + D * V (real vocab rows).
// MFU = model FLOP/s / peak, peak = the median rate of an 8192^3 cuBLAS GEMM with bf16
// inputs and output and fp32 accumulation on random data (10 timed runs after 3
// warm-ups), measured before the steps. Also reported: the same GEMM with an fp32
// output (the form the device's layers use).
// Step time: wall clock from the start of step() until the device is idle again,
// median over --steps after --warmup. One further step runs with every Device call
// bracketed by CUDA events: the per-kernel shares of GPU time come from it.
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "config/derived.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/timed_device.h"
#include "engine/reference_trainer.h"
#include "util/durable_file.h"
#include "bench/stats.h"

using namespace troupe;
using kernels::cuda::CudaDevice;
using kernels::cuda::Stream;

namespace {

struct Args {
  int micro = 16, accum = 4, seq = 1024, steps = 5, warmup = 2;
  int layers = 12, heads = 12, width = 768, vocab = 50257;
  int peak_size = 8192;  // n of the n^3 reference GEMM
  std::string gemm = "bf16", json;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gpu_bench: %s\nusage: gpu_bench [--micro N] [--accum N] [--seq T] [--steps N] [--warmup N] "
               "[--gemm bf16|fp32] [--layers L] [--heads H] [--width D] [--vocab V] [--peak-size N] [--json FILE]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("option " + k + " needs a value");
    const std::string v = argv[++i];
    auto num = [&]() {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (!end || *end || x <= 0 || x > (1 << 30)) usage("option " + k + ": '" + v + "' is not a positive integer");
      return int(x);
    };
    if (k == "--micro") a.micro = num();
    else if (k == "--accum") a.accum = num();
    else if (k == "--seq") a.seq = num();
    else if (k == "--steps") a.steps = num();
    else if (k == "--warmup") a.warmup = num();
    else if (k == "--layers") a.layers = num();
    else if (k == "--heads") a.heads = num();
    else if (k == "--width") a.width = num();
    else if (k == "--vocab") a.vocab = num();
    else if (k == "--peak-size") a.peak_size = num();
    else if (k == "--gemm") {
      if (v != "bf16" && v != "fp32") usage("--gemm takes bf16 or fp32, not '" + v + "'");
      a.gemm = v;
    } else if (k == "--json") a.json = v;
    else usage("unknown option " + k);
  }
  return a;
}

Config make_config(const Args& a) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(a.layers);
  m->set_heads(a.heads);
  m->set_width(a.width);
  m->set_vocab_size(a.vocab);
  m->set_vocab_pad_multiple(64);
  m->set_max_positions(std::max(1024, a.seq));
  c.mutable_batch()->set_micro_batch_size(a.micro);
  c.mutable_batch()->set_global_batch_size(a.micro * a.accum);
  c.mutable_batch()->set_seq_length(a.seq);
  c.mutable_optimizer()->set_lr(6e-4);
  c.mutable_optimizer()->set_clip_grad(1.0);
  c.mutable_training()->set_seed(1234);
  c.mutable_training()->set_train_samples(int64_t(a.micro) * a.accum * 1000);
  return c;
}

// Packed rows: documents of geometric length (mean 512) end with EOD (= vocab - 1);
// positions restart per document; the prediction across a document boundary carries
// no loss (docs/numerics.md, "Packed windows").
std::vector<data::Microbatch> make_batch(const Args& a, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, a.vocab - 2);
  std::geometric_distribution<int> len(1.0 / 512);
  const int32_t eod = a.vocab - 1;
  std::vector<data::Microbatch> mbs(size_t(a.accum));
  int64_t total = 0;
  int64_t sample = 0;
  for (auto& mb : mbs) {
    mb.batch = a.micro;
    mb.seq = a.seq;
    for (int r = 0; r < a.micro; ++r) {
      std::vector<int32_t> win, seg, pos;
      int32_t doc = 0;
      while (int(win.size()) < a.seq + 1) {
        const int n = 1 + len(rng);
        for (int k = 0; k < n && int(win.size()) < a.seq + 1; ++k) {
          win.push_back(k + 1 == n ? eod : tok(rng));
          seg.push_back(doc);
          pos.push_back(k);
        }
        ++doc;
      }
      for (int t = 0; t < a.seq; ++t) {
        mb.tokens.push_back(win[size_t(t)]);
        mb.targets.push_back(win[size_t(t) + 1]);
        mb.positions.push_back(pos[size_t(t)]);
        mb.segments.push_back(seg[size_t(t)]);
        const bool counts = seg[size_t(t)] == seg[size_t(t) + 1];
        mb.loss_mask.push_back(counts ? 1.0f : 0.0f);
        mb.loss_tokens += counts;
      }
      mb.sample_ids.push_back(sample++);
    }
    total += mb.loss_tokens;
  }
  for (auto& mb : mbs) mb.global_loss_tokens = total;
  return mbs;
}

using troupe::bench::median;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median TFLOP/s of an n^3 cuBLAS GEMM with bf16 inputs (random), fp32 accumulation
// and a bf16 (or fp32) output.
double gemm_peak_tflops(CudaDevice& dev, int n, bool fp32_out) {
  const size_t nn = size_t(n) * n;
  std::vector<float> host(nn);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : host) x = nd(rng);
  auto staging = dev.allocate(int64_t(nn));
  dev.copy_from_host(staging.f32(), host.data(), nn * sizeof(float));
  void *A = nullptr, *B = nullptr, *C = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&A, nn * 2));
  TROUPE_CUDA_CHECK(cudaMalloc(&B, nn * 2));
  TROUPE_CUDA_CHECK(cudaMalloc(&C, nn * (fp32_out ? 4 : 2)));
  const cudaStream_t s = dev.stream(Stream::kCompute);
  kernels::cuda::launch::f32_to_bf16_2d(static_cast<__nv_bfloat16*>(A), staging.f32(), n, n, n, s);
  kernels::cuda::launch::f32_to_bf16_2d(static_cast<__nv_bfloat16*>(B), staging.f32(), n, n, n, s);  // same values, transposed use
  cublasHandle_t h = nullptr;
  TROUPE_CUBLAS_CHECK(cublasCreate(&h));
  TROUPE_CUBLAS_CHECK(cublasSetStream(h, s));
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    TROUPE_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n,
                                     &beta, C, fp32_out ? CUDA_R_32F : CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> rates;
  for (int i = 0; i < 10; ++i) {
    auto e0 = dev.record_event(Stream::kCompute, true);
    run();
    auto e1 = dev.record_event(Stream::kCompute, true);
    e1.wait();
    rates.push_back(2.0 * double(n) * n * n / (double(e1.elapsed_ms_since(e0)) * 1e-3) / 1e12);
  }
  cublasDestroy(h);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::string why;
  if (!kernels::cuda::gpu_available(&why)) {
    std::printf("gpu_bench: no GPU: %s\n", why.c_str());
    return 3;
  }
  try {
    kernels::cuda::CudaDeviceOptions o;
    o.gemm = a.gemm == "bf16" ? kernels::cuda::GemmType::kBf16 : kernels::cuda::GemmType::kF32;
    CudaDevice gpu(o);
    std::printf("device: %s\n", gpu.describe().c_str());
    const double peak = gemm_peak_tflops(gpu, a.peak_size, false);
    const double peak_f32out = gemm_peak_tflops(gpu, a.peak_size, true);
    std::printf("cuBLAS %d^3 bf16 GEMM: %.1f TFLOP/s (bf16 out), %.1f TFLOP/s (fp32 out)\n", a.peak_size, peak,
                peak_f32out);

    const Config c = make_config(a);
    kernels::cuda::TimedDevice timed(gpu);
    double t0 = now();
    engine::ReferenceTrainer trainer(c, timed);
    std::printf("model: %d layers, width %d, %d heads, vocab %d (%lld parameters); batch %d x %d sequences of %d; "
                "built in %.1f s\n",
                a.layers, a.width, a.heads, a.vocab, (long long)config::parameter_count(c), a.accum, a.micro, a.seq,
                now() - t0);
    const auto batch = make_batch(a, 1);
    const double tokens = double(a.micro) * a.accum * a.seq;
    const double L = a.layers, D = a.width, T = a.seq;
    const double n_mm = L * 12 * D * D + D * a.vocab;
    const double flops = tokens * (6 * n_mm + 6 * L * D * (T + 1));

    std::vector<double> times;
    double loss = 0;
    for (int i = 0; i < a.warmup + a.steps; ++i) {
      t0 = now();
      const auto r = trainer.step(batch);
      gpu.synchronize();
      const double dt = now() - t0;
      loss = r.loss;
      std::printf("step %d: %.1f ms, loss %.4f, grad norm %.3f%s\n", i, dt * 1e3, r.loss, r.grad_norm,
                  i < a.warmup ? " (warm-up)" : "");
      if (i >= a.warmup) times.push_back(dt);
    }
    const double step_s = median(times);
    const double tflops = flops / step_s / 1e12;

    timed.enable(true);
    t0 = now();
    trainer.step(batch);
    const auto shares = timed.collect();
    const double profiled_s = now() - t0;
    timed.enable(false);
    double gpu_ms = 0;
    for (const auto& [k, ms] : shares) gpu_ms += ms;

    std::printf("\n| quantity | value |\n| --- | --- |\n");
    std::printf("| step (median of %d) | %.1f ms |\n", a.steps, step_s * 1e3);
    std::printf("| tokens/s | %.0f |\n", tokens / step_s);
    std::printf("| model TFLOP/s | %.1f |\n", tflops);
    std::printf("| bf16 GEMM peak (measured) | %.1f TFLOP/s |\n", peak);
    std::printf("| MFU | %.1f%% |\n", 100.0 * tflops / peak);
    std::printf("| loss after the last step | %.4f |\n", loss);
    std::printf("\nper-kernel GPU time of one step (CUDA events; profiled step %.1f ms wall):\n", profiled_s * 1e3);
    std::printf("| kernel | ms | share |\n| --- | --- | --- |\n");
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [k, ms] : shares) sorted.push_back({ms, k});
    std::sort(sorted.rbegin(), sorted.rend());
    for (const auto& [ms, k] : sorted) std::printf("| %s | %.2f | %.1f%% |\n", k.c_str(), ms, 100.0 * ms / gpu_ms);
    std::printf("| (sum of kernels) | %.2f | |\n", gpu_ms);

    if (!a.json.empty()) {
      std::string j = "{\"device\": \"" + gpu.describe() + "\", \"gemm\": \"" + a.gemm + "\", \"micro\": " +
                      std::to_string(a.micro) + ", \"accum\": " + std::to_string(a.accum) + ", \"seq\": " +
                      std::to_string(a.seq) + ", \"step_ms\": " + std::to_string(step_s * 1e3) +
                      ", \"tokens_per_s\": " + std::to_string(tokens / step_s) + ", \"model_tflops\": " +
                      std::to_string(tflops) + ", \"peak_bf16_tflops\": " + std::to_string(peak) +
                      ", \"peak_bf16_f32out_tflops\": " + std::to_string(peak_f32out) + ", \"mfu\": " +
                      std::to_string(tflops / peak) + ", \"kernel_ms\": {";
      bool first = true;
      for (const auto& [k, ms] : shares) {
        j += std::string(first ? "" : ", ") + "\"" + k + "\": " + std::to_string(ms);
        first = false;
      }
      j += "}}\n";
      troupe::util::write_file_atomically(a.json, j);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
