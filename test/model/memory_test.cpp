// The memory ledger of a stage's device (kernels/memory_ledger.h) against the
// planner's activation term (sched/activation_memory.h), docs/compute.md
// "Recomputation" and docs/planner.md "Activation memory": on the tiny GPT-2 and
// Llama configs, cut into two pipeline stages under both schedules, the peak of a
// whole step splits into weights, gradients, optimizer state, saved activations and
// scratch that add up to the total; weights and gradients are the stage's parameter
// count x 4 bytes exactly; the saved activations equal the planner's figure exactly
// and shrink from NONE to SELECTIVE to FULL; and the shared scratch is the planner's
// plus the rotary tables and the device's kernel scratch, nothing else.
#include <doctest/doctest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/memory_ledger.h"
#include "model/gpt_stage.h"
#include "optim/adamw.h"
#include "sched/activation_memory.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;
using kernels::MemoryCategory;

TEST_CASE("memory ledger: the split at the highest total, measured afresh after reset_peak") {
  kernels::MemoryLedger m;
  int a = 0, b = 0, c = 0;
  m.add(&a, 100, MemoryCategory::kWeights);
  m.add(&b, 50, MemoryCategory::kActivations);
  m.remove(&b);
  m.add(&c, 30, MemoryCategory::kScratch);
  CHECK(m.live() == kernels::MemorySplit{100, 0, 0, 0, 30});
  CHECK(m.peak() == kernels::MemorySplit{100, 0, 0, 50, 0});  // 150 before, 130 now
  m.reset_peak();
  CHECK(m.peak() == m.live());
  m.add(&c, 80, MemoryCategory::kScratch);  // grown in place: replaces its 30
  CHECK(m.live().total() == 180);
  CHECK(m.peak() == kernels::MemorySplit{100, 0, 0, 0, 80});
  CHECK(m.blocks() == 2);
  {
    const kernels::MemoryCategoryScope outer(MemoryCategory::kGradients);
    {
      const kernels::MemoryCategoryScope inner(MemoryCategory::kOptimizerState);
      CHECK(kernels::current_memory_category() == MemoryCategory::kOptimizerState);
    }
    CHECK(kernels::current_memory_category() == MemoryCategory::kGradients);
  }
  CHECK(kernels::current_memory_category() == MemoryCategory::kScratch);
}

