// Loss-spike detection (issue 10). A step whose loss exceeds `multiple` x the median
// of the previous `window` finite losses is a spike; so is a non-finite loss. For
// each spike the detector produces a record with the material to inspect: the
// step's sample IDs, per-microbatch losses and loss-bearing tokens, grad norm, LR,
// and a content hash of the sample IDs, so that the same samples spiking again (a
// recomputed step after a restart, or a repeated epoch) are recognised as a repeat.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "metrics/json.h"

namespace troupe::metrics {

struct SpikeOptions {
  int window = 50;        // losses in the running median
  double multiple = 3.0;  // loss > multiple * median is a spike
  int min_history = 10;   // judge no step before this many losses are in the window
};

// One microbatch of the step, as the last pipeline stage reported it.
struct MicrobatchLoss {
  int32_t replica = 0;              // data-parallel rank
  int32_t index = 0;                // microbatch index within the replica's step
  std::vector<int64_t> sample_ids;  // global sample IDs, in row order
  double loss = 0;                  // sum of per-token losses / loss_tokens of this microbatch
  int64_t loss_tokens = 0;
};

// What the coordinator knows of a step when it finishes.
struct StepDetail {
  int64_t step = 0;
  double loss = 0;  // the step's token-weighted loss
  double grad_norm = 0;
  double lr = 0;
  std::vector<MicrobatchLoss> microbatches;
};

struct SpikeRecord {
  int64_t step = 0;
  double loss = 0;
  double median = 0;    // running median it was judged against
  double ratio = 0;     // loss / median (non-finite when the loss is)
  int window_used = 0;  // losses the median was taken over
  bool non_finite = false;
  double grad_norm = 0;
  double lr = 0;
  std::vector<int64_t> sample_ids;  // every sample of the step, sorted ascending
  uint64_t content_hash = 0;        // sample_content_hash(sample_ids)
  // The first earlier spike with the same content hash, if any.
  std::optional<int64_t> repeat_of_step;
  std::vector<MicrobatchLoss> microbatches;
};

// FNV-1a (64-bit) over the sorted IDs as little-endian 8-byte integers: the same set
// of samples gives the same hash whatever the order the replicas reported them in.
uint64_t sample_content_hash(std::vector<int64_t> sample_ids);

// Median of `values` (mean of the two middle ones for an even count); 0 when empty.
double median_of(std::vector<double> values);

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeOptions options = {});

  // Judges `d` against the losses seen before it, then adds its loss to the window
  // (a non-finite loss is not added). Returns the spike record when it is one.
  std::optional<SpikeRecord> observe(const StepDetail& d);

  // Teaches the detector an earlier spike (a record read back from spikes.jsonl of a
  // resumed run), so that a repeat across restarts is recognised.
  void remember(int64_t step, uint64_t content_hash);

  // The current running median (0 before any loss).
  double median() const;
  size_t history() const { return window_.size(); }
  const SpikeOptions& options() const { return options_; }

 private:
  SpikeOptions options_;
  std::deque<double> window_;
  std::unordered_map<uint64_t, int64_t> seen_;  // content hash -> first spike step
};

// The JSON of a spike (a line of RUN_DIR/spikes.jsonl, "type": "spike"). The hash is
// a 16-digit hex string (JSON numbers lose 64-bit precision in most readers).
Json to_json(const SpikeRecord& r);

// Loads spikes.jsonl into `detector` (remember() for each line). A missing file is
// no history; a malformed line throws MetricsError naming the file and line.
void load_spike_history(const std::string& path, SpikeDetector& detector);

}  // namespace troupe::metrics
