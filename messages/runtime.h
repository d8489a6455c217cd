// The typed messages of the training runtime, declared in one place.
//
// One step as data (docs/ARCHITECTURE.md; every message: docs/runtime.md):
//   coordinator --RunStep--> stages (an evaluation pass's also to the loaders)
//   loader[dp] --MicrobatchReady--> stage[dp][*]          (one handle, every stage of the replica)
//   stage[dp][p] --ActivationsReady--> stage[dp][p+1]      (forward)
//   stage[dp][p] <--GradientsReady-- stage[dp][p+1]        (backward)
//   (interleaved: also stage[dp][last] --ActivationsReady--> stage[dp][0] and back)
//   stage[dp][last] --LossReport--> coordinator
//   stage --GradShardReady--> optim shard --NormPartial--> coordinator
//   coordinator --UpdateCommand--> optim shards --ShardApplied--> stage
//   (one optimizer shard and logging.on_spike not acting: the shard decides the update
//   from its own partial and the RunStep's UpdateRule; no UpdateCommand)
//   stage --StageDone--> coordinator --StepRecord--> metrics
//
// Inside one process tensors travel by handle (a pointer with a documented
// lifetime, or a shared_ptr): nothing is copied into a message. Across processes
// (cluster mode, docs/cluster.md) the messages that cross are serialized
// (actors/cluster/wire_types.h): a microbatch travels by value, while activations and their
// gradients go through the pipeline-neighbour communicator and the message carries
// only their metadata. GradShardReady, ShardApplied and ShardSnapshot never cross:
// a rank's stage, optimizer shard and writer always share a process. Plain structs:
// the engine and tests use them without CAF.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "messages/rank.h"