namespace {

struct StagePeak {
  kernels::MemorySplit split;
  int64_t params = 0;
  int64_t kernel_scratch = 0, tables = 0;
  sched::StageActivations plan;
};

// One step of c cut into p stages, each on its own device with the slots its
// schedule needs and an AdamW of its whole range: forward and backward of every
// microbatch (depth first, microbatch j in slot j mod slots), then the update.
std::vector<StagePeak> step_peaks(const Config& c) {
  const int p = c.parallel().pipeline();
  const auto plan = sched::activation_plan(c);
  std::vector<std::unique_ptr<kernels::cpu::CpuDevice>> devs;
  std::vector<std::unique_ptr<model::GptStage>> stages;
  std::vector<std::unique_ptr<optim::AdamW>> optims;
  for (int k = 0; k < p; ++k) {
    devs.push_back(std::make_unique<kernels::cpu::CpuDevice>(1));
    stages.push_back(std::make_unique<model::GptStage>(c, model::StageRange::pipeline(c, k, p), *devs.back(),
                                                       plan[size_t(k)].slots));
    optims.push_back(std::make_unique<optim::AdamW>(*devs.back(), optim::AdamWHyper{},
                                                    stages.back()->registry().decay_spans(),
                                                    model::FlatRange{0, stages.back()->param_count()}));
  }
  for (auto& d : devs) d->memory().reset_peak();
  for (auto& s : stages) s->zero_grads();
  auto mbs = packed_batches();
  for (size_t j = 0; j < mbs.size(); ++j) {
    const float* x = nullptr;
    for (int k = 0; k < p; ++k) {
      auto& s = *stages[size_t(k)];
      const int slot = int(j) % s.slots();
      s.forward(slot, mbs[j], x);
      if (!s.is_last()) x = s.output(slot);
    }
    const float* g = nullptr;
    for (int k = p - 1; k >= 0; --k) {
      auto& s = *stages[size_t(k)];
      const int slot = int(j) % s.slots();
      if (s.split_backward()) {  // ZB_H1: the input pass, then at once the weight pass
        s.backward_input(slot, g);
        s.backward_weight(slot);
      } else {
        s.backward(slot, g);
      }
      if (!s.is_first()) g = s.input_grad(slot);
    }
  }
  for (int k = 0; k < p; ++k) optims[size_t(k)]->step(stages[size_t(k)]->params(), stages[size_t(k)]->grads(), 1e-3, 1.0);
  std::vector<StagePeak> out;
  for (int k = 0; k < p; ++k) {
    StagePeak r;
    r.split = devs[size_t(k)]->memory().peak();
    r.params = stages[size_t(k)]->param_count();
    r.kernel_scratch = devs[size_t(k)]->scratch_bytes();
    r.tables = 4 * stages[size_t(k)]->table_floats();
    r.plan = plan[size_t(k)];
    CHECK(stages[size_t(k)]->slot_saved_floats() * 4 == r.plan.slot_bytes);
    out.push_back(r);
  }
  return out;
}

Config with_recompute(Config c, ModelConfig::Recompute mode, ModelConfig::RecomputeMethod method, int layers) {
  c.mutable_model()->set_recompute(mode);
  c.mutable_model()->set_recompute_method(method);
  c.mutable_model()->set_recompute_num_layers(layers);
  return c;
}

// Saved activations per stage under NONE, SELECTIVE, FULL BLOCK 1 and FULL UNIFORM.
void check_family(Config c) {
  c.mutable_model()->set_layers(4);
  c.mutable_parallel()->set_pipeline(2);
  for (const auto schedule : {ParallelConfig::ONE_F_ONE_B, ParallelConfig::GPIPE}) {
    c.mutable_parallel()->set_schedule(schedule);
    CAPTURE(ParallelConfig::Schedule_Name(schedule));
    std::vector<std::vector<int64_t>> saved;  // [mode][stage]
    for (const auto& [mode, method, layers] :
         {std::tuple{ModelConfig::NONE, ModelConfig::UNIFORM, 0}, std::tuple{ModelConfig::SELECTIVE, ModelConfig::UNIFORM, 0},
          std::tuple{ModelConfig::FULL, ModelConfig::BLOCK, 1}, std::tuple{ModelConfig::FULL, ModelConfig::UNIFORM, 0}}) {
      CAPTURE(ModelConfig::Recompute_Name(mode));
      CAPTURE(ModelConfig::RecomputeMethod_Name(method));
      saved.emplace_back();
      for (const StagePeak& s : step_peaks(with_recompute(c, mode, method, layers))) {
        CAPTURE(s.plan.stage);
        const auto& m = s.split;
        CHECK(m.total() == m.weights + m.gradients + m.optimizer_state + m.activations + m.scratch);
        CHECK(m.weights == 4 * s.params);
        CHECK(m.gradients == 4 * s.params);
        CHECK(m.optimizer_state == 8 * s.params);  // m and v of the whole range
        CHECK(m.activations == s.plan.saved_bytes());
        CHECK(m.scratch == s.plan.scratch_bytes + s.tables + s.kernel_scratch);
        CHECK(s.kernel_scratch > 0);  // attention rows and sum_squares partials grew in the step
        saved.back().push_back(m.activations);
      }
    }
    for (size_t k = 0; k < 2; ++k) {
      CAPTURE(k);
      CHECK(saved[0][k] > saved[1][k]);  // NONE > SELECTIVE
      CHECK(saved[1][k] > saved[2][k]);  // > FULL of one layer of two
      CHECK(saved[2][k] > saved[3][k]);  // > FULL of both
    }
  }
}

}  // namespace

TEST_CASE("stage memory: the ledger's split against the planner, GPT-2") { check_family(tiny_config()); }

