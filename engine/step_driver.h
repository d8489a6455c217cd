// The coordinator's decisions as a pure state machine: what follows a step's update, a
// step's close, a checkpoint's copies, commit or failure, a writer's exit, a stop
// signal and the save deadline. No actors, no clock reads, no files: events come in
// with the time as a value (`now`, steady-clock seconds), actions go out in the order
// the actor must carry them out (actors/coordinator_actor.cpp turns messages into
// events and actions into messages). docs/runtime.md ("The coordinator's decisions:
// the step driver") has the states and transitions as tables.
//
// Data stays with the actor: the step ledger (the reports of the step in flight), the
// update decision and learning rate, the save's commit object, position and shard
// records. The driver holds only what decides what happens next.
//
// Re-entrancy: carrying out an action may feed the driver another event at once (the
// save's directory opened or not, a commit that fails, a step closed by the reports
// that waited for it). Actions that can do so come last in their list, so the nested
// event's actions run where the old recursive code ran them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "messages/config.pb.h"
#include "messages/runtime.h"

namespace troupe::engine {

// What the driver needs from the config (step_driver_config builds it).
struct StepDriverConfig {
  int64_t total_steps = 0;
  int32_t microbatches = 0;       // per replica, a training step
  int32_t eval_microbatches = 0;  // per replica, an evaluation pass; 0: no validation
  int64_t eval_interval = 0;      // 0: evaluate at the end only
  int64_t global_batch_size = 0;
  // checkpoint.*
  int64_t interval_steps = 0;
  double interval_seconds = 0;
  int32_t max_lag_steps = 1;  // how many steps a save may trail training
  // The run's one optimizer shard decides its own updates (shard_decides_updates): each
  // training RunStep's UpdateRule says so, except that of a step run ahead after a step
  // to be saved, whose update the coordinator decides after the save's copies (a shard
  // deciding would apply it unordered with them); and a time-based save due after the
  // next step went out waits one step, as with max_lag_steps 0.
  bool shard_decides = false;
  bool save_on_exit = false;
  double save_timeout_s = 0;  // 0: no deadline
  // Interval saves that may fail in a row before the run stops as failed (0: no limit).
  int32_t max_failed_saves = 0;
  // Who takes part in a save: every optimizer shard copies its state, and the writers of
  // the ranks that write a shard each write one (paths, as in engine/topology.h).
  std::vector<std::string> optimizers, writers;
  // The optimizer shard whose copy each writer writes (writer path -> optim path): a
  // writer still writing at the save deadline is hung only once its copy was handed over.
  std::map<std::string, std::string> optimizer_of_writer;
};
StepDriverConfig step_driver_config(const Config& c);

// Whether the optimizer shard decides each update itself (docs/runtime.md, "Who decides
// the update"): one rank (a single norm partial is the whole norm) and logging.on_spike
// RECORD (no spike guard can drop an update).
bool shard_decides_updates(const Config& c);

// Where the driver starts.
struct StepDriverStart {
  int64_t step = 0;  // the last finished training step (the checkpoint's, 0 fresh)
  int64_t consumed_samples = 0;
  bool resumed = false;     // from a checkpoint: its step counts as saved and evaluated
  bool recovering = false;  // a restarted group: its first step's close ends the recovery
  double now = 0;           // steady seconds: the interval_seconds clock starts here
};

// ---- events -------------------------------------------------------------------

struct GroupWired {};  // every member answered: the run starts
// Train step `step`'s norm partials are in and its update decided. `decided_at`
// (Unix seconds) is read before the UpdateCommands go out: it dates a step handed
// over ahead, which no stage can have ended before.
struct UpdateDecided {
  int64_t step = 0;
  double decided_at = 0;
  // The step is a spike that rolls the run back (logging.on_spike ROLLBACK): nothing is
  // handed over ahead, and once the step closes (and a save in flight has ended) the
  // run ends with FinishRun "rollback", no checkpoint or evaluation of the step taken.
  bool rolls_back = false;
};
struct TrainStepClosed {  // every report of the step is in
  int64_t step = 0;
  int64_t consumed_samples = 0;  // after the step
};
struct EvalClosed {};
// The stop signal's value (SIGINT, SIGTERM, SIGHUP; 0 none). A stop is acted on at the next
// decision, as the signal handler can only set a flag.
struct StopRequested {
  int signal = 0;
};
// A larger placement is ready (cluster mode: a worker joined while the run is placed on
// fewer physical replicas than configured; docs/cluster.md, "Growing back"). At the next
// step boundary the step is saved and the group ends with FinishRun "regroup"; the next
// group resumes from that checkpoint on the larger placement, so no step is computed
// twice. A save of that step that fails drops the request (the run goes on where it is).
struct RegroupRequested {};
// Outcomes of BeginSave and CommitSave, fed back by the actor.
struct SaveOpened {
  uint64_t attempt = 0;  // the save's id in its SnapshotCommands
};
struct SaveNotOpened {
  std::string error;
};
struct SaveCommitted {};
struct CommitFailed {
  std::string error;
};
struct WriterDown {  // a writer's exit
  std::string path;
};
struct Tick {};  // the coordinator's periodic timer
// The run's records cannot be written (the metrics actor gave up waiting for space): the
// run stops as failed at the next step boundary, as after max_failed_saves failed saves.
struct StorageFailed {
  std::string error;
};

using StepEvent = std::variant<GroupWired, UpdateDecided, TrainStepClosed, EvalClosed, StopRequested, RegroupRequested,
                               msg::SnapshotTaken, msg::ShardWritten, SaveOpened, SaveNotOpened, SaveCommitted,
                               CommitFailed, WriterDown, Tick, StorageFailed>;

// ---- actions --------------------------------------------------------------------

// Open step `step`'s ledger and send `run_step` to every stage (none: it went out
// ahead with the previous update). May replay the step's early reports, so it comes last.
struct OpenTrainStep {
  int64_t step = 0;
  std::optional<msg::RunStep> run_step;
};
// Open an evaluation pass's ledger; `run_step` goes to every loader and stage.
struct OpenEval {
  msg::RunStep run_step;
};
// Send step `step`'s UpdateCommand (the decided clip factor, skip and LR) to every shard.
struct SendUpdate {
  int64_t step = 0;
};
// Hand the next step to the stages now, with the update (running ahead), dated `issued_at`.
struct SendRunStepAhead {
  msg::RunStep run_step;
  double issued_at = 0;
};
// Open step `step`'s checkpoint and send the SnapshotCommands; answer SaveOpened or
// SaveNotOpened.
struct BeginSave {
  int64_t step = 0;
  bool final = false;
};
struct RetryFinalSave {  // a log line: the final save is begun again
  int64_t step = 0;
  int attempt = 0, attempts = 0;
};
// Writers that did not finish their shard of the save in flight by its deadline are
// hung: their supervisor abandons and replaces them, so later saves go to successors.
// Comes just before the save's SaveFailed. Each replacement arrives as a WriterDown.
struct ReplaceWriters {
  std::vector<std::string> paths;
  std::string reason;
};
struct SaveWaitsForWriters {  // a log line: the save begins once the hung writers are replaced
  int64_t step = 0;
  size_t writers = 0;
};
struct SaveDeferred {  // a time-based save moves to the next step boundary (checkpoint_deferred)
  int64_t step = 0;
  // Why step + 1, already out, may not run before the save's copies: "max_lag_steps is
  // 0" or "the optimizer shard decides its own update".
  std::string reason;
};
struct KeepShard {  // a shard written for the save in flight: its manifest entry
  std::string record;
  int64_t bytes = 0;
};
struct CommitSave {};  // write the manifest; answer SaveCommitted or CommitFailed
// The save of `step` failed (`begun`) or could not be opened: logged, checkpoint_failed.
struct SaveFailed {
  int64_t step = 0;
  bool final = false;
  bool begun = true;
  std::string error;
};
struct FinishRun {
  std::string status, error;
};
// The save a regroup began at `step` failed: the request is dropped, the run goes on
// on its placement.
struct RegroupDropped {
  int64_t step = 0;
};
// The run cannot go on writing what it must keep (max_failed_saves interval saves failed
// in a row, or StorageFailed): it ends as failed, `error` saying why; the actor adds the
// newest complete checkpoint and the space a checkpoint needs.
struct FinishRunFailed {
  std::string error;
};
// The final save failed `attempts` times: the run ends as failed, naming the newest
// complete checkpoint (the actor reads it) and, after a stop, why it had stopped.
struct FinishRunFinalSaveFailed {
  int64_t step = 0;
  int attempts = 0;
  std::string error, stop_reason;
};

using StepAction = std::variant<OpenTrainStep, OpenEval, SendUpdate, SendRunStepAhead, BeginSave, RetryFinalSave,
                                ReplaceWriters, SaveWaitsForWriters, SaveDeferred, KeepShard, CommitSave, SaveFailed, FinishRun,
                                RegroupDropped, FinishRunFailed, FinishRunFinalSaveFailed>;

// One line naming an action and its values ("SendUpdate 3"), for tests and debugging.
std::string describe(const StepAction& a);

// ---- the driver -------------------------------------------------------------------

enum class Phase {
  Wiring,             // nothing started yet
  BetweenSteps,       // a step closed: advance() decides at once what follows (never lasts past an event)
  Training,           // a training step is open, its update not decided or nothing went out ahead
  RunningAhead,       // step n is open, its update decided, and n+1 went out with it
  Evaluating,         // an evaluation pass is open
  TakingCopies,       // between steps: training goes on once the save's copies are taken
  WaitingForSave,     // between steps: what comes next waits for the save in flight to end
  WaitingForWriters,  // a save waits for hung writers to be replaced
  Stopping,           // the run ends (or begins its final save) once the save in flight ends
  FinalSave,          // the final save is in flight: the run ends when it is committed
  Finished,
};
const char* phase_name(Phase p);

// A final checkpoint that fails is begun again once before the run ends as failed.
constexpr int kFinalSaveAttempts = 2;

class StepDriver {
 public:
  StepDriver(StepDriverConfig config, const StepDriverStart& start);

