// The tensor-parallel traffic the planner prints, pinned for the seed's 500B plan
// (TP8 with sequence parallelism: b = 1, s = 8,192, h = 21,504, bf16) and by hand for
// a small config without sequence parallelism.
#include <doctest/doctest.h>

#include "config/text_format.h"
#include "sched/planner.h"
#include "sched/planner_report.h"

using namespace troupe;
using namespace troupe::sched;

namespace {

Config seed500b() { return config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/seed-500b.textproto"); }

}  // namespace

TEST_CASE("TP8 with sequence parallelism on the 500B plan: bytes per layer, stage and update") {
  const TpCommPlan p = tp_comm_plan(seed500b());
  CHECK(p.tensor == 8);
  CHECK(p.sequence_parallel);
  CHECK(p.activation_bytes == 352321536);  // 1 x 8,192 x 21,504 x 2
  CHECK(p.all_reduces == 0);
  CHECK(p.all_gathers == 4);
  CHECK(p.reduce_scatters == 4);
  CHECK(p.layer_bytes == 2466250752);       // 8 x 7/8 x A = 7 A
  CHECK(p.layers_per_stage == 11);
  CHECK(p.stage_bytes == 27128758272);      // 11 x 7 A
  CHECK(p.embedding_bytes == 616562688);    // 2 x 7/8 x A
  CHECK(p.head_bytes == 616562688 + 7 * 12 * 8192);
  CHECK(p.microbatches == 24);
  CHECK(p.update_bytes == 651090198528);    // 24 x 11 x 7 A
  const std::string text = render_plan(seed500b(), PlanInputs{});
  CHECK(text.find("Tensor-parallel traffic per microbatch, TP 8, sequence parallel on") != std::string::npos);
  CHECK(text.find("4 all-gathers + 4 reduce-scatters of A") != std::string::npos);
  CHECK(text.find("2,466,250,752 bytes = 8 x 7/8 x A (2.47 GB)") != std::string::npos);
  CHECK(text.find("651,090,198,528 bytes (651.09 GB)") != std::string::npos);
}

TEST_CASE("without sequence parallelism the same bytes move as all-reduces; TP1 moves none") {
  Config c = seed500b();
  c.mutable_parallel()->set_sequence_parallel(false);
  const TpCommPlan p = tp_comm_plan(c);
  CHECK(p.all_reduces == 4);
  CHECK(p.all_gathers == 0);
  CHECK(p.layer_bytes == 2466250752);  // 4 x 2 x 7/8 x A

  Config small;
  small.mutable_model()->set_layers(4);
  small.mutable_model()->set_width(256);
  small.mutable_model()->set_heads(4);
  small.mutable_parallel()->set_tensor(2);
  small.mutable_batch()->set_micro_batch_size(8);
  small.mutable_batch()->set_global_batch_size(8);
  small.mutable_batch()->set_seq_length(128);
  const TpCommPlan s = tp_comm_plan(small, 4);
  CHECK(s.activation_bytes == 8 * 128 * 256 * 4);   // 1 MiB in fp32
  CHECK(s.layer_bytes == 8 * (8 * 128 * 256 * 4) / 2);
  CHECK(s.stage_bytes == 4 * s.layer_bytes);
  CHECK(s.head_bytes == 8 * 128 * 256 * 4 + 1 * 12 * 1024);

  small.mutable_parallel()->set_tensor(1);
  CHECK(tp_comm_plan(small).layer_bytes == 0);
  CHECK(render_plan(small, PlanInputs{}).find("Tensor-parallel traffic: none (TP 1)") != std::string::npos);
}
