// Pipeline schedules as data: for p stages and m microbatches, the ordered list of
// forward / backward ops each stage executes in one update. Stage actors walk their
// list; nothing else decides the order of work inside a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::sched {

// Backward is the whole backward of a microbatch, or under ZB_H1 its input-gradient
// pass (B: what the previous stage needs, GptStage::backward_input); Weight is ZB_H1's
// weight-gradient pass of the same microbatch (W: GptStage::backward_weight), which
// neither sends nor receives.
enum class OpKind : uint8_t { Forward, Backward, Weight };

// One op of a stage: the forward or backward of a microbatch through one of the
// stage's model chunks (0 with one chunk a stage). With v chunks a stage, stage k's
// chunk c is virtual stage c p + k: chunk c of the last stage feeds chunk c + 1 of
// the first.
struct PipelineOp {
  OpKind kind;
  int32_t microbatch;
  int32_t chunk = 0;
  bool operator==(const PipelineOp&) const = default;
};

// ops[k] is stage k's ordered op list; every stage sees each (microbatch, chunk) once
// forward and once backward (and, under ZB_H1, once weight).
struct PipelineSchedule {
  int32_t stages = 0;
  int32_t microbatches = 0;
  std::vector<std::vector<PipelineOp>> ops;
  int32_t chunks = 1;  // model chunks per stage (v)
};

// Where an op's input comes from and where its output goes, as the neighbour's op of
// the same microbatch: a forward receives from the previous virtual stage and sends to
// the next, a backward the other way. `stage` is -1 for none (the first virtual
// stage's forward reads the loader's microbatch, the last one's backward starts from
// the loss; a weight pass has neither: it reads its own stage's input-gradient pass).
struct OpLink {
  int32_t stage = -1;
  PipelineOp op{OpKind::Forward, 0, 0};
};
OpLink op_source(const PipelineSchedule& s, int32_t stage, const PipelineOp& op);
OpLink op_destination(const PipelineSchedule& s, int32_t stage, const PipelineOp& op);

// GPIPE: all forwards in microbatch order, then all backwards in microbatch order.
// ONE_F_ONE_B (non-interleaved): stage k runs min(p-k-1, m) warm-up forwards, then
// alternates one forward / one backward, then drains the remaining backwards; it holds
// at most p-k microbatches' activations at once.
// ZB_H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.1): 1F1B's
// forwards and input-gradient passes B, stage k's weight passes W held back until it
// has min(p, m) microbatches in flight (forwarded, W not run): min(p - k - 1, m) warm-up
// forwards, then F B, with a W after each pair once that many are in flight, then the
// remaining B W pairs, then the held-back W's (in microbatch order), which fill the
// cool-down bubble. Microbatches awaiting B stay at most min(p - k, m), 1F1B's count
// (each holds a slot's whole activations); every stage reaches stage 0's min(p, m) in
// flight counting the ones past B, which hold only what W reads.
// INTERLEAVED_1F1B needs its chunk count: build_interleaved_schedule or the Config form.
PipelineSchedule build_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages,
                                         int32_t microbatches);
// The schedule of a run's config: parallel.schedule over parallel.pipeline stages, the
// microbatches per replica and (INTERLEAVED_1F1B) parallel.virtual_stages chunks.
// Unverified: the runtime takes it from verified_pipeline_schedule (schedule_verifier.h).
PipelineSchedule build_pipeline_schedule(const Config& c);
// The order of an evaluation pass's forwards on every stage (no backward): m
// microbatches through the stage's chunks, in groups of p microbatches through each
// chunk in turn (with one chunk: microbatch order). Each forward's input comes from an
// op earlier in the same order on the stage it comes from, so every stage walking it
// cannot deadlock.
std::vector<PipelineOp> forward_pass_order(int32_t stages, int32_t microbatches, int32_t chunks);

// The interleaved 1F1B schedule (Megatron-LM's, v >= 2 model chunks a stage, p >= 2
// stages, m a multiple of p). Stage k's i-th forward is microbatch (i / pv) p + i mod p
// of chunk (i / p) mod v (groups of p microbatches through each chunk in turn), its
// i-th backward the same with the chunks in reverse; it runs min(2(p - k - 1) + (v - 1)p,
// mv) warm-up forwards, then one forward and one backward in turn, then the remaining
// backwards. Ideal idle (p - 1)/(vm + p - 1). Throws std::invalid_argument otherwise.
PipelineSchedule build_interleaved_schedule(int32_t stages, int32_t microbatches, int32_t chunks);

// Most microbatches whose forward has run but whose backward has not, on one stage;
// with weight passes in the list, whose weight pass has not (ZB_H1: what a slot holds).
int32_t peak_in_flight(const std::vector<PipelineOp>& stage_ops);
// Most microbatches whose forward has run but whose Backward op has not (ZB_H1: the
// ones holding their whole activations; the same as peak_in_flight without W ops).
int32_t peak_awaiting_backward(const std::vector<PipelineOp>& stage_ops);

// Simulated execution of the op lists with a forward taking `forward_time`, a
// backward `backward_time` and a weight pass `weight_time` units (a chunk's op 1/v of
// them), every op starting as soon as its stage is free and its input exists
// (op_source; a weight pass: its own stage's Backward of the microbatch). Idle fraction = 1 - busy /
// (stages * makespan); for balanced stages it equals the ideal (p-1)/(m+p-1) of GPipe
// and 1F1B, and (p-1)/(vm+p-1) of the interleaved schedule.
struct ScheduleTiming {
  double makespan = 0;
  double idle_fraction = 0;
  // start[k][i]: start time of stage k's i-th op.
  std::vector<std::vector<double>> start;
};
ScheduleTiming simulate_schedule(const PipelineSchedule& s, double forward_time = 1.0,
                                 double backward_time = 2.0, double weight_time = 1.0);
// The same with each stage's own op times (forward_time[k], backward_time[k]): the
// idle an imbalance between stages implies. Throws std::invalid_argument unless both
// vectors have one entry per stage.
ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time);
// The same with each stage's weight-pass time too (weight_time[k]; one entry a stage).
ScheduleTiming simulate_schedule(const PipelineSchedule& s, const std::vector<double>& forward_time,
                                 const std::vector<double>& backward_time, const std::vector<double>& weight_time);

// The closed form (p-1)/(m+p-1); with v chunks a stage (interleaved) (p-1)/(vm+p-1).
double ideal_idle_fraction(int64_t stages, int64_t microbatches, int64_t chunks = 1);
// ZB_H1's closed form with equal F, B and W times T (the paper's bubble (p - 1)(T_F +
// T_B - T_W) = (p - 1) T against 1F1B's (p - 1)(T_F + T_B + T_W) = 3 (p - 1) T): idle
// (p - 1)/(3m + p - 1) for m >= p. With m < p the pipeline never fills: the last
// microbatch's forwards and input-gradient passes through all p stages, behind the
// m - 1 before it on the way, then its weight pass, give a makespan of
// (m + p - 1) 2T + T, so idle 1 - 3m/(2(m + p) - 1).
double zero_bubble_idle_fraction(int64_t stages, int64_t microbatches);

std::string to_string(const PipelineOp& op);  // "F3" / "B3" / "W3" (the chunk is not named)

}  // namespace troupe::sched
