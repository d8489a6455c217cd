// The parity check shared by the runtime suites (test_runtime, test_tp_runtime): run a
// layout through the actor runtime and compare it with the single-device compute core
// (engine::ReferenceTrainer) fed the same global batches.
//
// Tolerances, fixed before any run and never widened. Data, pipeline and tensor
// parallelism change only the association of fp32 sums (gradients of at most 8
// microbatches, row-parallel GEMM partial sums, the vocabulary-parallel log-sum-exp,
// the tied-embedding sum), about 1e-7 relative per sum. AdamW's update is
// lr * mhat / (sqrt(vhat) + eps), a ratio of the moments, so that relative error
// reaches the parameters scaled by lr = 1e-3.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "messages/config.pb.h"
#include "engine/reference_trainer.h"
#include "test/support/same_state.h"

namespace troupe::testing {

inline constexpr double kLossRel = 1e-5;    // loss and gradient norm of each step, relative
inline constexpr double kParamAbs = 1e-5;   // every parameter, max |runtime - reference| (1% of an lr step)
inline constexpr double kMomentRel = 1e-4;  // Adam moments per tensor, max |diff| / max |reference|

// The runtime suites' layout: test/support/tiny_runtime_config.h with 4 layers, lr
// 1e-4 -> 1e-3 over 8 warm-up samples (the first update at 1e-4), DP x PP with 1F1B and
// the distributed optimizer, no restarts and no checkpoint; its run directory is
// `run_dir` in the temporary directory.
Config parity_layout(int dp, int pp, const std::string& run_dir);

// `c` with training.train_samples set for `steps` updates of its global batch.
Config with_steps(Config c, int steps);

// The run through the actors, with the final state collected; REQUIREs completion.
actors::RunResult run(const Config& c);

// Global batch `step` (0-based) of `c` as the single-device run takes it: every
// replica's microbatches, replica by replica.
std::vector<data::Microbatch> global_batch(const Config& c, const data::BatchSource& src, int step);

// The single-device run over the same global batches (every replica's microbatches).
struct Reference {
  kernels::cpu::CpuDevice device{1};
  engine::ReferenceTrainer trainer;
  std::vector<engine::StepReport> reports;

  Reference(const Config& c, int steps);
};

double max_abs(const float* a, size_t n);
double max_diff(const float* a, const float* b, size_t n);

// Every step's loss, tokens, norm, LR and clip/skip decisions; every parameter and
// both Adam moments by tensor name, and the Adam step counter.
void compare(const actors::RunResult& r, Reference& ref);

// `c` after 1 and after 3 updates against the reference.
void check_layout(const Config& c);

// The final states are bitwise identical: parameters, both Adam moments, Adam step
// (test/support/same_state.h).
void check_same_state(const actors::RunResult& got, const actors::RunResult& want);
// Bitwise: `got`'s steps are `want`'s from step index `first` on (step number, loss,
// grad norm), and the final states are identical (check_same_state).
void check_bitwise(const actors::RunResult& got, const actors::RunResult& want, size_t first = 0);

}  // namespace troupe::testing
