// Every CUDA kernel against its CPU counterpart (kernels/cpu) on random inputs,
// forward and backward. Bounds on ||out - ref|| / ||ref||, fixed before any run:
//   fp32 paths (elementwise, LayerNorm, softmax, cross-entropy, AdamW, and the GEMM
//   layers with fp32 operands): 1e-5; sum of squares (double): 1e-12;
//   bf16 GEMM operands (fp32 accumulation): 1e-2, attention backward 1.5e-2 (two
//   chained bf16 products, dP = dO V^T then dQ = dS K, with the softmax backward
//   between them);
//   embedding forward and backward: bitwise (the same float additions in the same order);
//   the Llama family: RMSNorm, RoPE and SwiGLU are fp32 paths (1e-5); grouped-query
//   attention takes attention's bounds (the same GEMMs with G T rows or inner dimension).
// Outputs that a kernel overwrites start as NaN, so an unwritten element fails.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <future>

#include "kernels/cpu/cpu_device.h"
#include "kernels/dropout.h"
#include "kernels/cuda/cuda_check.h"
#include "test/cuda/cuda_test_util.h"

using namespace troupe;
using namespace troupe::testing;
using kernels::cpu::CpuDevice;
using kernels::cuda::CudaDevice;
using kernels::cuda::CudaDeviceOptions;
using kernels::cuda::GemmType;

namespace {

const char* name(GemmType t) { return t == GemmType::kBf16 ? "bf16" : "fp32"; }
double gemm_bound(GemmType t) { return t == GemmType::kBf16 ? 1e-2 : 1e-5; }
CudaDeviceOptions opts(GemmType t) {
  CudaDeviceOptions o;
  o.gemm = t;
  return o;
}

}  // namespace

TEST_CASE("gpu_available gives a reason exactly when it says no") {
  std::string why;
  const bool ok = kernels::cuda::gpu_available(&why);
  if (ok) {
    CHECK(why.empty());
    CHECK(kernels::cuda::device_count() >= 1);
  } else {
    CHECK(!why.empty());
    CHECK(kernels::cuda::device_count() == 0);
    MESSAGE("SKIPPED: no CUDA device: " << why);
    CHECK_THROWS_WITH_AS(CudaDevice(), doctest::Contains("no usable CUDA device"), kernels::cuda::CudaError);
  }
}

TEST_CASE("memory: zero-filled allocation, host round trips, device copies, fill_zero") {
  REQUIRE_GPU();
  CudaDevice gpu;
  const size_t n = 100003;
  auto z = gpu.allocate(int64_t(n));
  CHECK(download(gpu, z.f32(), n) == std::vector<float>(n, 0.0f));
  const auto x = randn(n, 1);
  auto a = upload(gpu, x);
  CHECK(download(gpu, a.f32(), n) == x);
  gpu.copy(z.f32(), a.f32(), n * sizeof(float));
  CHECK(download(gpu, z.f32(), n) == x);
  gpu.fill_zero(a.f32() + 10, 100 * sizeof(float));
  auto y = download(gpu, a.f32(), n);
  CHECK(y[9] == x[9]);
  CHECK(y[10] == 0.0f);
  CHECK(y[109] == 0.0f);
  CHECK(y[110] == x[110]);
  const std::vector<int32_t> ids = {3, -1, 7};
  auto ib = upload(gpu, ids);
  std::vector<int32_t> back(3);
  gpu.copy_to_host(back.data(), ib.i32(), 3 * sizeof(int32_t));
  CHECK(back == ids);
  CHECK(gpu.describe().find("cuda:0") == 0);
}

TEST_CASE("staged uploads and reads without waiting: sources reusable at once, values there in when_done") {
  REQUIRE_GPU();
  CudaDevice gpu;
  // More uploads than the staging ring holds blocks, all from one host vector that is
  // rewritten after each call: each upload must take its bytes when called.
  const int uploads = int(CudaDevice::kMaxUploadBlocks) + 44, each = 256;
  const size_t n = size_t(uploads) * size_t(each);
  auto dst = gpu.allocate(int64_t(n));
  std::vector<float> want(n), src(static_cast<size_t>(each));
  for (int i = 0; i < uploads; ++i) {
    for (int j = 0; j < each; ++j) src[size_t(j)] = want[size_t(i) * each + size_t(j)] = float(i) * 0.5f - float(j);
    gpu.copy_from_host(dst.f32() + int64_t(i) * each, src.data(), src.size() * sizeof(float));
  }
  auto host = gpu.allocate_host(n * sizeof(float));
  auto sum = gpu.allocate_host(sizeof(double));
  gpu.copy_to_host_async(host.get(), dst.f32(), n * sizeof(float));
  gpu.sum_squares_to_host(static_cast<double*>(sum.get()), dst.f32(), int64_t(n));
  std::vector<float> got;
  double got_sum = 0;
  std::promise<void> fired;
  auto fut = fired.get_future();
  gpu.when_done([&] {  // host memory only: a CUDA callback may not call CUDA
    const float* h = static_cast<const float*>(host.get());
    got.assign(h, h + n);
    got_sum = *static_cast<const double*>(sum.get());
    fired.set_value();
  });
  REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(got == want);
  const double blocking = gpu.sum_squares(dst.f32(), int64_t(n));
  CHECK(std::memcmp(&got_sum, &blocking, sizeof(double)) == 0);
  // Above kStagedUploadBytes an upload waits instead, and still round-trips.
  const auto big = randn(CudaDevice::kStagedUploadBytes / sizeof(float) + 1000, 9);
  auto b = upload(gpu, big);
  CHECK(download(gpu, b.f32(), big.size()) == big);
}

