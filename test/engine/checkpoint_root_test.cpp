// engine::set_aside_earlier_checkpoints: a fresh start into a checkpoint root moves an
// earlier run's checkpoints out of its timeline, and nothing else.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "engine/checkpointing.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

Config fresh_start_into(const fs::path& root) {
  Config c;
  c.mutable_checkpoint()->set_dir(root.string());
  return c;
}

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

}  // namespace

TEST_CASE("a fresh start sets aside a root holding checkpoints, and leaves one holding none alone") {
  const auto dir = testing::fresh_temp_dir("checkpoint-root");
  fs::create_directories(dir);
  const auto root = dir / "ckpt";
  SUBCASE("no root, an empty root, a root of other files: nothing moves") {
    CHECK(engine::set_aside_earlier_checkpoints(fresh_start_into(root)).empty());
    fs::create_directory(root);
    CHECK(engine::set_aside_earlier_checkpoints(fresh_start_into(root)).empty());
    touch(root / "filler");
    fs::create_directory(root / "lost+found");
    CHECK(engine::set_aside_earlier_checkpoints(fresh_start_into(root)).empty());
    CHECK(fs::exists(root / "filler"));
  }
  SUBCASE("a root with checkpoints is renamed beside itself") {
    fs::create_directories(root / "step_00000002");
    touch(root / "latest");
    const auto aside = engine::set_aside_earlier_checkpoints(fresh_start_into(root));
    REQUIRE_FALSE(aside.empty());
    CHECK(aside.rfind(root.string() + ".previous-", 0) == 0);
    CHECK(fs::exists(fs::path(aside) / "step_00000002"));
    CHECK_FALSE(fs::exists(root));
  }
  SUBCASE("a resume sets nothing aside") {
    fs::create_directories(root / "step_00000002");
    Config c = fresh_start_into(root);
    c.mutable_checkpoint()->set_load("latest");
    CHECK(engine::set_aside_earlier_checkpoints(c).empty());
    CHECK(fs::exists(root / "step_00000002"));
  }
}
