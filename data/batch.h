// What the data side hands the model: one microbatch of packed samples, and the
// counts of a whole global batch. Row-major [B, T] with B = micro_batch_size and
// T = seq_length; every per-token vector holds B * T entries.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::data {

struct Microbatch {
  int32_t batch = 0;  // B: samples in this microbatch
  int32_t seq = 0;    // T: input positions per sample

  std::vector<int32_t> tokens;     // [B*T] input token IDs (window[0:T])
  std::vector<int32_t> targets;    // [B*T] next-token IDs (window[1:T+1])
  std::vector<int32_t> positions;  // [B*T] position IDs; 0 at each document start and at each sample start
  // [B*T] document segment within its row: a token attends only to earlier tokens
  // of the same segment. Padding forms a segment of its own.
  std::vector<int32_t> segments;
  // [B*T] 1 where the prediction counts in the loss, 0 otherwise: the prediction of a
  // next document's first token (from an EOD) and every padding position are 0; the
  // prediction of EOD itself is 1.
  std::vector<float> loss_mask;

  std::vector<int64_t> sample_ids;  // [B] global sample IDs, in row order
  // A training microbatch's place in the run's sample order: row r is slot
  // first_slot + r, i.e. the (first_slot + r)-th sample the run consumes (counting
  // from its start, whatever the layout). Dropout masks are keyed by it
  // (kernels/dropout.h). -1: not a training microbatch (evaluation, rows chosen by
  // ID): no dropout.
  int64_t first_slot = -1;

  int64_t loss_tokens = 0;     // sum of loss_mask
  int64_t padding_tokens = 0;  // padding positions among the B*T inputs

  // Loss-bearing tokens of the whole global batch this microbatch belongs to. The
  // loss of a step is sum(per-token loss) / global_loss_tokens, so every backward
  // scales by 1 / global_loss_tokens, never by a per-microbatch count.
  int64_t global_loss_tokens = 0;
};

// Counts over one global batch.
struct BatchCounts {
  int64_t samples = 0;
  int64_t input_tokens = 0;    // samples * seq_length
  int64_t loss_tokens = 0;     // loss-bearing predictions
  int64_t padding_tokens = 0;  // padding positions among the inputs
};

}  // namespace troupe::data