TEST_CASE("events: polling, cross-stream waits and completion callbacks") {
  REQUIRE_GPU();
  CudaDevice gpu(opts(GemmType::kBf16));
#ifdef TROUPE_CUDA_EMULATION
  const int n = 48;  // naive GEMMs on the CPU
#else
  const int n = 2048;
#endif
  auto A = upload(gpu, randn(size_t(n) * n, 2)), B = upload(gpu, randn(size_t(n) * n, 3));
  auto C = gpu.allocate(int64_t(n) * n);
  for (int i = 0; i < 8; ++i) gpu.gemm(false, false, n, n, n, 1.0f, A.f32(), n, B.f32(), n, 0.0f, C.f32(), n);
  auto compute_done = gpu.record_event(kernels::cuda::Stream::kCompute);
  // The communication stream waits for the GEMMs on the device; once its own marker
  // is reached, the compute marker must be reached too.
  gpu.wait_event(kernels::cuda::Stream::kComm, compute_done);
  auto comm_done = gpu.record_event(kernels::cuda::Stream::kComm);
  std::promise<void> fired;
  auto fut = fired.get_future();
  gpu.on_complete([&fired] { fired.set_value(); });
  comm_done.wait();
  CHECK(compute_done.done());
  CHECK(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  auto t0 = gpu.record_event(kernels::cuda::Stream::kCompute, true);
  gpu.gemm(false, false, n, n, n, 1.0f, A.f32(), n, B.f32(), n, 0.0f, C.f32(), n);
  auto t1 = gpu.record_event(kernels::cuda::Stream::kCompute, true);
  t1.wait();
  CHECK(t1.elapsed_ms_since(t0) > 0.0f);
}

TEST_CASE("gemm: every transpose combination with strided operands, alpha and beta") {
  REQUIRE_GPU();
  const int M = 67, N = 45, K = 130;
  CpuDevice cpu(2);
  for (GemmType t : {GemmType::kF32, GemmType::kBf16}) {
    CudaDevice gpu(opts(t));
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        CAPTURE(name(t));
        CAPTURE(ta);
        CAPTURE(tb);
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5;
        const auto A = randn(size_t(ta ? K : M) * lda, 10 + ta), B = randn(size_t(tb ? N : K) * ldb, 20 + tb);
        const auto C0 = randn(size_t(M) * N, 30);
        auto ref = C0;
        cpu.gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.5f, ref.data(), N);
        auto gA = upload(gpu, A), gB = upload(gpu, B), gC = upload(gpu, C0);
        gpu.gemm(ta, tb, M, N, K, 0.5f, gA.f32(), lda, gB.f32(), ldb, 0.5f, gC.f32(), N);
        CHECK(rel_err(download(gpu, gC.f32(), C0.size()), ref) <= gemm_bound(t));
      }
  }
}

TEST_CASE("embedding forward and backward equal the CPU bit for bit") {
  REQUIRE_GPU();
  const int N = 300, C = 200, V = 50, P = 40;  // C > 128: two column blocks in the backward
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto tokens = randint(N, 1, 0, V), positions = randint(N, 2, 0, P);
  const auto wte = randn(size_t(V) * C, 3), wpe = randn(size_t(P) * C, 4);
  std::vector<float> ref(size_t(N) * C);
  cpu.embedding_forward(ref.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C);
  auto gt = upload(gpu, tokens), gp = upload(gpu, positions), gw = upload(gpu, wte), gq = upload(gpu, wpe);
  auto out = poisoned(gpu, ref.size());
  gpu.embedding_forward(out.f32(), gt.i32(), gp.i32(), gw.f32(), gq.f32(), N, C);
  CHECK(download(gpu, out.f32(), ref.size()) == ref);

  const auto dout = randn(size_t(N) * C, 5);
  auto dwte = randn(size_t(V) * C, 6), dwpe = randn(size_t(P) * C, 7);
  auto gdwte = upload(gpu, dwte), gdwpe = upload(gpu, dwpe), gdout = upload(gpu, dout);
  cpu.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), N, C);
  gpu.embedding_backward(gdwte.f32(), gdwpe.f32(), gdout.f32(), gt.i32(), gp.i32(), N, C);
  CHECK(download(gpu, gdwte.f32(), dwte.size()) == dwte);
  CHECK(download(gpu, gdwpe.f32(), dwpe.size()) == dwpe);
}

