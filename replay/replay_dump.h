// `supervisor replay --dump`: the documents of one step's global batch with their
// losses (docs/metrics.md, "Replay"). The weights before the step are read from a
// checkpoint of the step before it (or are the initial weights for step 1); the
// whole model runs forward on one CPU device over the step's microbatches, and each
// loss-bearing prediction is charged to the document its input token comes from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/config.pb.h"

namespace troupe::replay {

struct DumpedDocument {
  int64_t dataset = 0;   // index of the dataset in data.blend (0 without a blend)
  int64_t document = 0;  // sequence index in the dataset's .idx
  std::vector<int64_t> samples;  // the step's samples that read it
  std::vector<int32_t> tokens;   // its tokens in this step, in sample then window order
  double loss_sum = 0;           // summed per-token losses of its predictions
  int64_t loss_tokens = 0;
  double loss_mean() const { return loss_tokens > 0 ? loss_sum / double(loss_tokens) : 0.0; }
};

struct StepDump {
  int64_t step = 0;
  double loss_sum = 0;       // over the whole global batch
  int64_t loss_tokens = 0;
  std::vector<DumpedDocument> documents;  // by mean loss, highest first
  std::string dir;                        // where it was written
};

// Computes step `step`'s dump with the run's config `c` (data, model, batch) and the
// weights in `checkpoint` (the state after step - 1; "" with step 1: the initial
// weights), and writes it to `dir`: documents.jsonl (one line per document: dataset,
// document, samples, loss_sum, loss_tokens, loss_mean, tokens, text when the tokenizer
// is BYTES) and summary.json. Throws naming what failed.
StepDump dump_step(const Config& c, int64_t step, const std::string& checkpoint, const std::string& dir);

// The top documents by mean loss, one line each, for the terminal.
std::string format_dump(const StepDump& d, size_t top = 5);

}  // namespace troupe::replay
