// tp_bench: tensor parallelism on the CPU. Full training steps of the "small" model
// (4 layers, 4 heads, width 256, vocab 4096, seq 128, batch 8: one microbatch of 8
// sequences) as
//   tp1     one GptStage on a CpuDevice with 2 compute threads (GEMMs split in two)
//   tp2     two tensor-parallel ranks, one thread each, an in-process group
//   tp2-sp  the same with sequence parallelism
// A step is: zero gradients, forward, backward, (SP: LayerNorm gradient sum), the
// global norm (tp2: each rank's partial, summed over the group), AdamW on every
// rank's parameters. Reported per mode: the median step time, tokens/s, and the time
// rank 0 spent inside tensor-parallel collectives per step (transfer plus waiting
// for the other rank) as a share of the step.
//
//   tp_bench [--steps S] [--repeat R]    modes interleaved R times (default 15 steps,
//                                        3 repeats); medians over every measured step
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/inprocess.h"
#include "config/derived.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "bench/stats.h"

using namespace troupe;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using troupe::bench::median;

Config small_config(int tp, bool sp) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(4);
  m->set_heads(4);
  m->set_width(256);
  m->set_vocab_size(4096);
  m->set_max_positions(128);
  c.mutable_parallel()->set_tensor(tp);
  c.mutable_parallel()->set_sequence_parallel(sp);
  c.mutable_batch()->set_micro_batch_size(8);
  c.mutable_batch()->set_global_batch_size(8);
  c.mutable_batch()->set_seq_length(128);
  c.mutable_training()->set_seed(3);
  return c;
}

data::Microbatch batch(const Config& c) {
  data::Microbatch mb;
  mb.batch = c.batch().micro_batch_size();
  mb.seq = c.batch().seq_length();
  uint32_t x = 12345;
  for (int b = 0; b < mb.batch; ++b) {
    mb.sample_ids.push_back(b);
    for (int t = 0; t < mb.seq; ++t) {
      x = x * 1664525u + 1013904223u;
      mb.tokens.push_back(int32_t(x % 4096));
      mb.targets.push_back(int32_t((x >> 12) % 4096));
      mb.positions.push_back(t);
      mb.segments.push_back(0);
      mb.loss_mask.push_back(1.0f);
    }
  }
  mb.loss_tokens = mb.global_loss_tokens = int64_t(mb.batch) * mb.seq;
  return mb;
}

struct Measured {
  std::vector<double> step_s, comm_s;
  double loss = 0;
};

// `ranks` tensor-parallel ranks (1: no group) with `threads` compute threads each.
void run_mode(int ranks, int threads, bool sp, int steps, Measured& out) {
  const Config c = small_config(ranks, sp);
  const auto mb = batch(c);
  std::vector<std::shared_ptr<comm::Communicator>> group;
  if (ranks > 1) group = comm::make_inprocess_group(ranks, "tp-bench");
  std::barrier sync(ranks);
  std::vector<std::thread> pool;
  for (int t = 0; t < ranks; ++t)
    pool.emplace_back([&, t] {
      kernels::cpu::CpuDevice dev(threads);
      model::TensorParallel tp;
      if (ranks > 1) tp = {group[size_t(t)], sp};
      model::GptStage stage(c, model::StageRange::whole(c), dev, 1, model::StageShape::from_config(c), tp);
      optim::AdamW adam(dev, optim::AdamWHyper::from_config(c), stage.registry().decay_spans(),
                        {0, stage.param_count()});
      const auto norm_ranges = stage.registry().norm_ranges();
      for (int s = -2; s < steps; ++s) {  // two warm-up steps
        sync.arrive_and_wait();
        const double t0 = now();
        stage.zero_grads();
        stage.reset_tp_comm_seconds();
        const auto loss = stage.forward(0, mb);
        stage.backward(0);
        stage.reduce_tensor_parallel_grads();
        float sq = float(optim::sum_squares(dev, stage.grads(), norm_ranges, {0, stage.param_count()}));
        if (ranks > 1) group[size_t(t)]->all_reduce_sum({&sq, 1});
        const auto d = optim::decide(double(sq), c.optimizer().clip_grad());
        adam.step(stage.params(), stage.grads(), 1e-4, d.factor);
        const double t1 = now();
        if (t == 0 && s >= 0) {
          out.step_s.push_back(t1 - t0);
          out.comm_s.push_back(stage.tp_comm_seconds());
          out.loss = loss.loss_sum / double(loss.loss_tokens);
        }
      }
    });
  for (auto& th : pool) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 15, repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: tp_bench [--steps S] [--repeat R]\n");
      return 2;
    }
  }
  struct Mode {
    const char* name;
    int ranks, threads;
    bool sp;
    Measured m;
  };
  std::vector<Mode> modes = {{"tp1 (2 threads)", 1, 2, false, {}},
                             {"tp2 (1 thread each)", 2, 1, false, {}},
                             {"tp2-sp (1 thread each)", 2, 1, true, {}}};
  for (int r = 0; r < repeat; ++r)
    for (auto& mode : modes) run_mode(mode.ranks, mode.threads, mode.sp, steps, mode.m);
  const double tokens = 8.0 * 128.0;
  std::printf("small: 4 layers, 4 heads, width 256, vocab 4096, seq 128, batch 8; %d x %d steps per mode\n", repeat,
              steps);
  std::printf("%-24s %12s %12s %14s %12s %10s\n", "mode", "step ms", "tokens/s", "TP comm ms", "comm share",
              "loss");
  for (const auto& mode : modes) {
    const double step = median(mode.m.step_s), comm = median(mode.m.comm_s);
    std::vector<double> share;
    for (size_t i = 0; i < mode.m.step_s.size(); ++i) share.push_back(mode.m.comm_s[i] / mode.m.step_s[i]);
    std::printf("%-24s %12.2f %12.0f %14.2f %11.1f%% %10.4f\n", mode.name, 1e3 * step, tokens / step, 1e3 * comm,
                100.0 * median(share), mode.m.loss);
  }
  return 0;
}