TEST_CASE("vocabulary-shard embedding forward and backward equal the CPU bit for bit") {
  REQUIRE_GPU();
  const int N = 300, C = 200, V = 50, P = 40;
  const int begin = 20, rows = 17;  // tokens below, inside and above the shard
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto tokens = randint(N, 11, 0, V), positions = randint(N, 12, 0, P);
  const auto wte = randn(size_t(rows) * C, 13), wpe = randn(size_t(P) * C, 14);
  auto gt = upload(gpu, tokens), gp = upload(gpu, positions), gw = upload(gpu, wte), gq = upload(gpu, wpe);
  for (bool with_wpe : {true, false}) {
    CAPTURE(with_wpe);
    std::vector<float> ref(size_t(N) * C);
    cpu.embedding_forward_shard(ref.data(), tokens.data(), positions.data(), wte.data(),
                                with_wpe ? wpe.data() : nullptr, N, C, begin, rows);
    auto out = poisoned(gpu, ref.size());
    gpu.embedding_forward_shard(out.f32(), gt.i32(), gp.i32(), gw.f32(), with_wpe ? gq.f32() : nullptr, N, C, begin,
                                rows);
    CHECK(download(gpu, out.f32(), ref.size()) == ref);

    const auto dout = randn(size_t(N) * C, 15);
    auto dwte = randn(size_t(rows) * C, 16), dwpe = randn(size_t(P) * C, 17);
    auto gdwte = upload(gpu, dwte), gdwpe = upload(gpu, dwpe), gdout = upload(gpu, dout);
    cpu.embedding_backward_shard(dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(), tokens.data(),
                                 positions.data(), N, C, begin, rows);
    gpu.embedding_backward_shard(gdwte.f32(), with_wpe ? gdwpe.f32() : nullptr, gdout.f32(), gt.i32(), gp.i32(), N, C,
                                 begin, rows);
    CHECK(download(gpu, gdwte.f32(), dwte.size()) == dwte);
    CHECK(download(gpu, gdwpe.f32(), dwpe.size()) == dwpe);  // untouched without wpe
  }
}

TEST_CASE("layernorm forward and backward (several row chunks, a partial last warp pass)") {
  REQUIRE_GPU();
  const int N = 600, C = 80;
  const float eps = 1e-5f;
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto inp = randn(size_t(N) * C, 1, 2.0f, 0.5f), w = randn(C, 2, 0.5f, 1.0f), b = randn(C, 3);
  std::vector<float> out(size_t(N) * C), mean(N), rstd(N);
  cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, eps);
  auto gi = upload(gpu, inp), gw = upload(gpu, w), gb = upload(gpu, b);
  auto go = poisoned(gpu, out.size()), gm = poisoned(gpu, N), gr = poisoned(gpu, N);
  gpu.layernorm_forward(go.f32(), gm.f32(), gr.f32(), gi.f32(), gw.f32(), gb.f32(), N, C, eps);
  CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= 1e-5);
  CHECK(rel_err(download(gpu, gm.f32(), N), mean) <= 1e-5);
  CHECK(rel_err(download(gpu, gr.f32(), N), rstd) <= 1e-5);

  const auto dout = randn(out.size(), 4);
  auto dinp = randn(out.size(), 5), dw = randn(C, 6), db = randn(C, 7);
  auto gdi = upload(gpu, dinp), gdw = upload(gpu, dw), gdb = upload(gpu, db), gdo = upload(gpu, dout);
  cpu.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                         rstd.data(), N, C);
  gpu.layernorm_backward(gdi.f32(), gdw.f32(), gdb.f32(), gdo.f32(), gi.f32(), gw.f32(), gm.f32(), gr.f32(), N, C);
  CHECK(rel_err(download(gpu, gdi.f32(), dinp.size()), dinp) <= 1e-5);
  CHECK(rel_err(download(gpu, gdw.f32(), C), dw) <= 1e-5);
  CHECK(rel_err(download(gpu, gdb.f32(), C), db) <= 1e-5);
}

