// supervisor inspect-update's update.json writes numbers as metrics.jsonl does.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "apps/supervisor/update_json.h"
#include "metrics/json_records.h"

using namespace troupe;

TEST_CASE("update.json writes non-finite numbers as metrics.jsonl does: \"nan\", \"inf\", never null") {
  engine::StepReport r;
  r.loss = NAN;
  r.loss_sum = NAN;
  r.loss_tokens = 12;
  r.samples = 2;
  r.grad_norm = INFINITY;
  r.clip_factor = -INFINITY;
  r.skipped = true;
  r.lr = 0.5;
  data::BatchCounts counts;
  counts.input_tokens = 16;
  counts.padding_tokens = 4;
  const metrics::Json j = cli::update_numbers(r, counts);
  CHECK(j.dump() ==
        "{\"loss\":\"nan\",\"loss_sum\":\"nan\",\"loss_tokens\":12,\"samples\":2,\"input_tokens\":16,"
        "\"padding_tokens\":4,\"grad_norm\":\"inf\",\"clipped\":false,\"clip_factor\":\"-inf\",\"skipped\":true,"
        "\"lr\":0.5}");
  metrics::StepRecord s;
  s.loss = NAN;
  s.grad_norm = INFINITY;
  const metrics::Json m = metrics::to_json(s);
  CHECK(j["loss"] == m["loss"]);
  CHECK(j["grad_norm"] == m["grad_norm"]);
  CHECK(std::isnan(metrics::number_from_json(j["loss"], "loss")));
}
