// Determinism on CPU: a fixed config, seed and thread count give bitwise identical
// losses, weights and optimizer state, also when two trainers run at the same time
// on different threads of one process.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>

#include "kernels/cpu/cpu_device.h"
#include "engine/reference_trainer.h"
#include "test/model/test_configs.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<float> params, m, v;
};

Outcome train(const Config& c, int threads, int steps) {
  kernels::cpu::CpuDevice dev(threads);
  engine::ReferenceTrainer trainer(c, dev);
  const auto mbs = packed_batches();
  Outcome o;
  for (int s = 0; s < steps; ++s) o.losses.push_back(trainer.step(mbs).loss);
  const int64_t n = trainer.model().param_count();
  o.params = to_host(dev, trainer.model().params(), n);
  o.m = to_host(dev, trainer.optimizer().m(), n);
  o.v = to_host(dev, trainer.optimizer().v(), n);
  return o;
}

bool same(const Outcome& a, const Outcome& b) {
  return a.losses == b.losses && a.params.size() == b.params.size() &&
         !std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) &&
         !std::memcmp(a.m.data(), b.m.data(), a.m.size() * 4) && !std::memcmp(a.v.data(), b.v.data(), a.v.size() * 4);
}

}  // namespace

TEST_CASE("two runs with the same config and threads are bitwise identical") {
  Config c = tiny_config();
  c.mutable_optimizer()->set_lr(1e-2);
  for (int threads : {1, 2}) {
    const Outcome a = train(c, threads, 3), b = train(c, threads, 3);
    CAPTURE(threads);
    CHECK(same(a, b));
    CHECK(a.losses[2] < a.losses[0]);  // and it learns
  }
}

TEST_CASE("trainers running concurrently on separate threads match a solo run") {
  Config c = tiny_config();
  const Outcome solo = train(c, 1, 2);
  Outcome x, y;
  std::thread tx([&] { x = train(c, 1, 2); });
  std::thread ty([&] { y = train(c, 1, 2); });
  tx.join();
  ty.join();
  CHECK(same(solo, x));
  CHECK(same(solo, y));
}