TEST_CASE("linear forward (bias, residual, aliasing, fused GELU) and backward (GELU, no dinp)") {
  REQUIRE_GPU();
  const int N = 300, C = 96, OC = 160;
  CpuDevice cpu(2);
  for (GemmType t : {GemmType::kF32, GemmType::kBf16}) {
    CAPTURE(name(t));
    const double bound = gemm_bound(t);
    CudaDevice gpu(opts(t));
    const auto inp = randn(size_t(N) * C, 1), w = randn(size_t(C) * OC, 2, 0.1f), b = randn(OC, 3);
    const auto res = randn(size_t(N) * OC, 4);
    auto gi = upload(gpu, inp), gw = upload(gpu, w), gb = upload(gpu, b), gres = upload(gpu, res);
    {  // bias + residual + GELU
      std::vector<float> out(size_t(N) * OC), gelu(out.size());
      cpu.linear_forward(out.data(), gelu.data(), inp.data(), w.data(), b.data(), res.data(), N, C, OC);
      auto go = poisoned(gpu, out.size()), gg = poisoned(gpu, out.size());
      gpu.linear_forward(go.f32(), gg.f32(), gi.f32(), gw.f32(), gb.f32(), gres.f32(), N, C, OC);
      CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= bound);
      CHECK(rel_err(download(gpu, gg.f32(), out.size()), gelu) <= bound);
    }
    {  // neither bias nor residual
      std::vector<float> out(size_t(N) * OC);
      cpu.linear_forward(out.data(), nullptr, inp.data(), w.data(), nullptr, nullptr, N, C, OC);
      auto go = poisoned(gpu, out.size());
      gpu.linear_forward(go.f32(), nullptr, gi.f32(), gw.f32(), nullptr, nullptr, N, C, OC);
      CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= bound);
    }
    {  // out aliases the residual
      auto out = res;
      cpu.linear_forward(out.data(), nullptr, inp.data(), w.data(), b.data(), out.data(), N, C, OC);
      auto go = upload(gpu, res);
      gpu.linear_forward(go.f32(), nullptr, gi.f32(), gw.f32(), gb.f32(), go.f32(), N, C, OC);
      CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= bound);
    }
    const auto dout = randn(size_t(N) * OC, 5), pre = randn(size_t(N) * C, 6);
    auto gdo = upload(gpu, dout), gpre = upload(gpu, pre);
    for (int with_gelu = 0; with_gelu < 2; ++with_gelu) {
      CAPTURE(with_gelu);
      std::vector<float> dinp(size_t(N) * C);
      auto dw = randn(w.size(), 7, 0.1f), db = randn(OC, 8);
      auto gdw = upload(gpu, dw), gdb = upload(gpu, db);
      auto gdi = poisoned(gpu, dinp.size());
      cpu.linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          with_gelu ? pre.data() : nullptr, N, C, OC);
      gpu.linear_backward(gdi.f32(), gdw.f32(), gdb.f32(), gdo.f32(), gi.f32(), gw.f32(),
                          with_gelu ? gpre.f32() : nullptr, N, C, OC);
      CHECK(rel_err(download(gpu, gdi.f32(), dinp.size()), dinp) <= bound);
      CHECK(rel_err(download(gpu, gdw.f32(), dw.size()), dw) <= bound);
      CHECK(rel_err(download(gpu, gdb.f32(), OC), db) <= 1e-5);  // column sums of fp32 dout
    }
    {  // no input gradient wanted
      auto dw = randn(w.size(), 9, 0.1f);
      auto gdw = upload(gpu, dw);
      cpu.linear_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), nullptr, N, C, OC);
      gpu.linear_backward(nullptr, gdw.f32(), nullptr, gdo.f32(), gi.f32(), gw.f32(), nullptr, N, C, OC);
      CHECK(rel_err(download(gpu, gdw.f32(), dw.size()), dw) <= bound);
    }
  }
}

TEST_CASE("attention with a per-document causal mask, forward and backward, with and without dropout") {
  REQUIRE_GPU();
  const int B = 2, T = 40, C = 64, NH = 4;
  // Row 0: documents [0, 10), [10, 27), [27, 40); row 1: one document.
  std::vector<int32_t> doc_start(size_t(B) * T);
  for (int t = 0; t < T; ++t) {
    doc_start[size_t(t)] = t < 10 ? 0 : (t < 27 ? 10 : 27);
    doc_start[size_t(T + t)] = 0;
  }
  CpuDevice cpu(2);
  for (GemmType t : {GemmType::kF32, GemmType::kBf16})
  for (const float p : {0.0f, 0.2f}) {
    CAPTURE(name(t));
    CAPTURE(p);
    // The mask of a rank whose first head is global head 2 (the draws are the CPU's).
    const auto drop = troupe::kernels::make_dropout_mask(p, 0xd20ull, 17, 2);
    CudaDevice gpu(opts(t));
    const auto qkv = randn(size_t(B) * T * 3 * C, 1);
    const size_t natt = size_t(B) * NH * T * T;
    std::vector<float> out(size_t(B) * T * C), att(natt);
    cpu.attention_forward(out.data(), att.data(), qkv.data(), doc_start.data(), B, T, C, NH, drop);
    auto gq = upload(gpu, qkv), gd = upload(gpu, doc_start);
    auto go = poisoned(gpu, out.size()), ga = poisoned(gpu, natt);
    gpu.attention_forward(go.f32(), ga.f32(), gq.f32(), gd.i32(), B, T, C, NH, drop);
    const auto gatt = download(gpu, ga.f32(), natt);
    CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= gemm_bound(t));
    CHECK(rel_err(gatt, att) <= gemm_bound(t));
    // Outside [doc_start, t] the probabilities are exactly 0.
    size_t outside_nonzero = 0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int q = 0; q < T; ++q)
          for (int s = 0; s < T; ++s)
            if ((s < doc_start[size_t(b * T + q)] || s > q) && gatt[((size_t(b) * NH + h) * T + q) * T + s] != 0.0f)
              ++outside_nonzero;
    CHECK(outside_nonzero == 0);

    const auto dout = randn(out.size(), 2);
    std::vector<float> dqkv(qkv.size());
    cpu.attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), doc_start.data(), B, T, C, NH, drop);
    auto gdo = upload(gpu, dout);
    auto gdq = poisoned(gpu, qkv.size());
    gpu.attention_backward(gdq.f32(), gdo.f32(), gq.f32(), ga.f32(), gd.i32(), B, T, C, NH, drop);
    CHECK(rel_err(download(gpu, gdq.f32(), dqkv.size()), dqkv) <= (t == GemmType::kBf16 ? 1.5e-2 : 1e-5));
  }
}