  // What to do after `e`, in order. `now`: steady-clock seconds.
  std::vector<StepAction> on(const StepEvent& e, double now);

  Phase phase() const { return phase_; }
  int stop_signal() const { return stop_signal_; }
  // Whether a training report for `step` belongs to the step handed over ahead, whose
  // ledger is not open yet (the actor keeps it until OpenTrainStep).
  bool report_is_early(int64_t step) const;
  // The newest training step whose RunStep went out.
  int64_t issued_step() const { return issued_step_; }
  int64_t last_saved_step() const { return last_saved_step_; }
  bool save_in_flight() const { return save_.has_value(); }

 private:
  // The checkpoint in flight.
  struct Save {
    int64_t step = 0;
    bool final = false;
    uint64_t attempt = 0;  // 0 until SaveOpened
    double started = 0;
    std::set<std::string> snapshots_missing;  // optimizer shards that have not copied yet
    std::set<std::string> shards_missing;     // writers that have not written yet
  };
  using Actions = std::vector<StepAction>;

  void on_event(const GroupWired&, Actions& out);
  void on_event(const UpdateDecided& e, Actions& out);
  void on_event(const TrainStepClosed& e, Actions& out);
  void on_event(const EvalClosed&, Actions& out);
  void on_event(const StopRequested& e, Actions& out);
  void on_event(const RegroupRequested&, Actions& out);
  void on_event(const msg::SnapshotTaken& t, Actions& out);
  void on_event(const msg::ShardWritten& w, Actions& out);
  void on_event(const SaveOpened& e, Actions& out);
  void on_event(const SaveNotOpened& e, Actions& out);
  void on_event(const SaveCommitted&, Actions& out);
  void on_event(const CommitFailed& e, Actions& out);
  void on_event(const WriterDown& e, Actions& out);
  void on_event(const Tick&, Actions& out);
  void on_event(const StorageFailed& e, Actions& out);

