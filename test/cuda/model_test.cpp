// The whole model on the CUDA device: GptStage and engine::ReferenceTrainer run
// unchanged on a CudaDevice (they see only the kernels::Device interface).
//   - one full update (two, so that Adam's second-moment path is exercised) against
//     the CPU reference from the same config, seed and batches: loss, pre-clip grad
//     norm, gradients, Adam moments and updated weights. Bounds (fixed before any
//     run), as ||gpu - cpu|| / ||cpu||: fp32 GEMM operands 1e-5 everywhere; bf16
//     operands: loss 5e-3, grad norm 2e-2, gradients 3e-2, weights 1e-2;
//   - the same for a Llama (grouped-query attention, rotary positions, SwiGLU, untied
//     head), and for one whose heads are wider than width / heads (model.head_dim),
//     with the same bounds;
//   - bitwise identical results from two runs on the GPU;
//   - PP2 on one GPU: two stage "actors" (two CudaDevices, each with its own streams,
//     sharing GPU 0, handing activations over with events) against the single-stage
//     GPU run: loss and every gradient within 1e-5 (fp32 reassociation only: the
//     kernels are the same, only buffer offsets and the tied-embedding sum differ);
//   - generation (model/device_decoder.h) step by step against the CPU device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_device.h"
#include "model/device_decoder.h"
#include "model/gpt_stage.h"
#include "engine/reference_trainer.h"
#include "test/cuda/cuda_test_util.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;
using kernels::cpu::CpuDevice;
using kernels::cuda::CudaDevice;
using kernels::cuda::CudaDeviceOptions;
using kernels::cuda::GemmType;
using kernels::cuda::Stream;

namespace {

constexpr int kSeq = 64;

// 2 layers, 4 heads of 16, byte vocabulary (257 -> 320 rows), 2 microbatches of 2 x 64.
Config gpu_config() {
  Config c = tiny_config();
  c.mutable_model()->set_width(64);
  c.mutable_model()->set_heads(4);
  c.mutable_model()->set_max_positions(kSeq);
  c.mutable_batch()->set_seq_length(kSeq);
  c.mutable_optimizer()->set_lr(1e-3);
  return c;
}

CudaDeviceOptions opts(GemmType t) {
  CudaDeviceOptions o;
  o.gemm = t;
  return o;
}

std::vector<float> host_copy(kernels::Device& d, const float* p, int64_t n) { return download(d, p, size_t(n)); }

double rel(double got, double ref) { return std::fabs(got - ref) / std::fabs(ref); }

// gpu_config as a Llama: 4 query heads of 16 sharing 2 kv heads, SwiGLU of 128,
// rotary positions, RMSNorm, untied head.
Config gpu_llama_config() {
  Config c = gpu_config();
  auto* m = c.mutable_model();
  m->set_architecture(ModelConfig::LLAMA);
  m->set_kv_heads(2);
  m->set_ffn_width(128);
  m->set_tied_embeddings(false);
  return c;
}

void check_updates_against_cpu(const Config& c) {
  const auto mbs = packed_batches(kSeq);
  for (GemmType t : {GemmType::kF32, GemmType::kBf16}) {
    const bool bf16 = t == GemmType::kBf16;
    CAPTURE(bf16);
    CpuDevice cpu(2);
    CudaDevice gpu(opts(t));
    engine::ReferenceTrainer ref(c, cpu), run(c, gpu);
    const int64_t n = ref.model().param_count();
    REQUIRE(run.model().param_count() == n);
    // The same deterministic initialisation lands on both devices.
    CHECK(host_copy(gpu, run.model().params(), n) == host_copy(cpu, ref.model().params(), n));
    for (int step = 0; step < 2; ++step) {
      CAPTURE(step);
      const auto a = ref.step(mbs);
      const auto b = run.step(mbs);
      CHECK(b.loss_tokens == a.loss_tokens);
      CHECK(b.samples == a.samples);
      CHECK(!b.skipped);
      CHECK(b.lr == a.lr);
      CHECK(rel(b.loss, a.loss) <= (bf16 ? 5e-3 : 1e-5));
      CHECK(rel(b.grad_norm, a.grad_norm) <= (bf16 ? 2e-2 : 1e-5));
      // Pre-clip gradients of this step (the trainer leaves them in place).
      CHECK(rel_err(host_copy(gpu, run.model().grads(), n), host_copy(cpu, ref.model().grads(), n)) <=
            (bf16 ? 3e-2 : 1e-5));
      MESSAGE((bf16 ? "bf16" : "fp32") << " step " << step << ": loss cpu " << a.loss << " gpu " << b.loss
                                       << ", grad norm cpu " << a.grad_norm << " gpu " << b.grad_norm);
    }
    const auto p_cpu = host_copy(cpu, ref.model().params(), n), p_gpu = host_copy(gpu, run.model().params(), n);
    CHECK(rel_err(p_gpu, p_cpu) <= (bf16 ? 1e-2 : 1e-5));
    CHECK(rel_err(host_copy(gpu, run.optimizer().m(), n), host_copy(cpu, ref.optimizer().m(), n)) <=
          (bf16 ? 3e-2 : 1e-5));
    CHECK(rel_err(host_copy(gpu, run.optimizer().v(), n), host_copy(cpu, ref.optimizer().v(), n)) <=
          (bf16 ? 6e-2 : 1e-5));
  }
}

}  // namespace