TEST_CASE("rmsnorm forward and backward (several row chunks, a partial last warp pass)") {
  REQUIRE_GPU();
  const int N = 600, C = 80;
  const float eps = 1e-5f;
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto inp = randn(size_t(N) * C, 1, 2.0f, 0.5f), w = randn(C, 2, 0.5f, 1.0f);
  std::vector<float> out(size_t(N) * C), rstd(N);
  cpu.rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
  auto gi = upload(gpu, inp), gw = upload(gpu, w);
  auto go = poisoned(gpu, out.size()), gr = poisoned(gpu, N);
  gpu.rmsnorm_forward(go.f32(), gr.f32(), gi.f32(), gw.f32(), N, C, eps);
  CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= 1e-5);
  CHECK(rel_err(download(gpu, gr.f32(), N), rstd) <= 1e-5);

  const auto dout = randn(out.size(), 4);
  auto dinp = randn(out.size(), 5), dw = randn(C, 6);  // both accumulate
  auto gdi = upload(gpu, dinp), gdw = upload(gpu, dw), gdo = upload(gpu, dout);
  cpu.rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
  gpu.rmsnorm_backward(gdi.f32(), gdw.f32(), gdo.f32(), gi.f32(), gw.f32(), gr.f32(), N, C);
  CHECK(rel_err(download(gpu, gdi.f32(), dinp.size()), dinp) <= 1e-5);
  CHECK(rel_err(download(gpu, gdw.f32(), C), dw) <= 1e-5);
}

TEST_CASE("rope forward and backward on the q and k heads of a qkv row, positions restarting mid-row") {
  REQUIRE_GPU();
  CpuDevice cpu(2);
  CudaDevice gpu;
  for (int hs : {8, 16, 24}) {  // 24: a head_dim that is no power of two (model.head_dim)
    CAPTURE(hs);
    const int T = 37, N = 2 * T, NH = 4, KV = 2, half = hs / 2;
    const int64_t ld = int64_t(NH + 2 * KV) * hs;
    std::vector<int32_t> pos(N);
    for (int t = 0; t < T; ++t) {
      pos[size_t(t)] = t < 20 ? t : t - 20;
      pos[size_t(T + t)] = t;
    }
    std::vector<float> cos, sin;
    for (int p = 0; p < T; ++p)
      for (int i = 0; i < half; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / hs);
        cos.push_back(float(std::cos(a)));
        sin.push_back(float(std::sin(a)));
      }
    auto x = randn(size_t(N) * ld, 1);
    auto gx = upload(gpu, x), gp = upload(gpu, pos), gc = upload(gpu, cos), gs = upload(gpu, sin);
    // q and k heads (NH + KV of them from column 0); the v columns stay as they are.
    cpu.rope_forward(x.data(), pos.data(), cos.data(), sin.data(), N, NH + KV, hs, ld);
    gpu.rope_forward(gx.f32(), gp.i32(), gc.f32(), gs.f32(), N, NH + KV, hs, ld);
    CHECK(rel_err(download(gpu, gx.f32(), x.size()), x) <= 1e-5);
    cpu.rope_backward(x.data(), pos.data(), cos.data(), sin.data(), N, NH + KV, hs, ld);
    gpu.rope_backward(gx.f32(), gp.i32(), gc.f32(), gs.f32(), N, NH + KV, hs, ld);
    CHECK(rel_err(download(gpu, gx.f32(), x.size()), x) <= 1e-5);
  }
}

TEST_CASE("swiglu forward and backward, in place") {
  REQUIRE_GPU();
  const size_t n = 10007;
  CpuDevice cpu(2);
  CudaDevice gpu;
  auto gate = randn(n, 1, 3.0f);
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f;
  const auto up = randn(n, 2), dout = randn(n, 3);
  auto gg = upload(gpu, gate), gu = upload(gpu, up), gd = upload(gpu, dout);
  std::vector<float> out(n), dgate(n), dup(n);
  cpu.swiglu_forward(out.data(), gate.data(), up.data(), int64_t(n));
  auto go = poisoned(gpu, n);
  gpu.swiglu_forward(go.f32(), gg.f32(), gu.f32(), int64_t(n));
  CHECK(rel_err(download(gpu, go.f32(), n), out) <= 1e-5);
  cpu.swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), int64_t(n));
  auto gdg = poisoned(gpu, n), gdu = poisoned(gpu, n);
  gpu.swiglu_backward(gdg.f32(), gdu.f32(), gd.f32(), gg.f32(), gu.f32(), int64_t(n));
  CHECK(rel_err(download(gpu, gdg.f32(), n), dgate) <= 1e-5);
  CHECK(rel_err(download(gpu, gdu.f32(), n), dup) <= 1e-5);
  gpu.swiglu_backward(gg.f32(), gu.f32(), gd.f32(), gg.f32(), gu.f32(), int64_t(n));  // dgate over gate, dup over up
  CHECK(rel_err(download(gpu, gg.f32(), n), dgate) <= 1e-5);
  CHECK(rel_err(download(gpu, gu.f32(), n), dup) <= 1e-5);
}