  // What follows a step boundary (a close, the start, the end of a save waited for).
  void advance(Actions& out);
  void run_ahead(int64_t step, double decided_at, Actions& out);
  void open_train_step(Actions& out);
  void open_eval(Actions& out);
  void begin_save(bool final, Actions& out);
  void final_save(Actions& out);
  void finish_or_wait_for_save(Actions& out);
  void fail_save(const std::string& why, Actions& out);
  void count_failed_save(const std::string& why);
  void final_save_failed(int64_t step, const std::string& why, Actions& out);
  void finish(Actions& out);

  bool save_due(int64_t step) const;
  bool eval_due(int64_t step) const;
  bool held_by_save(int64_t step) const;
  bool step_open() const;

  StepDriverConfig cfg_;
  Phase phase_ = Phase::Wiring;
  double now_ = 0;  // the time of the event being handled
  int stop_signal_ = 0;
  bool recovering_ = false;

  // The position after the last finished training step.
  int64_t step_ = 0, consumed_samples_ = 0;
  int64_t open_step_ = 0;  // the training step open in Training / RunningAhead
  // The newest training step whose RunStep went out (RunningAhead: open_step_ + 1).
  int64_t issued_step_ = 0;
  // Whether that step's update is its shard's to decide (its RunStep's UpdateRule).
  bool issued_shard_decides_ = false;
  int64_t evals_run_ = 0;
  int64_t rollback_step_ = -1;  // the step whose close ends the run as "rollback" (-1: none)
  bool regroup_ = false;         // RegroupRequested, not yet acted on or dropped
  int64_t regroup_save_step_ = -1;  // the step whose save the regroup began (-1: none)
  int64_t last_eval_step_ = -1;

  // Checkpoints.
  std::optional<Save> save_;
  int64_t last_saved_step_ = 0;
  int64_t save_checked_step_ = -1;  // the step whose save decision was taken
  double last_save_time_ = 0;
  std::string finish_status_, finish_error_;  // set when the run ends after a save
  int final_attempts_ = 0;                    // final saves begun
  int32_t failed_saves_in_a_row_ = 0;         // interval saves failed since the last commit
  // Hung writers being replaced (ReplaceWriters until their WriterDown): no save begins
  // meanwhile, as its copy could still be handed to the abandoned writer; then the one
  // deferred (WaitingForWriters) does.
  std::set<std::string> writers_replaced_;
  bool deferred_save_final_ = false;  // WaitingForWriters: the save to begin is final
  // Why the run must stop as failed at the next step boundary ("" while it may go on):
  // max_failed_saves reached, or the run's records cannot be written.
  std::string fatal_error_;
};

}  // namespace troupe::engine
