#include "apps/supervisor/update_json.h"

#include "metrics/json_records.h"

namespace troupe::cli {

metrics::Json update_numbers(const engine::StepReport& r, const data::BatchCounts& counts) {
  using metrics::json_number;
  return {{"loss", json_number(r.loss)},
          {"loss_sum", json_number(r.loss_sum)},
          {"loss_tokens", r.loss_tokens},
          {"samples", r.samples},
          {"input_tokens", counts.input_tokens},
          {"padding_tokens", counts.padding_tokens},
          {"grad_norm", json_number(r.grad_norm)},
          {"clipped", r.clipped},
          {"clip_factor", json_number(r.clip_factor)},
          {"skipped", r.skipped},
          {"lr", json_number(r.lr)}};
}

}  // namespace troupe::cli