TEST_CASE("grouped-query attention (KV = 1, 2, 4 of NH = 4) with a per-document causal mask, with and without dropout") {
  REQUIRE_GPU();
  const int B = 2, T = 37, NH = 4;
  // Row 0: documents [0, 10), [10, 27), [27, 37); row 1: one document.
  std::vector<int32_t> doc_start(size_t(B) * T);
  for (int t = 0; t < T; ++t) {
    doc_start[size_t(t)] = t < 10 ? 0 : (t < 27 ? 10 : 27);
    doc_start[size_t(T + t)] = 0;
  }
  CpuDevice cpu(2);
  for (GemmType t : {GemmType::kF32, GemmType::kBf16}) {
    CudaDevice gpu(opts(t));
    for (const float p : {0.0f, 0.2f})
    for (int hs : {8, 16, 24})
      for (int KV : {1, 2, 4}) {
        CAPTURE(name(t));
        CAPTURE(hs);
        CAPTURE(KV);
        CAPTURE(p);
        const auto drop = troupe::kernels::make_dropout_mask(p, 0x9a0ull, 3, 0);
        const int64_t ld = int64_t(NH + 2 * KV) * hs, C = int64_t(NH) * hs;
        const auto qkv = randn(size_t(B) * T * ld, 1);
        const size_t natt = size_t(B) * NH * T * T;
        std::vector<float> out(size_t(B * T * C)), att(natt);
        cpu.gqa_attention_forward(out.data(), att.data(), qkv.data(), doc_start.data(), B, T, NH, KV, hs, drop);
        auto gq = upload(gpu, qkv), gd = upload(gpu, doc_start);
        auto go = poisoned(gpu, out.size()), ga = poisoned(gpu, natt);
        gpu.gqa_attention_forward(go.f32(), ga.f32(), gq.f32(), gd.i32(), B, T, NH, KV, hs, drop);
        const auto gatt = download(gpu, ga.f32(), natt);
        CHECK(rel_err(download(gpu, go.f32(), out.size()), out) <= gemm_bound(t));
        CHECK(rel_err(gatt, att) <= gemm_bound(t));
        size_t outside_nonzero = 0;
        for (size_t i = 0; i < natt; ++i) outside_nonzero += att[i] == 0.0f && gatt[i] != 0.0f;
        CHECK(outside_nonzero == 0);

        const auto dout = randn(out.size(), 2);
        std::vector<float> dqkv(qkv.size());
        cpu.gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), doc_start.data(), B, T, NH, KV,
                                   hs, drop);
        auto gdo = upload(gpu, dout);
        auto gdq = poisoned(gpu, qkv.size());
        gpu.gqa_attention_backward(gdq.f32(), gdo.f32(), gq.f32(), ga.f32(), gd.i32(), B, T, NH, KV, hs, drop);
        const auto got = download(gpu, gdq.f32(), dqkv.size());
        CHECK(rel_err(got, dqkv) <= (t == GemmType::kBf16 ? 1.5e-2 : 1e-5));
        // Twice gives the same bits (no atomics in the group sums).
        gpu.gqa_attention_backward(gdq.f32(), gdo.f32(), gq.f32(), ga.f32(), gd.i32(), B, T, NH, KV, hs, drop);
        CHECK(bitwise_equal(download(gpu, gdq.f32(), dqkv.size()), got) == got.size());
      }
  }
}

TEST_CASE("hidden dropout: the same bits as the CPU device, with and without an added residual, on a row block") {
  REQUIRE_GPU();
  const int T = 24, cols = 70;
  const int64_t rows = 2 * T, first = 5;  // a block of rows as sequence parallelism hands out
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto drop = troupe::kernels::make_dropout_mask(
      0.1f, troupe::kernels::dropout_key(3, 1, troupe::kernels::DropoutSite::kMlpOutput), 40, 0);
  const auto x = randn(size_t(rows) * cols, 5), add = randn(x.size(), 6);
  for (const bool with_add : {false, true}) {
    CAPTURE(with_add);
    std::vector<float> want(x.size());
    cpu.dropout(want.data(), x.data(), with_add ? add.data() : nullptr, first, rows, cols, T, drop);
    auto gx = upload(gpu, x), ga = upload(gpu, add);
    auto gy = poisoned(gpu, x.size());
    gpu.dropout(gy.f32(), gx.f32(), with_add ? ga.f32() : nullptr, first, rows, cols, T, drop);
    CHECK(bitwise_equal(download(gpu, gy.f32(), x.size()), want) == want.size());
  }
}

TEST_CASE("gelu, add and scale") {
  REQUIRE_GPU();
  const size_t n = 10007;
  CpuDevice cpu(2);
  CudaDevice gpu;
  const auto x = randn(n, 1, 3.0f), y = randn(n, 2), d = randn(n, 3);
  auto gx = upload(gpu, x), gy = upload(gpu, y), gd = upload(gpu, d);
  std::vector<float> ref(n);
  cpu.gelu_forward(ref.data(), x.data(), int64_t(n));
  auto out = poisoned(gpu, n);
  gpu.gelu_forward(out.f32(), gx.f32(), int64_t(n));
  CHECK(rel_err(download(gpu, out.f32(), n), ref) <= 1e-5);
  cpu.gelu_backward(ref.data(), x.data(), d.data(), int64_t(n));
  out = poisoned(gpu, n);
  gpu.gelu_backward(out.f32(), gx.f32(), gd.f32(), int64_t(n));
  CHECK(rel_err(download(gpu, out.f32(), n), ref) <= 1e-5);
  gpu.gelu_backward(gd.f32(), gx.f32(), gd.f32(), int64_t(n));  // dinp aliases dout
  CHECK(rel_err(download(gpu, gd.f32(), n), ref) <= 1e-5);
  cpu.add(ref.data(), x.data(), y.data(), int64_t(n));
  gpu.add(gx.f32(), gx.f32(), gy.f32(), int64_t(n));
  CHECK(download(gpu, gx.f32(), n) == ref);
  cpu.scale(ref.data(), int64_t(n), -0.37f);
  gpu.scale(gx.f32(), int64_t(n), -0.37f);
  CHECK(download(gpu, gx.f32(), n) == ref);
}

