// engine::RankDevices: a rank's stage and optimizer shard of one group start share a
// device; a restart gets new ones; ranks never share. The parity suites in this
// binary run every layout on these shared devices against the reference trainer.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "engine/rank_device.h"

using namespace troupe;

TEST_CASE("rank devices: one per rank and group start, shared by the stage and optimizer of that start") {
  Config c;
  c.mutable_parallel()->set_data(2);
  c.mutable_device()->set_threads(2);
  engine::RankDevices devices(c);
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
  engine::RankDevices devices(c);
  CHECK_THROWS_AS(devices.get({0, 0, 0}, 0), std::invalid_argument);
  c.mutable_device()->set_type(DeviceConfig::CPU);
  CHECK_NOTHROW(engine::check_runtime_device(c));
}
