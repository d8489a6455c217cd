#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "metrics/error.h"
#include "metrics/files.h"
#include "metrics/run_dir.h"
#include "test/support/scratch_dir.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;
namespace fs = std::filesystem;

TEST_CASE("run directory layout paths") {
  const auto l = run_dir_layout("runs/default");
  CHECK(l.root == "runs/default");
  CHECK(l.config == "runs/default/config.textproto");
  CHECK(l.metrics == "runs/default/metrics.jsonl");
  CHECK(l.spikes == "runs/default/spikes.jsonl");
  CHECK(l.events == "runs/default/events");
  CHECK(l.checkpoints == "runs/default/checkpoints");
  CHECK(l.logs == "runs/default/logs");
  CHECK(l.acceptance == "runs/default/acceptance");
}

TEST_CASE("prepare_run_dir creates the folders and copies the config") {
  ScratchDir tmp;
  const std::string root = tmp / "runs/exp1";
  const auto p = prepare_run_dir(root, "model { layers: 2 }\n");
  CHECK_FALSE(p.existed);
  CHECK(p.previous_config.empty());
  for (const auto* d : {&p.layout.events, &p.layout.checkpoints, &p.layout.logs, &p.layout.acceptance})
    CHECK(fs::is_directory(*d));
  CHECK(read_file(p.layout.config) == "model { layers: 2 }\n");

  // Same config again (a resumed run): nothing kept aside.
  const auto again = prepare_run_dir(root, "model { layers: 2 }\n");
  CHECK(again.existed);
  CHECK(again.previous_config.empty());
  CHECK_FALSE(fs::exists(p.layout.config + ".1"));

  // A changed config keeps the earlier one under the first free number.
  const auto changed = prepare_run_dir(root, "model { layers: 4 }\n");
  CHECK(changed.previous_config == p.layout.config + ".1");
  CHECK(read_file(p.layout.config + ".1") == "model { layers: 2 }\n");
  CHECK(read_file(p.layout.config) == "model { layers: 4 }\n");
  const auto third = prepare_run_dir(root, "model { layers: 8 }\n");
  CHECK(third.previous_config == p.layout.config + ".2");
  CHECK(read_file(p.layout.config + ".2") == "model { layers: 4 }\n");
}

TEST_CASE("prepare_run_dir names the path that is in the way") {
  ScratchDir tmp;
  const std::string file = tmp / "a_file";
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH_AS(prepare_run_dir(file, ""), (file + ": exists and is not a directory").c_str(), MetricsError);
  const std::string root = tmp / "run";
  fs::create_directories(root);
  std::ofstream(root + "/events") << "not a folder";
  CHECK_THROWS_WITH_AS(prepare_run_dir(root, ""), (root + "/events: exists and is not a directory").c_str(),
                       MetricsError);
  CHECK_THROWS_WITH_AS(prepare_run_dir("", ""), "run directory: empty path (logging.run_dir)", MetricsError);
  CHECK_THROWS_WITH_AS(prepare_run_dir(file + "/sub", ""), doctest::Contains((file + "/sub: cannot create directory").c_str()),
                       MetricsError);
}