TEST_CASE("cross-entropy over padded logits with a loss mask, and its vocabulary-parallel pieces") {
  REQUIRE_GPU();
  const int N = 50, V = 1000, ld = 1024, split = 600;
  CpuDevice cpu(2);
  CudaDevice gpu;
  auto logits = randn(size_t(N) * ld, 1, 3.0f);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < ld; ++j) logits[size_t(n) * ld + j] = 1e30f;  // padding: never read
  auto targets = randint(N, 2, 0, V);
  std::vector<float> mask(N, 1.0f);
  for (int n = 0; n < N; n += 4) {
    mask[size_t(n)] = 0.0f;
    targets[size_t(n)] = -5;  // ignored where the mask is 0
  }
  std::vector<float> losses(N), lse(N);
  cpu.crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask.data(), N, V, ld);
  auto gl = upload(gpu, logits), gt = upload(gpu, targets), gm = upload(gpu, mask);
  auto glo = poisoned(gpu, N), gls = poisoned(gpu, N);
  gpu.crossentropy_forward(glo.f32(), gls.f32(), gl.f32(), gt.i32(), gm.f32(), N, V, ld);
  CHECK(rel_err(download(gpu, glo.f32(), N), losses) <= 1e-5);
  CHECK(rel_err(download(gpu, gls.f32(), N), lse) <= 1e-5);

  const float scale = 1.0f / 37.0f;
  std::vector<float> dlogits(logits.size());
  cpu.crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), mask.data(), scale, N, V, ld);
  auto gdl = poisoned(gpu, logits.size());
  gpu.crossentropy_backward(gdl.f32(), gl.f32(), gls.f32(), gt.i32(), gm.f32(), scale, N, V, ld);
  const auto got = download(gpu, gdl.f32(), logits.size());
  CHECK(rel_err(got, dlogits) <= 1e-5);
  size_t padding_nonzero = 0;
  for (int n = 0; n < N; ++n)
    for (int j = V; j < ld; ++j) padding_nonzero += got[size_t(n) * ld + j] != 0.0f;
  CHECK(padding_nonzero == 0);
  gpu.crossentropy_backward(gl.f32(), gl.f32(), gls.f32(), gt.i32(), gm.f32(), scale, N, V, ld);  // in place
  CHECK(rel_err(download(gpu, gl.f32(), logits.size()), dlogits) <= 1e-5);

  // Two vocabulary shards, each in its own [N, cols] buffer: [0, 600) and [600, 1000).
  auto shard = [&](int begin, int cols, int sld) {
    std::vector<float> s(size_t(N) * sld, 0.0f);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < cols; ++j) s[size_t(n) * sld + j] = logits[size_t(n) * ld + begin + j];
    return s;
  };
  const int ld_a = split, ld_b = V - split + 24;
  const auto la = shard(0, split, ld_a), lb = shard(split, V - split, ld_b);
  auto gla = upload(gpu, la), glb = upload(gpu, lb);
  auto partials = poisoned(gpu, size_t(2) * 3 * N);
  gpu.crossentropy_partials(partials.f32(), gla.f32(), gt.i32(), gm.f32(), N, split, ld_a, 0);
  gpu.crossentropy_partials(partials.f32() + 3 * N, glb.f32(), gt.i32(), gm.f32(), N, V - split, ld_b, split);
  auto plo = poisoned(gpu, N), pls = poisoned(gpu, N);
  gpu.crossentropy_combine(plo.f32(), pls.f32(), partials.f32(), 2, gm.f32(), N);
  CHECK(rel_err(download(gpu, plo.f32(), N), losses) <= 1e-5);
  CHECK(rel_err(download(gpu, pls.f32(), N), lse) <= 1e-5);
  auto gda = poisoned(gpu, la.size()), gdb = poisoned(gpu, lb.size());
  gpu.crossentropy_backward_shard(gda.f32(), gla.f32(), pls.f32(), gt.i32(), gm.f32(), scale, N, split, ld_a, 0);
  gpu.crossentropy_backward_shard(gdb.f32(), glb.f32(), pls.f32(), gt.i32(), gm.f32(), scale, N, V - split, ld_b,
                                  split);
  const auto da = download(gpu, gda.f32(), la.size()), db = download(gpu, gdb.f32(), lb.size());
  std::vector<float> joined(size_t(N) * V), ref(size_t(N) * V);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < V; ++j) {
      joined[size_t(n) * V + j] = j < split ? da[size_t(n) * ld_a + j] : db[size_t(n) * ld_b + j - split];
      ref[size_t(n) * V + j] = dlogits[size_t(n) * ld + j];
    }
  CHECK(rel_err(joined, ref) <= 1e-5);
}

