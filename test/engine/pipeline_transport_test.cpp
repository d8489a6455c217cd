// engine::PipelineTransport without actors: two stages of a tiny PP2 model in one
// thread, handing activations and their gradients over as neighbours in one process
// (pointers into the sender's slots) and as neighbours in two processes over a host
// communicator (the Gloo path; an in-process pair buffers sends, so one thread can play
// both sides), and under sequence parallelism, where a rank hands over its sequence
// shard. The device-communicator path is the NCCL case of
// test_cluster_cuda_emulated.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "comm/inprocess.h"
#include "engine/pipeline_transport.h"
#include "engine/stage_worker.h"
#include "engine/topology.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::engine;
using msg::StepKind;

namespace {

// One sample of 32 tokens, different for each `seed`.
data::Microbatch microbatch(int seed) {
  data::Microbatch b;
  b.batch = 1;
  b.seq = 32;
  for (int i = 0; i < 32; ++i) {
    b.tokens.push_back((seed * 31 + i * 7) % 257);
    b.targets.push_back((seed * 31 + i * 7 + 1) % 257);
    b.positions.push_back(i);
    b.segments.push_back(0);
    b.loss_mask.push_back(1.0f);
  }
  b.sample_ids = {seed};
  b.loss_tokens = 32;
  b.global_loss_tokens = 8 * 32;
  return b;
}

// Both stages of DP1 x PP2, with in-process communicators (no pipeline pair: one process).
struct TwoStages {
  Config config = testing::tiny_runtime_config(2, 1, 2);
  CommPlan plan = make_inprocess_comms(Topology::logical(config), std::chrono::milliseconds(10000));
  std::shared_ptr<StageWorker> first = std::make_shared<StageWorker>(config, Rank{0, 0, 0}, plan.ranks[0]);
  std::shared_ptr<StageWorker> last = std::make_shared<StageWorker>(config, Rank{0, 1, 0}, plan.ranks[1]);
  data::Microbatch mb0 = microbatch(0), mb1 = microbatch(1);

  TwoStages() {
    first->begin_step();
    last->begin_step();
    last->reserve_losses(8);
    first->forward(0, mb0, nullptr);
    first->forward(1, mb1, nullptr);
    first->finish_device_work();
  }
};

bool same_values(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * sizeof *a) == 0; }

}  // namespace

TEST_CASE("pipeline transport: neighbours in one process hand each other pointers into their slots") {
  TwoStages s;
  PipelineTransport from(stage_path({0, 0, 0}), s.first, nullptr, nullptr);
  PipelineTransport to(stage_path({0, 1, 0}), s.last, nullptr, nullptr);
  auto x = from.send_forward(StepKind::Train, 1, s.mb1);
  CHECK_FALSE(x.via_comm);
  CHECK(x.data == s.first->output(1));
  CHECK(x.rows == 32);
  CHECK(x.cols == s.first->width());
  CHECK(x.owner == s.first);  // the sender's worker outlives a restart while x is read
  to.arrived_forward(StepKind::Train, x);
  CHECK(x.data == s.first->output(1));
  CHECK(to.recv_forward(StepKind::Train, x) == s.first->output(1));

  s.last->forward(1, s.mb1, to.recv_forward(StepKind::Train, x));
  s.last->backward(1, nullptr);
  auto dx = to.send_backward(1, s.mb1);
  CHECK_FALSE(dx.via_comm);
  CHECK(dx.data == s.last->input_grad(1));
  CHECK(dx.owner == s.last);
  CHECK(from.recv_backward(dx) == s.last->input_grad(1));
}