TEST_CASE("stage memory under ZB_H1: the slots keep the weight pass's gradients, as the planner counts them") {
  for (Config c : {tiny_config(), tiny_llama_config()}) {
    CAPTURE(ModelConfig::Architecture_Name(c.model().architecture()));
    c.mutable_model()->set_layers(4);
    c.mutable_parallel()->set_pipeline(2);
    Config one_f_one_b = c;
    one_f_one_b.mutable_parallel()->set_schedule(ParallelConfig::ONE_F_ONE_B);
    c.mutable_parallel()->set_schedule(ParallelConfig::ZB_H1);
    const auto zb = step_peaks(c), base = step_peaks(one_f_one_b);
    for (size_t k = 0; k < 2; ++k) {
      CAPTURE(k);
      const StagePeak& s = zb[k];
      CHECK(s.split.activations == s.plan.saved_bytes());
      CHECK(s.split.scratch == s.plan.scratch_bytes + s.tables + s.kernel_scratch);
      CHECK(s.plan.deferred_bytes > 0);
      CHECK(s.plan.slot_bytes == base[k].plan.slot_bytes + s.plan.deferred_bytes);
      // Stage 0 in flight min(p, m) = 2 either way; stage 1 holds one more under ZB_H1
      // (microbatches past their input pass, waiting for W).
      CHECK(s.plan.in_flight == 2);
      CHECK(base[k].plan.in_flight == 2 - int(k));
    }
  }
}

TEST_CASE("stage memory: the ledger's split against the planner, Llama (grouped-query)") {
  check_family(tiny_llama_config());
}

TEST_CASE("stage memory: the ledger's split against the planner, Llama with model.head_dim") {
  // Heads of 6 over width 16 (the attention 24 wide: its output gradient lives in the
  // backward scratch beside dqkv) and of 2 (8 wide).
  SUBCASE("wider") { check_family(tiny_llama_head_dim_config(6)); }
  SUBCASE("narrower") { check_family(tiny_llama_head_dim_config(2, 1)); }
}

// The formula worked by hand for one case (docs/planner.md, "Activation memory"):
// tiny GPT-2 (width 16, 2 heads, ffn 64, B 2 x T 16 so n = 32) with 4 layers cut in
// 2 stages, 1F1B over m = 2 microbatches. Stage 0 holds 2 layers, 2 in flight, so
// min(m, 2 + 1) = 2 slots. Per layer (floats): norms' outputs and h 2 n D + n D =
// 1,536; LayerNorm statistics 2 x 2 n = 128; attention qkv 3 n D = 1,536, output n D
// = 512, probabilities B NH T^2 = 1,024; MLP 2 n F = 4,096 (SELECTIVE drops the
// probabilities and one n F). Slot: residual (2 + 1) n D = 1,536, ints and mask 5 n
// = 160, plus the stored layers.
TEST_CASE("stage memory: the activation formula worked by hand (tiny GPT-2, stage 0 of 2, 1F1B)") {
  Config c = tiny_config();
  c.mutable_model()->set_layers(4);
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_parallel()->set_schedule(ParallelConfig::ONE_F_ONE_B);
  const int64_t none_layer = 1536 + 128 + 1536 + 512 + 1024 + 4096;  // 8,832
  const int64_t selective_layer = none_layer - 1024 - 2048;           // 5,760
  struct Case {
    ModelConfig::Recompute mode;
    ModelConfig::RecomputeMethod method;
    int64_t slot_floats;
  };
  for (const Case k : {Case{ModelConfig::NONE, ModelConfig::UNIFORM, 1536 + 160 + 2 * none_layer},
                       Case{ModelConfig::SELECTIVE, ModelConfig::UNIFORM, 1536 + 160 + 2 * selective_layer},
                       Case{ModelConfig::FULL, ModelConfig::BLOCK, 1536 + 160 + none_layer},
                       Case{ModelConfig::FULL, ModelConfig::UNIFORM, 1536 + 160}}) {
    CAPTURE(ModelConfig::Recompute_Name(k.mode));
    const auto plan = sched::activation_plan(with_recompute(c, k.mode, k.method, 1));
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].in_flight == 2);
    CHECK(plan[0].slots == 2);
    CHECK(plan[1].in_flight == 1);
    CHECK(plan[1].slots == 2);
    CHECK(plan[0].slot_bytes == 4 * k.slot_floats);
    CHECK(plan[0].saved_bytes() == 2 * 4 * k.slot_floats);
  }
}
