// Spike detection (issues 10 and 26). A step is a spike when its loss or its pre-clip
// gradient norm exceeds the median of that series' previous `window` finite values by
// more than `mad_k` median absolute deviations and by more than the series' floor on
// the relative jump (metrics/robust_window.h); a non-finite loss or gradient norm is
// a spike too. For each spike the detector produces a record with the material to
// inspect: the step's sample IDs, per-microbatch losses and loss-bearing tokens, its
// documents with their losses (every one, and the ten worst by mean loss), the gradient
// norm (global, per pipeline stage and per layer), the update-to-weight norm ratio, the
// LR, both series' medians and MADs, and a content hash of the sample IDs, so that the
// same samples spiking again (a recomputed step after a restart, or a repeated epoch)
// are recognised as a repeat.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "metrics/json.h"
#include "metrics/robust_window.h"

namespace troupe::metrics {

// The defaults are those of LoggingConfig (messages/config.proto); docs/metrics.md
// says how they were chosen.
struct SpikeOptions {
  int window = 50;                  // values of each series in the running median
  int min_history = 10;             // judge no step before this many values are in the window
  double mad_k = 5.0;               // above the median by more than k MADs ...
  double loss_min_jump = 0.3;       // ... and loss > median x (1 + this)
  double grad_norm_min_jump = 3.0;  // ... or grad norm > median x (1 + this)
};

// One microbatch of the step, as the last pipeline stage reported it.
struct MicrobatchLoss {
  int32_t replica = 0;              // data-parallel rank
  int32_t index = 0;                // microbatch index within the replica's step
  std::vector<int64_t> sample_ids;  // global sample IDs, in row order
  double loss = 0;                  // sum of per-token losses / loss_tokens of this microbatch
  int64_t loss_tokens = 0;
};

// One document of the step: the dataset sequence its packed segments read
// (engine/document_losses.h), with the losses of the step's predictions out of its tokens.
struct DocumentLoss {
  int64_t dataset = 0;           // index of the dataset in data.blend (0 without a blend)
  int64_t document = 0;          // sequence index in the dataset's .idx
  std::vector<int64_t> samples;  // the step's samples that read it, in batch order
  double loss_sum = 0;           // summed per-token losses of its loss-bearing predictions
  int64_t loss_tokens = 0;
  double loss_mean() const { return loss_tokens > 0 ? loss_sum / double(loss_tokens) : 0.0; }
};

// How many documents of highest mean loss a spike record names (top_documents).
constexpr size_t kTopDocuments = 10;

// The `n` documents of highest mean loss, highest first (ties: in the given order).
std::vector<DocumentLoss> worst_documents(std::vector<DocumentLoss> documents, size_t n);

// What the coordinator knows of a step when it finishes.
struct StepDetail {
  int64_t step = 0;
  double loss = 0;  // the step's token-weighted loss
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  bool clipped = false;
  // Each pipeline stage's share of the norm before clipping, in stage order: the
  // square root of the sum of its optimizer shards' partials (their squares add up to
  // grad_norm's square). Empty when not known.
  std::vector<double> stage_grad_norms;
  // Each layer's share of the norm before clipping ("h.0", "wte", ...; the square root
  // of its sum of squares over every shard), in layout order. Empty when not known.
  std::vector<std::pair<std::string, double>> layer_grad_norms;
  std::vector<MicrobatchLoss> microbatches;
  // Every document of the step, in (dataset, document) order; their loss tokens add up
  // to the step's. Empty when not known.
  std::vector<DocumentLoss> documents;
  // ||delta W|| and ||W|| (the weights before the update) over every parameter once,
  // from the optimizer shards' partial sums; unset when the update was dropped (a
  // skipped step: non-finite norm or logging.on_spike SKIP_UPDATE) or not known.
  std::optional<double> update_norm, weight_norm;
};

struct SpikeRecord {
  int64_t step = 0;
  double loss = 0;
  double median = 0;    // the loss window's median it was judged against
  double ratio = 0;     // loss / median (non-finite when the loss is)
  double loss_mad = 0;  // the loss window's median absolute deviation
  int window_used = 0;  // losses the median was taken over
  bool non_finite = false;  // the loss or the gradient norm was not finite
  // What made it a spike, in this order: "loss", "grad_norm" (each: not finite, or
  // above its window by the rule).
  std::vector<std::string> triggers;
  double grad_norm = 0;
  double grad_norm_median = 0;  // the gradient-norm window's median and MAD
  double grad_norm_mad = 0;
  double grad_norm_ratio = 0;  // grad_norm / grad_norm_median
  double lr = 0;
  bool clipped = false;
  std::vector<double> stage_grad_norms;
  std::vector<std::pair<std::string, double>> layer_grad_norms;
  std::vector<int64_t> sample_ids;  // every sample of the step, sorted ascending
  uint64_t content_hash = 0;        // sample_content_hash(sample_ids)
  // The first earlier spike with the same content hash, if any.
  std::optional<int64_t> repeat_of_step;
  std::vector<MicrobatchLoss> microbatches;
  std::vector<DocumentLoss> documents;      // StepDetail::documents
  std::vector<DocumentLoss> top_documents;  // the kTopDocuments of highest mean loss, highest first
  // update_norm / weight_norm; all three unset when the update was dropped.
  std::optional<double> update_norm, weight_norm, update_weight_ratio;
};

// FNV-1a (64-bit) over the sorted IDs as little-endian 8-byte integers: the same set
// of samples gives the same hash whatever the order the replicas reported them in.
uint64_t sample_content_hash(std::vector<int64_t> sample_ids);

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeOptions options = {});

  // Judges `d` against the values seen before it, then adds its loss and gradient norm
  // to their windows (a non-finite value is not added: a spike's finite values are).
  // Returns the spike record when it is one.
  std::optional<SpikeRecord> observe(const StepDetail& d);

  // Adds an earlier step's values to the windows without judging them (a resumed run
  // picks up the windows where its checkpoint left them: warm_spike_windows).
  void warm(double loss, double grad_norm);

  // Empties the windows (the spikes remembered stay): a restarted timeline warms them
  // again from its own steps.
  void clear_windows() {
    losses_ = RobustWindow(options_.window);
    norms_ = RobustWindow(options_.window);
  }

  // Teaches the detector an earlier spike (a record read back from spikes.jsonl of a
  // resumed run), so that a repeat across restarts is recognised.
  void remember(int64_t step, uint64_t content_hash);

  // The current running median of the losses (0 before any loss), of the gradient norms.
  double median() const { return losses_.median(); }
  double grad_norm_median() const { return norms_.median(); }
  size_t history() const { return losses_.size(); }
  const SpikeOptions& options() const { return options_; }

 private:
  SpikeOptions options_;
  RobustWindow losses_, norms_;
  std::unordered_map<uint64_t, int64_t> seen_;  // content hash -> first spike step
};

