// Cluster mode on GPUs (docs/gpu.md, "Across processes"), on the CPU emulation of CUDA
// and NCCL: the test process is the supervisor, with the emulated backend installed,
// and mints every group's NCCL unique ID; the workers run emulated_worker (`supervisor
// worker` on the emulation, 4 emulated GPUs each) and join their ranks' groups with
// those IDs. Emulated NCCL members in different processes meet through files, and add
// in rank order, as the in-process emulated NCCL groups do: a cluster run is bitwise
// equal to the same config in one process on one emulated GPU per rank.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "comm/nccl/nccl_communicator.h"
#include "engine/rank_device.h"
#include "kernels/cuda/cuda_backend.h"
#include "test/actors/parity_check.h"
#include "test/cluster/cluster_harness.h"
#include "test/cluster/worker_launcher.h"

using namespace troupe;
using namespace troupe::cluster_harness;

namespace {

// The emulated CUDA backend with NCCL groups, for the duration of a case. The emulated
// NCCL members meet under kRoot (inherited by the workers), removed with it: a killed
// worker's groups are never left by all members, so nothing else would remove them.
struct EmulatedGpus {
  EmulatedGpus() {
    ::setenv("TROUPE_EMU_NCCL_DIR", (kRoot / "emulated-nccl").c_str(), 1);
    kernels::cuda::install_cuda_backend({}, comm::nccl_groups());
  }
  ~EmulatedGpus() { kernels::install_gpu_backend({}); }
};

Config on_gpus(Config c) {
  c.mutable_device()->set_type(DeviceConfig::CUDA);
  // Evaluation passes send activations across too, with nothing to pace their slots.
  c.mutable_training()->set_eval_interval(2);
  c.mutable_training()->set_eval_samples(4);
  return c;
}

// Every worker's log, whole (as far as 1000 lines).
std::string worker_logs(const ClusterRun& run) {
  std::string logs;
  for (const auto& w : run.workers) logs += testing::tail_of(w.log, 1000);
  return logs;
}

// Runs c on `workers` workers and in one process; both complete bitwise equal, and
// every worker logged each of its ranks joining `groups` (names) with the handed-out IDs.
void check_gpu_parity(const Config& c, int workers, const std::vector<std::string>& groups) {
  const auto want = testing::run(local_of(c));
  const auto run = run_cluster(c, workers);
  check_matches(run, want);
  INFO(run.logs());
  REQUIRE(run.result.outcome.evals.size() == want.outcome.evals.size());
  for (size_t i = 0; i < want.outcome.evals.size(); ++i) CHECK(run.result.outcome.evals[i].loss == want.outcome.evals[i].loss);
  for (const auto& w : run.workers) CHECK(exited_with(w, 0));
  const auto logs = worker_logs(run);
  for (const auto& g : groups) {
    CAPTURE(g);
    CHECK(logs.find(g) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("emulated GPUs: 2 workers x DP2 x PP2 on NCCL groups from the supervisor's IDs, bitwise the in-process run") {
  EmulatedGpus gpus;
  // BY_STAGE: worker 0 hosts stage 0 of both replicas, worker 1 stage 1. Activations,
  // their gradients (NCCL send/recv, a communicator per direction) and the tied-embedding
  // all-reduce cross processes; the DP groups join two ranks of one worker.
  Config c = on_gpus(tiny("gpu-dp2pp2", 2, 2, 2));
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  check_gpu_parity(c, 2,
                   {"joined its NCCL groups of generation 1: dp[pp0/tp0], tp[dp0/pp0], embedding[dp0/tp0], "
                    "pp[dp0/tp0]:0-1",
                    "dp[pp1/tp0], tp[dp1/pp1], embedding[dp1/tp0], pp[dp1/tp0]:0-1"});
}

TEST_CASE("emulated GPUs: 2 workers x TP2 x PP2 (sequence parallel) across processes, bitwise the in-process run") {
  EmulatedGpus gpus;
  Config c = on_gpus(tiny("gpu-tp2pp2", 1, 2, 2));
  c.mutable_parallel()->set_tensor(2);
  c.mutable_parallel()->set_sequence_parallel(true);
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  check_gpu_parity(c, 2, {"tp[dp0/pp0]", "tp[dp0/pp1]", "pp[dp0/tp1]:0-1"});
}

TEST_CASE("emulated GPUs: a SIGKILLed worker is replaced by the spare; fresh NCCL groups, bitwise the fault-free run") {
  EmulatedGpus gpus;
  // Worker 1 hosts stage 1 of both replicas and dies in step 3's forward. The ranks on
  // worker 0 are then waiting for messages (gradients), not inside an NCCL call: the
  // emulated NCCL runs a call on its caller's thread, so an abort could not reach a
  // rank blocked in one (real NCCL enqueues and returns).
  Config c = on_gpus(tiny("gpu-kill", 2, 2, 2, 1));
  c.mutable_cluster()->set_placement(ClusterConfig::BY_STAGE);
  c.mutable_checkpoint()->set_interval_steps(1);
  c.mutable_checkpoint()->set_max_lag_steps(0);  // step 2's checkpoint is committed before step 3
  *c.mutable_faults()->add_fault() = fault("stage/dp0/pp1/tp0", 3, Fault::FORWARD, Fault::KILL_PROCESS);
  const auto want = testing::run(local_of(c));  // local_of drops the faults
  const auto run = run_cluster(c, 3);
  check_matches(run, want);
  CHECK(run.result.restarts == 1);
  REQUIRE(run.result.quarantine.size() == 1);
  CHECK(run.result.quarantine[0].position == 1);
  // The second generation joined groups under fresh IDs.
  CHECK(worker_logs(run).find("joined its NCCL groups of generation 2") != std::string::npos);
}

TEST_CASE("emulated GPUs: a cluster run's supervisor needs NCCL but no GPU") {
  Config c = on_gpus(tiny("gpu-refuse", 2, 1, 2));
  kernels::GpuBackend no_gpu;
  no_gpu.count = [](std::string* why) {
    *why = "no GPU on this host";
    return 0;
  };
  no_gpu.make = [](int) -> std::shared_ptr<kernels::Device> { return nullptr; };
  no_gpu.groups = comm::nccl_groups();
  kernels::install_gpu_backend(no_gpu);
  CHECK_NOTHROW(engine::check_runtime_device(c));  // the workers' GPUs are theirs to check
  c.clear_cluster();
  CHECK_THROWS_WITH_AS(engine::check_runtime_device(c), "device.type: CUDA: no GPU: no GPU on this host",
                       std::invalid_argument);
  kernels::install_gpu_backend({});
}
