// Measurements shared by the ladder and the scaling sweep: steady throughput over a
// window of steps, the process's resident-memory high-water mark, and the memory
// each stage rank of a layout holds through one training step.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/topology.h"
#include "kernels/memory_ledger.h"
#include "messages/config.pb.h"
#include "metrics/step_record.h"

namespace troupe::acceptance {

// Seconds from `t0` to now (how long a section took).
double seconds_since(std::chrono::steady_clock::time_point t0);

// Throughput over the updates after `warmup`: non-padding input tokens of those
// updates / the sum of their step times. Step time runs from a step's first
// microbatch to its updated weights, so checkpoint writing (asynchronous, after the
// step) and evaluation are outside it; recomputed steps are left out.
struct WindowThroughput {
  int64_t first_step = 0, last_step = 0;
  int64_t updates = 0;          // steps in the window
  int64_t skipped = 0;          // of which skipped (non-finite norm)
  int64_t real_tokens = 0;      // input tokens - padding tokens
  int64_t padding_tokens = 0;
  double step_seconds = 0;      // summed step time
  double median_step_s = 0;
  double tokens_per_s = 0;      // real_tokens / step_seconds (0 when nothing measured)
};
WindowThroughput window_throughput(const std::vector<metrics::StepRecord>& steps, int64_t warmup);

// Linux resident-set accounting of this process: reset the high-water mark
// (/proc/self/clear_refs "5"; false when the kernel refuses), and read VmHWM / VmRSS
// from /proc/self/status (0 when unreadable).
bool reset_peak_rss();
int64_t peak_rss_bytes();
int64_t current_rss_bytes();
int64_t physical_memory_bytes();

// What one stage rank holds, counted from its objects (the engine::StageWorker and
// engine::OptimizerShard the stage and optimizer actors own) and measured by their
// devices' allocation counters through one whole step (forward and backward of every
// microbatch, gradient reduction, AdamW, parameter gather).
struct RankMemory {
  engine::Rank rank;
  int64_t params = 0;          // elements of the stage's flat parameter buffer
  // Of those, copies of parameters another rank also holds (the last stage's tied wte;
  // tensor-parallel replicas on tp > 0): the tensors with counts_in_norm = false.
  int64_t duplicates = 0;
  int64_t shard = 0;           // elements whose Adam moments this rank's shard holds
  int slots = 0;               // activation slots (1F1B: p - k + 1, GPipe: m; every chunk's)
  int64_t slot_bytes = 0;      // one slot (the largest: the last chunk's): activations, token ints, mask
  int64_t all_slot_bytes = 0;  // every slot (with one chunk: slots x slot_bytes)
  // the model's backward scratch (shared by the slots), TP buffers and shared tables (rotary)
  int64_t stage_scratch_bytes = 0;
  int64_t stage_peak = 0;      // the stage device's allocation high-water mark
  int64_t stage_allocations = 0;    // blocks the stage device holds (each rounded up to 64 bytes)
  int64_t kernel_scratch = 0;  // kernel scratch of the stage device (attention rows)
  int64_t optim_peak = 0;      // the optimizer shard device's high-water mark
  int64_t optim_kernel_scratch = 0;
  // The stage device's peak by category (its memory ledger, kernel scratch included)
  // and the planner's saved-activation bytes for the stage (sched::activation_plan).
  kernels::MemorySplit stage_split;
  int64_t planned_activations = 0;

  int64_t main_state() const { return 8 * params + 8 * shard; }  // fp32 weights, grads, m, v
  int64_t activations() const { return all_slot_bytes + stage_scratch_bytes; }
  int64_t counted() const { return main_state() + activations(); }
  int64_t measured() const { return stage_peak + kernel_scratch + optim_peak + optim_kernel_scratch; }
};
std::vector<RankMemory> measure_step_memory(const Config& c);

}  // namespace troupe::acceptance