// The JSON of a spike (a line of RUN_DIR/spikes.jsonl, "type": "spike"). The hash is
// a 16-digit hex string (JSON numbers lose 64-bit precision in most readers).
Json to_json(const SpikeRecord& r);

// The console line of a spike: "spike at step 41 (loss, grad_norm): loss 5.6200 is
// 1.85x the running median 3.0400 (12.3 MADs above), grad norm 4.21 is 5.07x its
// median 0.83; worst document 545 (dataset 0): mean loss 8.6602 over 128 tokens;
// recorded in PATH" (only the series that fired, with " (same samples as step N)" for a
// repeat; the worst document when the documents are known).
std::string spike_line(const SpikeRecord& r, const std::string& spikes_path);

// Fills the windows of a resumed run's detector from the steps before its checkpoint:
// the last line of each step number up to `through_step` in `metrics_lines` (the
// objects of metrics.jsonl, read before this process wrote to it), the newest
// `window` of them, oldest first. Without it a resumed run would judge nothing for
// its first min_history steps. Returns the steps taken.
int64_t warm_spike_windows(const std::vector<Json>& metrics_lines, int64_t through_step, SpikeDetector& detector);

// Loads spikes.jsonl into `detector` (remember() for each line). A missing file is
// no history; a malformed line throws MetricsError naming the file and line.
void load_spike_history(const std::string& path, SpikeDetector& detector);

}  // namespace troupe::metrics
