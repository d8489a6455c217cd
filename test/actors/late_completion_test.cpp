// The runtime on a device that completes late, as a GPU does (late_completion_device.h):
// reads issued without waiting land, and when_done fns run, 2 ms after their call on
// the device's own thread. The run must give the CPU run's bits: a loss sum, a norm
// partial or a host-staged collective that read host memory before its read-back
// landed would see stale contents (zero, or an earlier microbatch's or step's values).
//
// It also counts the calls that would block an actor thread on a GPU. For DP2 x PP2
// with the distributed optimizer and tied embeddings (so every collective a step runs
// is staged through the host: the tied-embedding all-reduce, the gradient
// reduce-scatter, the parameter all-gather) none is left inside the steps; what remains
// is the final state collected after the run: each stage's parameters and each shard's
// two Adam moments, one copy_to_host each. The checkpoint snapshots (steps 1 to 3) are
// read back without waiting, and their shards hold the CPU run's bits. Before the
// non-blocking reads the last stage
// also waited for every microbatch's losses (two reads per forward), each shard for its
// norm partial (one sum_squares per range), and every staged collective for its copy
// to the host.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "ckpt/commit.h"
#include "ckpt/reader.h"
#include "engine/checkpointing.h"
#include "kernels/gpu_backend.h"
#include "test/actors/late_completion_device.h"
#include "test/actors/parity_check.h"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("on a device that completes late the runtime gives the CPU run's bits and waits only where said") {
  constexpr int kSteps = 4;
  Config cpu = with_steps(parity_layout(2, 2, "troupe-late-completion-cpu"), kSteps);
  cpu.mutable_training()->set_eval_interval(2);  // evaluation passes: their losses are read back too
  // 8 microbatches per replica, more than stage 0's 3 activation slots: its evaluation
  // forwards wait for stage 1's eval_consumed before rewriting a slot.
  cpu.mutable_training()->set_eval_samples(16);
  // Checkpoints of steps 1, 2 and 3 (the last step has none without save_on_exit): each
  // shard's snapshot is read back without waiting.
  cpu.mutable_checkpoint()->set_interval_steps(1);
  cpu.mutable_checkpoint()->set_max_lag_steps(0);  // each committed before the next step starts
  cpu.mutable_checkpoint()->set_keep_last(0);      // all kept
  Config late = cpu;
  late.mutable_logging()->set_run_dir((std::filesystem::temp_directory_path() / "troupe-late-completion").string());
  late.mutable_device()->set_type(DeviceConfig::CUDA);

  std::mutex mu;
  std::vector<std::shared_ptr<LateCompletionDevice>> devices;
  kernels::GpuBackend backend;
  backend.count = [](std::string*) { return 1; };
  backend.make = [&](int) -> std::shared_ptr<kernels::Device> {
    auto d = std::make_shared<LateCompletionDevice>(std::chrono::milliseconds(2));
    std::lock_guard lock(mu);
    devices.push_back(d);
    return d;
  };
  // No make_group: the collectives are staged through the host, as with shared GPUs.
  kernels::install_gpu_backend(std::move(backend));
  for (const auto* c : {&cpu, &late}) std::filesystem::remove_all(engine::checkpoint_root(*c));
  const auto want = run(cpu);
  const auto got = run(late);
  kernels::install_gpu_backend({});

  check_bitwise(got, want);
  REQUIRE(got.outcome.evals.size() == want.outcome.evals.size());
  REQUIRE(got.outcome.evals.size() == 3);  // before the first update, after the 2nd and the 4th
  for (size_t i = 0; i < got.outcome.evals.size(); ++i) {
    CHECK(got.outcome.evals[i].step == int64_t(2 * i));
    CHECK(got.outcome.evals[i].loss == want.outcome.evals[i].loss);
    CHECK(got.outcome.evals[i].loss_tokens == want.outcome.evals[i].loss_tokens);
  }

  // The checkpoints hold the CPU run's bits: a snapshot handed to its writer before its
  // copies landed would hold stale host memory.
  for (const int64_t step : {1, 2, 3}) {
    CAPTURE(step);
    const auto dir = [step](const Config& c) { return engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(step); };
    const auto a = ckpt::Checkpoint::open(dir(late));
    const auto b = ckpt::Checkpoint::open(dir(cpu));
    const auto tensors = b.tensors();
    REQUIRE(a.tensors().size() == tensors.size());
    for (const auto& t : tensors) {
      CAPTURE(t.name);
      CHECK(a.read(t.name, t.kind) == b.read(t.name, t.kind));
    }
  }

  REQUIRE(devices.size() == 4);  // one per rank, shared by its stage and its shard
  LateCompletionDevice::Waits waits;
  for (const auto& d : devices) {
    const auto w = d->waits();
    waits.synchronize += w.synchronize;
    waits.copy_to_host += w.copy_to_host;
    waits.sum_squares += w.sum_squares;
  }
  CHECK(waits.sum_squares == 0);
  CHECK(waits.synchronize == 0);
  CHECK(waits.copy_to_host == 4 * 3);
}