TEST_CASE("two full updates on the GPU match the CPU reference trainer") {
  REQUIRE_GPU();
  check_updates_against_cpu(gpu_config());
}

TEST_CASE("two full updates of a Llama on the GPU match the CPU reference trainer (same bounds)") {
  REQUIRE_GPU();
  check_updates_against_cpu(gpu_llama_config());
}

TEST_CASE("two full updates of a Llama with model.head_dim on the GPU match the CPU reference trainer (same bounds)") {
  // 4 heads of 24 over width 64 (not 64 / 4 = 16): q_proj [96, 64], o_proj [64, 96].
  REQUIRE_GPU();
  Config c = gpu_llama_config();
  c.mutable_model()->set_head_dim(24);
  check_updates_against_cpu(c);
}

TEST_CASE("the GPU update is bitwise identical run to run") {
  REQUIRE_GPU();
  const Config c = gpu_config();
  const auto mbs = packed_batches(kSeq);
  std::vector<float> params[2], grads[2];
  double losses[2] = {0, 0}, norms[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    CudaDevice gpu;
    engine::ReferenceTrainer run(c, gpu);
    run.step(mbs);
    const auto s = run.step(mbs);
    losses[r] = s.loss;
    norms[r] = s.grad_norm;
    params[r] = host_copy(gpu, run.model().params(), run.model().param_count());
    grads[r] = host_copy(gpu, run.model().grads(), run.model().param_count());
  }
  CHECK(std::memcmp(&losses[0], &losses[1], sizeof(double)) == 0);
  CHECK(std::memcmp(&norms[0], &norms[1], sizeof(double)) == 0);
  CHECK(bitwise_equal(params[0], params[1]) == params[0].size());
  CHECK(bitwise_equal(grads[0], grads[1]) == grads[0].size());
}

TEST_CASE("PP2 on one GPU: two stage devices sharing GPU 0 equal the single-stage GPU run") {
  REQUIRE_GPU();
  Config c = gpu_config();
  const auto mbs = packed_batches(kSeq);
  const int m = int(mbs.size());
  CudaDevice whole_dev;
  model::GptStage whole(c, model::StageRange::whole(c), whole_dev, 1);
  whole.zero_grads();
  double whole_loss = 0;
  for (const auto& mb : mbs) {
    whole_loss += whole.forward(0, mb).loss_sum;
    whole.backward(0);
  }

  CudaDevice dev0, dev1;  // two stage actors' devices on the same GPU
  model::GptStage s0(c, model::StageRange::pipeline(c, 0, 2), dev0, m), s1(c, model::StageRange::pipeline(c, 1, 2), dev1, m);
  s0.zero_grads();
  s1.zero_grads();
  double pp_loss = 0;
  for (int i = 0; i < m; ++i) {  // GPipe: all forwards ...
    s0.forward(i, mbs[size_t(i)]);
    dev1.wait_event(Stream::kCompute, dev0.record_event(Stream::kCompute));  // activations ready
    pp_loss += s1.forward(i, mbs[size_t(i)], s0.output(i)).loss_sum;
  }
  for (int i = 0; i < m; ++i) {  // ... then all backwards, in microbatch order
    s1.backward(i);
    dev0.wait_event(Stream::kCompute, dev1.record_event(Stream::kCompute));  // input gradient ready
    s0.backward(i, s1.input_grad(i));
  }
  dev0.synchronize();
  dev1.synchronize();
  CHECK(rel(pp_loss, whole_loss) <= 1e-6);

  const auto wg = host_copy(whole_dev, whole.grads(), whole.param_count());
  const auto g0 = host_copy(dev0, s0.grads(), s0.param_count()), g1 = host_copy(dev1, s1.grads(), s1.param_count());
  int compared = 0;
  size_t bitwise = 0, total = 0;
  for (int k = 0; k < 2; ++k) {
    const model::GptStage& st = k == 0 ? s0 : s1;
    const auto& g = k == 0 ? g0 : g1;
    for (const auto& t : st.registry().tensors()) {
      if (t.name == "wte.weight") continue;
      const auto& w = whole.registry().at(t.name);
      CAPTURE(t.name);
      const std::vector<float> a(g.begin() + t.offset, g.begin() + t.offset + t.numel);
      const std::vector<float> b(wg.begin() + w.offset, wg.begin() + w.offset + w.numel);
      CHECK(rel_err(a, b) <= 1e-5);
      bitwise += bitwise_equal(a, b);
      total += a.size();
      ++compared;
    }
  }
  CHECK(compared == int(whole.registry().tensors().size()) - 1);
  const auto& w = whole.registry().at("wte.weight");
  const auto& a = s0.registry().at("wte.weight");
  const auto& b = s1.registry().at("wte.weight");
  std::vector<float> sum(size_t(w.numel)), ref(size_t(w.numel));
  for (int64_t i = 0; i < w.numel; ++i) {
    sum[size_t(i)] = g0[size_t(a.offset + i)] + g1[size_t(b.offset + i)];
    ref[size_t(i)] = wg[size_t(w.offset + i)];
  }
  CHECK(rel_err(sum, ref) <= 1e-5);
  MESSAGE("PP2 vs single stage: " << bitwise << " of " << total << " non-embedding gradient elements bitwise equal");
}

