// engine::RankDevices: a rank's stage and optimizer shard of one group start share a
// device; a restart gets new ones; ranks never share. The parity suites in this
// binary run every layout on these shared devices against the reference trainer.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/derived.h"
#include "engine/host_capacity.h"
#include "engine/rank_device.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/gpu_backend.h"

using namespace troupe;

TEST_CASE("rank devices: one per rank and group start, shared by the stage and optimizer of that start") {
  Config c;
  c.mutable_parallel()->set_data(2);
  c.mutable_device()->set_threads(2);
  engine::RankDevices devices(std::make_shared<const Config>(c), engine::Topology::logical(c));
  const engine::Rank r0{0, 0, 0}, r1{1, 0, 0};

  const auto optim0 = devices.get(r0, 0);  // the optimizer starts first, then the stage
  const auto stage0 = devices.get(r0, 0);
  CHECK(optim0 == stage0);
  CHECK(devices.get(r1, 0) != stage0);
  CHECK(optim0->kind() == kernels::DeviceKind::kCpu);
  CHECK(optim0->describe().find("1 thread") != std::string::npos);  // 2 threads over 2 ranks

  // The group restarts: the new actors get a new device even while the old ones
  // (possibly still finishing an op) hold theirs.
  const auto optim1 = devices.get(r0, 1);
  CHECK(optim1 != optim0);
  CHECK(devices.get(r0, 1) == optim1);
}

TEST_CASE("the actor runtime refuses a device it cannot run on, naming device.type") {
  Config c;
  c.mutable_device()->set_type(DeviceConfig::CUDA);
  CHECK_THROWS_AS(engine::check_runtime_device(c), std::invalid_argument);
  try {
    engine::check_runtime_device(c);
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).rfind("device.type:", 0) == 0);
  }
  engine::RankDevices devices(std::make_shared<const Config>(c), engine::Topology::logical(c));
  CHECK_THROWS_AS(devices.get({0, 0, 0}, 0), std::invalid_argument);
  c.mutable_device()->set_type(DeviceConfig::CPU);
  CHECK_NOTHROW(engine::check_runtime_device(c));
}

TEST_CASE("on a cluster worker with GPUs the ranks it hosts take its GPUs in arrival order, one each") {
  Config c;
  c.mutable_device()->set_type(DeviceConfig::CUDA);
  c.mutable_parallel()->set_data(2);
  c.mutable_parallel()->set_pipeline(8);
  c.mutable_cluster()->set_workers(8);
  std::vector<int> made;  // the GPU of each device made
  kernels::GpuBackend two;
  two.count = [](std::string*) { return 2; };
  two.make = [&](int gpu) -> std::shared_ptr<kernels::Device> {
    made.push_back(gpu);
    return std::make_shared<kernels::cpu::CpuDevice>(1);
  };
  two.groups.new_id = [] { return std::string("id"); };
  two.groups.join = [](const std::string&, int, int, const std::shared_ptr<kernels::Device>&, const std::string&,
                       std::chrono::milliseconds) { return std::shared_ptr<comm::Communicator>(); };
  two.groups.join_pipeline_pair = [](const std::string&, const std::string&, int,
                                     const std::shared_ptr<kernels::Device>&, const std::string&,
                                     std::chrono::milliseconds) { return std::shared_ptr<comm::Communicator>(); };
  kernels::install_gpu_backend(two);
  engine::RankDevices devices(std::make_shared<const Config>(c), engine::Topology::logical(c));
  // BY_STAGE: this worker hosts stage 3 of both replicas, flat indexes 3 and 11, which
  // the flat index mod 2 would put on one GPU (both are in dp[pp3/tp0]).
  const auto a = devices.get({0, 3, 0}, 0);
  const auto b = devices.get({1, 3, 0}, 0);
  CHECK(b != a);
  CHECK(devices.get({0, 3, 0}, 0) == a);  // its optimizer shard: the same device
  const auto a2 = devices.get({0, 3, 0}, 1);  // a restart: a new device, the same GPU
  CHECK(made == std::vector<int>{0, 1, 0});
  CHECK(a2 != a);
  CHECK_THROWS_WITH_AS(devices.get({0, 4, 0}, 0),
                       "device.type: CUDA: cluster mode needs a GPU per rank on each worker: this worker hosts 3 "
                       "ranks and sees 2 GPU(s)",
                       std::invalid_argument);
  kernels::install_gpu_backend({});
}

TEST_CASE("a one-process CPU run that cannot fit is refused with the numbers before anything is allocated") {
  Config c;
  c.mutable_model()->set_layers(2);
  c.mutable_model()->set_width(64);
  c.mutable_parallel()->set_data(2);
  const double params = double(config::parameter_count(c));
  // Default micro batch 1, seq_length 64, 4 heads: per layer and replica 4 x 1 x 64 x
  // (64 + 4 x 64) bytes, for 2 layers on 2 replicas.
  CHECK(c.batch().micro_batch_size() == 1);
  CHECK(c.batch().seq_length() == 64);
  CHECK(c.model().heads() == 4);
  CHECK(engine::min_host_bytes(c) == params * (8 * 2 + 8) + 2.0 * 2 * 4 * 64 * (64 + 4.0 * 64));
  CHECK_NOTHROW(engine::check_host_capacity(c, engine::min_host_bytes(c)));
  CHECK_THROWS_WITH_AS(engine::check_host_capacity(c, engine::min_host_bytes(c) - 1),
                       doctest::Contains(fmt::format("model: {} parameters and their activations need at least", int64_t(params)).c_str()),
                       std::invalid_argument);
  // A vocabulary of 2^24 and a width of 2^20: about 3.5e13 parameters, refused on any machine.
  c.mutable_model()->set_vocab_size(1 << 24);
  c.mutable_model()->set_width(1 << 20);
  CHECK_THROWS_WITH_AS(engine::check_host_capacity(c), doctest::Contains("GB in this process"), std::invalid_argument);
  // Sequences of 2^17 tokens: the attention probabilities alone are 4 x 2^34 x heads
  // bytes per layer.
  Config longseq;
  longseq.mutable_batch()->set_seq_length(1 << 17);
  longseq.mutable_model()->set_max_positions(1 << 17);
  CHECK_THROWS_WITH_AS(engine::check_host_capacity(longseq, 64e9), doctest::Contains("attention probabilities"),
                       std::invalid_argument);
  // More ranks than one process runs.
  Config wide;
  wide.mutable_parallel()->set_data(64);
  wide.mutable_parallel()->set_pipeline(32);
  CHECK_THROWS_WITH_AS(engine::check_host_capacity(wide),
                       "parallel: data 64 x pipeline 32 x tensor 1 = 2048 ranks in one process, more than the 1024 it "
                       "runs (a stage, an optimizer shard and a writer thread each); run larger layouts in cluster mode",
                       std::invalid_argument);
  // Cluster mode and GPUs hold the state elsewhere: not this check's business.
  wide.mutable_cluster()->set_workers(2);
  CHECK_NOTHROW(engine::check_host_capacity(wide));
}