namespace troupe::msg {

// What a step is for.
enum class StepKind : uint8_t {
  Train,  // forward + backward + update
  Eval,   // forward only on the validation split; weights, RNG and data position untouched
};

// How a training step's update is decided, handed out with its RunStep (docs/runtime.md,
// "Who decides the update"). With one optimizer shard and logging.on_spike not acting,
// the update depends on that shard's norm partial alone: the stage passes the rule on in
// its GradShardReady and the shard decides (optim::decide(partial, clip_grad)) and
// applies it at `lr` without waiting for an UpdateCommand; the coordinator decides the
// same from the same partial for the step record and checks what the shard applied
// (StageDone::applied). Otherwise the coordinator decides and sends UpdateCommands.
struct UpdateRule {
  bool shard_decides = false;
  double lr = 0;         // this step's learning rate (shard_decides only)
  double clip_grad = 0;  // optimizer.clip_grad (shard_decides only)
};

// coordinator -> stages: start step `step`. An Eval pass's RunStep also goes to the
// loaders, which produce its microbatches on it; training microbatches stream ahead on
// credits without one. For Train, the global batch begins at `consumed_samples`; for
// Eval, `consumed_samples` indexes the validation order.
struct RunStep {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  int64_t consumed_samples = 0;
  int32_t microbatches = 0;  // per replica
  // A training step handed over ahead (the coordinator's run_ahead): the stage may hold
  // the previous step's StageDone until this step's ops end, so that nothing is sent
  // between the two steps' compute (docs/runtime.md). False when the coordinator needs
  // the previous step closed at once: it is to be checkpointed, or it is the first
  // step after a restart (its close ends the recovery's measurement).
  bool previous_done_may_wait = false;
  UpdateRule update;  // Train: who decides this step's update
};

// loader[dp] -> every stage of replica dp (and the counts to the coordinator).
struct MicrobatchReady {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  int32_t microbatch = 0;
  std::shared_ptr<const data::Microbatch> batch;
};

// A float tensor passed by handle: rows x cols, row-major, at `data`. In one process
// `data` points into the sender's activation slot, whose values stay put until the
// receiver has consumed them (engine::activation_slots; in evaluation, where no
// backward paces the slots, until the receiver's eval_consumed_atom); `owner` keeps
// the memory itself alive: the sender's stage (so a stage stopped by a restart never
// frees a slot its neighbour is still reading), or the host copy the receiver made of
// values received over Gloo.
struct Activations {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  std::shared_ptr<const void> owner;
  // Set when the sender lives in another process: the values went through the
  // pipeline-neighbour communicator and `data` is null until the receiver has received
  // them (rows x cols floats): over Gloo as the message arrives; over NCCL (GPUs) it
  // stays null and the receive is issued into the stage's inbox when the op runs.
  bool via_comm = false;
};

// stage[dp][p] -> stage[dp][p+1]: the output of stage p for one microbatch.
// `chunk`: the receiver's model chunk that takes them (0 without interleaving; under
// the interleaved schedule the last stage's chunk c feeds the first stage's c + 1).
struct ActivationsReady {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  int32_t microbatch = 0;
  Activations x;
  int32_t chunk = 0;
};

// stage[dp][p+1] -> stage[dp][p]: d(loss)/d(stage p's output) for one microbatch
// (`chunk`: the receiver's, as above; the first stage's chunk c feeds the last stage's
// chunk c - 1 backwards).
struct GradientsReady {
  int64_t step = 0;
  int32_t microbatch = 0;
  Activations dx;
  int32_t chunk = 0;
};

// One packed segment of a microbatch row (data/packing.h: segment k of a row is piece
// k of its sample's window, so the coordinator names its document from the sample ID,
// data::BatchSource::pieces_of): the sum of its per-token losses and its loss-bearing
// tokens (engine/document_losses.h).
struct SegmentLoss {
  int32_t row = 0;
  int32_t segment = 0;
  double loss_sum = 0;
  int64_t loss_tokens = 0;
};

// last stage -> coordinator: the un-normalised loss of one microbatch. The step's
// loss is the sum over all microbatches / the global batch's loss-bearing tokens.
struct LossReport {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  int32_t dp = 0;
  int32_t microbatch = 0;
  double loss_sum = 0;
  int64_t loss_tokens = 0;
  bool finite = true;
  // The same losses by packed segment (training steps only; for the spike record's
  // documents): the segments with at least one loss-bearing token, in (row, segment)
  // order. A few numbers per segment, never per token.
  std::vector<SegmentLoss> segments;
};

// loader -> coordinator: what replica dp's part of the global batch holds.
struct ReplicaCounts {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  int32_t dp = 0;
  data::BatchCounts counts;
  std::vector<int64_t> sample_ids;  // in microbatch, then row order (the sample audit)
};

// stage -> its optimizer shard: the stage's flat gradient and parameter buffers
// (pointers to their first element). Elements [shard_begin, shard_end) of `grads`
// hold the data-parallel sum this shard owns; the shard overwrites the same range of
// `params` with the updated values. The stage does not touch either buffer until
// ShardApplied arrives. `owner` keeps both buffers alive while the shard holds the
// message: a restart stops the stage and its shard in no particular order, and the
// shard may still be writing the update when the stage has gone.
struct GradShardReady {
  int64_t step = 0;
  const float* grads = nullptr;
  float* params = nullptr;
  int64_t shard_begin = 0;
  int64_t shard_end = 0;
  std::shared_ptr<const void> owner;
  UpdateRule update;  // the step's RunStep's, passed on
};

// optimizer shard -> coordinator: sum of squares of the gradient elements this shard
// counts in the global norm (each parameter counted once across replicas and stages).
struct NormPartial {
  int64_t step = 0;
  Rank rank;
  double sum_squares = 0;
  // The same split by layer (OptimizerShard::norm_part_layers: "h.3", "wte", ...), in
  // layout order; only for the spike record, never for the norm itself.
  std::vector<std::string> layers;
  std::vector<double> layer_sum_squares;
};

// coordinator -> optimizer shards: what to do with this step's gradients.
struct UpdateCommand {
  int64_t step = 0;
  double lr = 0;
  double clip_factor = 1;  // gradients are multiplied by this first
  bool skip = false;       // non-finite norm (or a spike dropped by logging.on_spike): touch nothing
  // The state mirror (engine/state_mirror.h): copy the state after this update for the
  // process's mirror keeper. The coordinator asks every shard for the same steps, one
  // mirrored step in flight at a time, so that each step it asks for can be complete.
  bool mirror = false;
};

// The sums behind a step's update-to-weight norm ratio, over the elements an optimizer
// shard counts in the global gradient norm (each parameter once across replicas and
// stages): sum of (w_after - w_before)^2 and of w_before^2, in double
// (OptimizerShard::update_readback). Both 0 when the update was dropped.
struct UpdateSums {
  double update_sum_squares = 0;
  double weight_sum_squares = 0;
};

// optimizer shard -> its stage: the parameter slice holds the updated values.
struct ShardApplied {
  int64_t step = 0;
  UpdateSums sums;        // of this shard's update (handed on in the stage's StageDone)
  UpdateCommand applied;  // the update it applied, as received or as it decided (UpdateRule)
};

// What one stage rank's device held at its highest during one training step, by
// category (kernels/memory_ledger.h; the stage resets the peak when the step starts),
// beside the planner's figure for the stage's saved activations
// (sched/activation_memory.h). Bytes; the five parts add up to the peak.
struct StageMemory {
  int64_t weights = 0, gradients = 0, optimizer_state = 0, activations = 0, scratch = 0;
  int64_t planned_activations = 0;
  int64_t peak() const { return weights + gradients + optimizer_state + activations + scratch; }
};

// What one stage did in one step (and what its device held: memory). Busy intervals are in seconds on the process's
// steady clock (comparable across the stages of one process).
struct StageTiming {
  std::vector<std::pair<double, double>> busy;  // [start, end) of each op, in op order
  std::vector<uint8_t> op_kinds;                // per op: sched::OpKind (0 forward, 1 backward, 2 weight pass)
  std::vector<double> waits;                    // per op: seconds idle before it (waiting for its inputs)
  double compute_s = 0;
  double wait_s = 0;
  double sync_s = 0;  // gradient reduce-scatter + parameter all-gather
  // Unix seconds when this stage's part of the step ended: its update applied and its
  // parameters gathered (Train), its last op run (Eval). The coordinator dates a step by
  // these, not by when it closes the step, which a held StageDone delays.
  double end_time = 0;
  StageMemory memory;  // Train steps (zero for Eval)
};

// stage -> coordinator: the stage finished step `step` (weights updated for Train).
struct StageDone {
  int64_t step = 0;
  StepKind kind = StepKind::Train;
  Rank rank;
  StageTiming timing;
  // Train: what the rank's optimizer shard reported of its update (ShardApplied): its
  // sums, and the update it applied (the coordinator checks it against its decision).
  UpdateSums update;
  UpdateCommand applied;
};

// stage -> coordinator: alive, and where it is (at most one per
// supervision.heartbeat_interval_s).
struct Heartbeat {
  std::string path;
  int64_t step = 0;
};

}  // namespace troupe::msg