// `supervisor generate --device cuda` (model/device_decoder.h): the stepper on the GPU
// against the same stepper on the CPU device, fed the same 48 tokens. Bounds (fixed
// before any run), norm-wise over each step's logits: fp32 GEMM operands 1e-5, bf16
// operands 2e-2.
TEST_CASE("generation on the GPU: each step's logits match the CPU device's (GPT-2, Llama; fp32 and bf16 GEMMs)") {
  REQUIRE_GPU();
  for (const bool llama : {false, true}) {
    CAPTURE(llama);
    const Config c = llama ? gpu_llama_config() : gpu_config();
    CpuDevice cpu(2);
    model::GptStage init(c, model::StageRange::whole(c), cpu, 1);
    const auto params = host_copy(cpu, init.params(), init.param_count());
    const auto tokens = randint(48, 17, 0, int32_t(c.model().vocab_size()));
    for (GemmType t : {GemmType::kF32, GemmType::kBf16}) {
      const bool bf16 = t == GemmType::kBf16;
      CAPTURE(bf16);
      CudaDevice gpu(opts(t));
      model::DeviceDecoder on_gpu(c, params, gpu, 48), on_cpu(c, params, cpu, 48);
      double worst = 0;
      for (const int32_t token : tokens) {
        const auto a = on_gpu.step(token), b = on_cpu.step(token);
        worst = std::max(worst, rel_err(a, b));
      }
      MESSAGE((bf16 ? "bf16" : "fp32") << (llama ? " Llama" : " GPT-2") << ": worst step rel err " << worst);
      CHECK(worst <= (bf16 ? 2e-2 : 1e-5));
    }
  }
}

// The CUDA device's memory ledger (kernels/memory_ledger.h) through a whole update:
// the same weights, gradients, Adam moments and saved activations as the CPU device
// holds for the same model (both keep them in fp32 and count the bytes asked for);
// only the scratch differs (each device's own kernel scratch).
TEST_CASE("the CUDA device's memory ledger: the CPU's weights, gradients, moments and saved activations") {
  REQUIRE_GPU();
  const Config c = gpu_config();
  const auto mbs = packed_batches(kSeq);
  CudaDevice gpu;
  kernels::cpu::CpuDevice cpu(1);
  engine::ReferenceTrainer on_gpu(c, gpu), on_cpu(c, cpu);
  gpu.memory().reset_peak();
  cpu.memory().reset_peak();
  on_gpu.step(mbs);
  on_cpu.step(mbs);
  const kernels::MemorySplit g = gpu.memory().peak(), h = cpu.memory().peak();
  CHECK(g.weights == 4 * on_gpu.model().param_count());
  CHECK(g.weights == h.weights);
  CHECK(g.gradients == h.gradients);
  CHECK(g.optimizer_state == h.optimizer_state);
  CHECK(g.optimizer_state == 8 * on_gpu.model().param_count());
  CHECK(g.activations == h.activations);
  CHECK(g.activations == 4 * on_gpu.model().slot_saved_floats());  // one slot
  CHECK(g.scratch >= 4 * on_gpu.model().scratch_floats());         // + the device's kernel scratch
}