namespace {

// n elements of an AdamW step's inputs (weights, gradients, both moments; v >= 0) and
// its arguments (the third update of beta 0.9 / 0.95, decay 0.1, a gradient scale).
struct AdamWInputs {
  std::vector<float> p, g, m, v;
  kernels::AdamWArgs a;
};
AdamWInputs adamw_inputs(size_t n) {
  AdamWInputs in{randn(n, 1, 0.5f), randn(n, 2, 1e-2f), randn(n, 3, 1e-3f), randn(n, 4, 1e-2f), {}};
  for (auto& x : in.v) x = x * x;
  in.a.lr = 3e-4f;
  in.a.weight_decay = 0.1f;
  in.a.bias_correction1 = float(1 - std::pow(0.9, 3));
  in.a.bias_correction2 = float(1 - std::pow(0.95, 3));
  in.a.grad_scale = 0.7f;
  return in;
}

}  // namespace

TEST_CASE("AdamW on fp32 master weights") {
  REQUIRE_GPU();
  const size_t n = 100003;
  CpuDevice cpu(2);
  CudaDevice gpu;
  auto [p, g, m, v, a] = adamw_inputs(n);
  auto gp = upload(gpu, p), gg = upload(gpu, g), gm = upload(gpu, m), gv = upload(gpu, v);
  cpu.adamw_update(p.data(), g.data(), m.data(), v.data(), int64_t(n), a);
  gpu.adamw_update(gp.f32(), gg.f32(), gm.f32(), gv.f32(), int64_t(n), a);
  const auto P = download(gpu, gp.f32(), n), M = download(gpu, gm.f32(), n), Vv = download(gpu, gv.f32(), n);
  CHECK(rel_err(P, p) <= 1e-6);
  CHECK(rel_err(M, m) <= 1e-6);
  CHECK(rel_err(Vv, v) <= 1e-6);
  MESSAGE("AdamW elements bitwise equal to the CPU: params " << bitwise_equal(P, p) << ", m " << bitwise_equal(M, m)
                                                            << ", v " << bitwise_equal(Vv, v) << " of " << n);
}

TEST_CASE("AdamW fused with the update-to-weight sums: the plain update's bits, the CPU's sums") {
  // Tolerances, set before the run: the update bitwise that of adamw_update on the same
  // device; the sums 1e-12 relative to the CPU's (the same exact squares in another order).
  REQUIRE_GPU();
  const size_t n = 2 * 65536 + 4097;
  CpuDevice cpu(2);
  CudaDevice gpu;
  auto [p, g, m, v, a] = adamw_inputs(n);
  auto gp = upload(gpu, p), gg = upload(gpu, g), gm = upload(gpu, m), gv = upload(gpu, v);
  auto fp = upload(gpu, p), fm = upload(gpu, m), fv = upload(gpu, v);
  auto cp = p, cm = m, cv = v;
  double cpu_u = 0, cpu_w = 0;
  cpu.adamw_update_norms(cp.data(), g.data(), cm.data(), cv.data(), int64_t(n), a, &cpu_u, &cpu_w);
  auto host = gpu.allocate_host(2 * sizeof(double));
  auto* sums = static_cast<double*>(host.get());
  gpu.adamw_update(gp.f32(), gg.f32(), gm.f32(), gv.f32(), int64_t(n), a);
  gpu.adamw_update_norms(fp.f32(), gg.f32(), fm.f32(), fv.f32(), int64_t(n), a, sums, sums + 1);
  gpu.synchronize();
  CHECK(bitwise_equal(download(gpu, fp.f32(), n), download(gpu, gp.f32(), n)) == n);
  CHECK(bitwise_equal(download(gpu, fm.f32(), n), download(gpu, gm.f32(), n)) == n);
  CHECK(bitwise_equal(download(gpu, fv.f32(), n), download(gpu, gv.f32(), n)) == n);
  double du = 0, dw = 0;
  const auto P = download(gpu, fp.f32(), n);
  for (size_t i = 0; i < n; ++i) {
    const double d = double(P[i]) - double(p[i]);
    du += d * d;
    dw += double(p[i]) * double(p[i]);
  }
  CHECK(std::fabs(sums[0] - du) <= 1e-12 * du);
  CHECK(std::fabs(sums[1] - dw) <= 1e-12 * dw);
  CHECK(std::fabs(cpu_w - dw) <= 1e-12 * dw);
  MESSAGE("update sums: GPU " << sums[0] << ", CPU " << cpu_u << "; weight sums: GPU " << sums[1] << ", CPU " << cpu_w);
}

TEST_CASE("sum of squares: CPU agreement and identical bits run to run") {
  REQUIRE_GPU();
  CpuDevice cpu(2);
  CudaDevice gpu;
  const size_t n = 3 * 65536 + 123;
  const auto x = randn(n, 1);
  auto gx = upload(gpu, x);
  const double ref = cpu.sum_squares(x.data(), int64_t(n));
  const double a = gpu.sum_squares(gx.f32(), int64_t(n)), b = gpu.sum_squares(gx.f32(), int64_t(n));
  CHECK(std::fabs(a - ref) <= 1e-12 * ref);
  CHECK(std::memcmp(&a, &b, sizeof(double)) == 0);
  CHECK(gpu.sum_squares(gx.f32(), 0) == 0.0);
  CHECK(gpu.sum_squares(gx.f32() + 5, 1) == double(x[5]) * double(x[5]));
}