TEST_CASE("pipeline transport: neighbours in two processes send over a host communicator, one FIFO per kind") {
  TwoStages s;
  // The pair pp[dp0/tp0]:0-1: the first stage is member 0, the last member 1.
  const auto pair = comm::make_inprocess_group(2, "pp[dp0/tp0]:0-1", std::chrono::milliseconds(10000));
  PipelineTransport from(stage_path({0, 0, 0}), s.first, nullptr, pair[0]);
  PipelineTransport to(stage_path({0, 1, 0}), s.last, pair[1], nullptr);
  from.set_remote(false, true);
  to.set_remote(true, false);
  CHECK(from.next_remote());
  CHECK(to.prev_remote());
  const int64_t n = 32 * s.first->width();

  // An evaluation forward of microbatch 0 and a training forward of microbatch 1 go out
  // in that order; the training one is received first (its own tag).
  auto eval = from.send_forward(StepKind::Eval, 0, s.mb0);
  auto train = from.send_forward(StepKind::Train, 1, s.mb1);
  for (const auto* a : {&eval, &train}) {
    CHECK(a->via_comm);
    CHECK(a->data == nullptr);  // the message carries the shape only
    CHECK(a->rows == 32);
    CHECK(a->cols == s.first->width());
  }
  to.arrived_forward(StepKind::Train, train);
  to.arrived_forward(StepKind::Eval, eval);
  REQUIRE(train.data != nullptr);
  REQUIRE(eval.data != nullptr);
  CHECK(same_values(train.data, s.first->output(1), n));
  CHECK(same_values(eval.data, s.first->output(0), n));
  CHECK(to.recv_forward(StepKind::Train, train) == train.data);

  s.last->forward(1, s.mb1, to.recv_forward(StepKind::Train, train));
  s.last->backward(1, nullptr);
  auto dx = to.send_backward(1, s.mb1);
  CHECK(dx.via_comm);
  CHECK(dx.data == nullptr);
  from.arrived_backward(dx);
  REQUIRE(dx.data != nullptr);
  CHECK(same_values(dx.data, s.last->input_grad(1), n));
  CHECK(from.recv_backward(dx) == dx.data);
}

TEST_CASE("pipeline transport: a neighbour in another process without a communicator is named") {
  TwoStages s;
  PipelineTransport from(stage_path({0, 0, 0}), s.first, nullptr, nullptr);
  from.set_remote(false, true);
  CHECK_THROWS_WITH_AS(from.send_forward(StepKind::Train, 0, s.mb0),
                       doctest::Contains("stage/dp0/pp0/tp0: a pipeline neighbour lives in another process"),
                       std::logic_error);
  msg::Activations announced;
  announced.rows = 32;
  announced.cols = s.first->width();
  announced.via_comm = true;
  PipelineTransport to(stage_path({0, 1, 0}), s.last, nullptr, nullptr);
  to.set_remote(true, false);
  CHECK_THROWS_WITH_AS(to.arrived_forward(StepKind::Train, announced),
                       doctest::Contains("stage/dp0/pp1/tp0: values came from another process"), std::logic_error);
}

TEST_CASE("pipeline transport: under sequence parallelism a rank sends its sequence shard only") {
  Config c = testing::tiny_runtime_config(2, 1, 2);
  c.mutable_parallel()->set_tensor(2);
  c.mutable_parallel()->set_sequence_parallel(true);
  const Topology t = Topology::logical(c);
  const CommPlan plan = make_inprocess_comms(t, std::chrono::milliseconds(10000));
  const Rank r{0, 0, 1};
  auto worker = std::make_shared<StageWorker>(c, r, plan.ranks[size_t(t.index(r))]);
  const auto mb = microbatch(0);
  REQUIRE(worker->activation_rows(mb) == 16);  // tokens [16, 32) of the microbatch's 32
  const auto pair = comm::make_inprocess_group(2, "pp[dp0/tp1]:0-1", std::chrono::milliseconds(10000));
  PipelineTransport from(stage_path(r), worker, nullptr, pair[0]);
  from.set_remote(false, true);
  auto x = from.send_forward(StepKind::Train, 0, mb);
  CHECK(x.rows == 16);
  CHECK(x.cols == worker->width());
  // The receiver takes what was announced (an in-process pair refuses another size).
  PipelineTransport to(stage_path({0, 1, 1}), worker, pair[1], nullptr);
  to.set_remote(true, false);
  to.arrived_forward(StepKind::Train, x);
  REQUIRE(x.data != nullptr);
  CHECK(same_values(x.data, worker->output(0), 16 * worker->width()));
  // In one process the handle names the same rows.
  PipelineTransport local(stage_path(r), worker, nullptr, nullptr);
  CHECK(local.send_forward(StepKind::Train, 0, mb).rows == 16);
}
