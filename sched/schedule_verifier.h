// The pipeline schedule checked as a message system before any stage walks it
// (docs/runtime.md "The schedule verifier"). Stage k's forward of microbatch j sends
// an activation to stage k+1, whose Forward j receives it; stage k+1's backward of j
// sends a gradient to stage k, whose Backward j receives it. Each neighbour pair and
// direction is one FIFO channel. The verifier checks, in this order, and reports the
// first offending op:
//   1. shape: one op list per stage, microbatches in [0, m);
//   2. per stage: every microbatch forward once and backward once, backward after
//      forward, in-flight activations (forwards whose backward has not run) within
//      in_flight_bound(); under ZB_H1 also weight once, weight after backward, in
//      flight counted until the weight pass (within in_flight_bound()) and forwards
//      awaiting their backward within backward_bound() (weight passes appear in no
//      other schedule);
//   3. FIFO: the order of sends on each channel equals the order of its receives;
//   4. no deadlock: every op can run, each waiting only for its stage's previous op
//      and for the op that sends what it receives;
//   5. buffered messages (received, not yet consumed) within buffer_bound(), at
//      their worst over every execution the waits allow.
// With v > 1 chunks a stage (the interleaved schedule: ONE_F_ONE_B over a schedule of
// v chunks) ops are (microbatch, chunk) pairs, chunk c of stage k is virtual stage
// c p + k, and two more channels close the ring: activations from the last stage to
// the first, gradients back (sched/pipeline_schedule.h, op_source). With v = 1 every op
// is chunk 0.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/config.pb.h"
#include "sched/pipeline_schedule.h"

namespace troupe::sched {

// GPIPE: m v. ONE_F_ONE_B: min(p - k, m) at stage k; interleaved (v > 1): min(2(p - k - 1)
// + (v - 1)p + 1, m v), its warm-up forwards and the first of the steady state. ZB_H1:
// min(p, m) at every stage, counted until the weight pass (stage 0's 1F1B peak).
int32_t in_flight_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage, int32_t microbatches,
                        int32_t chunks = 1);
// Forwards whose Backward op has not run: in_flight_bound for every kind but ZB_H1,
// whose input-gradient passes keep 1F1B's min(p - k, m) (each of these microbatches
// holds its slot's whole activations; past B, only what W reads).
int32_t backward_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage, int32_t microbatches,
                       int32_t chunks = 1);

// Messages a stage may hold received but not yet consumed, per direction:
// activations from stage k-1 at most in_flight_bound(k-1) (stage k-1 cannot run a
// forward past its bound without a gradient, and stage k must have run a forward to
// send one); gradients from stage k+1 at most in_flight_bound(k) (stage k+1 only sends
// gradients of forwards stage k already ran and has not yet run backward). 0 for the
// first stage's activations and the last stage's gradients with one chunk a stage; with
// v > 1 the first stage's activations come from the last stage (bound: its in-flight
// bound) and the last stage's gradients from the first (bound: its own).
int32_t activation_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                                int32_t microbatches, int32_t chunks = 1);
int32_t gradient_buffer_bound(ParallelConfig::Schedule kind, int32_t stages, int32_t stage,
                              int32_t microbatches, int32_t chunks = 1);

struct ScheduleReport {
  bool ok = false;
  std::string error;  // the first violation, "" when ok
  // Per stage, when ok: the bound, the schedule's peak, and the worst buffered
  // activations / gradients over every execution the waits allow.
  std::vector<int32_t> in_flight_bound, peak_in_flight, peak_buffered_activations, peak_buffered_gradients;
};

// Checks s as a schedule of the given kind. Linear in the number of ops.
ScheduleReport verify_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind);

struct ScheduleViolation : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// verify_schedule, throwing ScheduleViolation("pipeline schedule <kind> (p = P, m = M,
// v = V): <error>") on a violation.
void require_valid_schedule(const PipelineSchedule& s, ParallelConfig::Schedule kind);

// The op lists the runtime runs: build_pipeline_schedule, then require_valid_schedule.
PipelineSchedule verified_pipeline_schedule(ParallelConfig::Schedule kind, int32_t stages, int32_t microbatches);
// The same for a run's config: parallel.schedule, parallel.pipeline stages and the
// microbatches per replica. run_training calls it before any actor starts, and every
// stage actor takes its own list from it. Test-only: the mutation named by
// TROUPE_TEST_SCHEDULE_MUTATION (sched/schedule_mutation.h) is applied before the check.
PipelineSchedule verified_pipeline_schedule(const Config& c);

// "INTERLEAVED_1F1B" for ONE_F_ONE_B over v > 1 chunks, else the kind's name.
std::string schedule_name(ParallelConfig::Schedule kind, int32_t chunks);

// One line for `supervisor plan`: "pipeline schedule 1F1B verified (p = 4, m = 8):
// in flight per stage 4 3 2 1 (bound p - k), ..." or the violation.
std::string schedule_verdict_line(const PipelineSchedule& s, ParallelConfig::Schedule kind);

}  // namespace troupe::sched