namespace troupe::msg {

// coordinator -> optimizer shards, at a step boundary: copy your state for the
// checkpoint of `step` (written into `partial_dir`) and hand it to your writer.
struct SnapshotCommand {
  int64_t step = 0;
  std::string partial_dir;
  // engine::directory_identity(partial_dir) when the save began (inode, generation)
  uint64_t partial_dir_inode = 0;
  uint64_t partial_dir_generation = 0;
  uint64_t attempt = 0;  // this save's id, unique per save: reports of others are ignored
};

// optimizer shard -> its writer: a copy of the shard's state at the step boundary
// (the values of [range_begin, range_end) of its stage's flat buffers).
struct ShardSnapshot {
  int64_t step = 0;
  std::string partial_dir;
  uint64_t partial_dir_inode = 0;  // as in SnapshotCommand: another directory means the save was given up
  uint64_t partial_dir_generation = 0;
  uint64_t attempt = 0;
  Rank rank;
  int64_t range_begin = 0, range_end = 0;
  // range_end - range_begin values each, in host memory from the device's
  // allocate_host (page-locked on a GPU), sent once the copies into it have landed.
  std::shared_ptr<const float> params, exp_avg, exp_avg_sq;
};

// optimizer shard -> coordinator: the copy is taken; training may go on.
struct SnapshotTaken {
  int64_t step = 0;
  Rank rank;
};

// writer -> coordinator: the shard file of one rank is written and renamed into
// place (`ok`), or writing it failed (`error`).
struct ShardWritten {
  int64_t step = 0;
  Rank rank;
  bool ok = false;
  std::string error;
  std::string record;  // a serialized ckpt::ShardFile (the manifest's entry)
  double seconds = 0;
  int64_t bytes = 0;
  uint64_t attempt = 0;  // the SnapshotCommand's: a late report of a given-up save is ignored
};

// The state mirror (engine/state_mirror.h, supervision.state_mirror).
// optimizer shard -> its process's mirror keeper, after every update: the shard's state
// after step `step`, in host memory (as ShardSnapshot's copies). In-process only.
struct MirrorSnapshot {
  int64_t step = 0;
  int64_t timeline = 0;  // the mirror's timeline (MirrorStore::timeline): a rollback starts another
  Rank rank;
  int64_t range_begin = 0, range_end = 0;
  std::shared_ptr<const float> params, exp_avg, exp_avg_sq;
};

// mirror keeper -> coordinator: the shard of `rank` at `step` is held in memory.
struct MirrorKept {
  int64_t step = 0;
  int64_t timeline = 0;
  Rank rank;
  std::string record;  // a serialized ckpt::ShardFile (the mirror manifest's entry)
  // Cluster mode: the workers whose memory holds the bytes (the keeper's own, and its
  // buddy's once it acknowledged its copy); empty in one process.
  std::vector<int32_t> holders;
};

}  // namespace troupe::msg
