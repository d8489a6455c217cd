// The numbers of `supervisor inspect-update`'s one update, as update.json records them.
#pragma once

#include "data/batch.h"
#include "metrics/json.h"
#include "engine/reference_trainer.h"

namespace troupe::cli {

// loss, loss_sum, loss_tokens, samples, input_tokens, padding_tokens, grad_norm,
// clipped, clip_factor, skipped, lr, in that order. Non-finite values are written
// as metrics.jsonl writes them: "nan", "inf", "-inf" (metrics::json_number).
metrics::Json update_numbers(const engine::StepReport& r, const data::BatchCounts& counts);

}  // namespace troupe::cli
