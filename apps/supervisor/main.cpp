// supervisor: the one binary of troupe. `supervisor <command> --help` documents each command.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "apps/supervisor/commands.h"
#include "config/error.h"
#ifdef TROUPE_HAVE_CUDA
#include "comm/nccl/nccl_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#endif

namespace troupe::cli {

int prepare_data_main(int argc, char** argv);  // cmd_prepare_data.cpp

int plan_main(int argc, char** argv);  // cmd_plan.cpp
int inspect_main(int argc, char** argv);  // cmd_inspect.cpp
int export_main(int argc, char** argv);   // cmd_export.cpp
int generate_main(int argc, char** argv); // cmd_generate.cpp
int run_main(int argc, char** argv);      // cmd_run.cpp
int inspect_update_main(int argc, char** argv);  // cmd_inspect_update.cpp
int commcheck_main(int argc, char** argv);  // cmd_commcheck.cpp
int worker_main(int argc, char** argv);     // cmd_worker.cpp
int acceptance_main(int argc, char** argv);  // cmd_acceptance.cpp
int scaling_main(int argc, char** argv);     // cmd_scaling.cpp
int compare_main(int argc, char** argv);     // cmd_compare.cpp
int replay_main(int argc, char** argv);      // cmd_replay.cpp
int import_config_main(int argc, char** argv);  // cmd_import_config.cpp

namespace {

int version_main(int, char**) {
  std::printf("troupe supervisor 0.1.0\n");
  return 0;
}

const Subcommand kCommands[] = {
    {"version", "print the version", version_main},
    {"run", "train a model with the actor runtime (the embedded default without CONFIG)", run_main},
    {"prepare-data", "tokenize corpus files into a Megatron indexed dataset (.bin/.idx)", prepare_data_main},
    {"plan", "print the arithmetic of a config: batch, bubble, budget, LR, memory, calendar", plan_main},
    {"import-config", "print the model section of a Hugging Face config.json (GPT-2, Llama family)", import_config_main},
    {"inspect", "print a checkpoint's manifest and verify every shard (exit 1 on damage)", inspect_main},
    {"export", "write a checkpoint's weights as a Hugging Face model (GPT-2, Llama) transformers loads", export_main},
    {"generate", "continue a text prompt with a checkpoint's or a Hugging Face model (CPU with a KV cache, or --device cuda)", generate_main},
    {"inspect-update", "run and record one update on one device (weights, batch, grads, Adam state)", inspect_update_main},
    {"commcheck", "check every communicator group of a layout over Gloo, nccl-tests style", commcheck_main},
    {"worker", "join a cluster run as a worker process (supervisor run --listen; docs/cluster.md)", worker_main},
    {"acceptance", "run the acceptance ladder on a small model of a layout; report PASS/FAIL per rung", acceptance_main},
    {"scaling", "train the same global batch at several DP sizes; tokens/s, speed-up, efficiency", scaling_main},
    {"compare", "runs side by side at equal tokens: validation loss, cost to reach it, spikes", compare_main},
    {"replay", "recompute a run's steps from a checkpoint, bitwise against metrics.jsonl; counterfactuals", replay_main},
};

// Ends the process with `code` once standard output and error are flushed, without the
// shared libraries' destructors: what a command writes is durable before it returns,
// and a library thread stuck on memory it cannot get (OpenBLAS's server thread retries
// its buffer's mmap forever under an address-space limit, and its destructor joins it)
// would otherwise keep the process from ever exiting.
[[noreturn]] void exit_now(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: supervisor <command> [options]\n\n"
               "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`supervisor <command> --help` describes each command.\n");
}

}  // namespace
}  // namespace troupe::cli

int main(int argc, char** argv) {
  using namespace troupe::cli;
#ifdef TROUPE_HAVE_CUDA
  // device.type: CUDA; with a GPU per rank, NCCL groups for the collectives.
  troupe::kernels::cuda::install_cuda_backend({}, troupe::comm::nccl_groups());
#endif
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    std::string name = std::string("supervisor ") + c.name;
    argv[1] = name.data();
    // Exit status: 2 when the input is refused before anything ran (a malformed command
    // line, or a configuration that breaks a rule: config::ConfigError, which names the
    // field and where it was set); 1 for every other failure.
    int code = 1;
    try {
      code = c.run(argc - 1, argv + 1);
    } catch (const troupe::config::ConfigError& e) {
      std::fprintf(stderr, "supervisor %s: error: %s\n", c.name, e.what());
      code = 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "supervisor %s: error: %s\n", c.name, e.what());
    }
    exit_now(code);
  }
  std::fprintf(stderr, "supervisor: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
