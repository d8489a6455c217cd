// Checkpoint write and load throughput against the disk's sequential write rate,
// measured in the same run on the same directory.
//
// One repeat = (a) a dd-like write of as many bytes as the checkpoint holds, 4 MiB
// per write() then fsync; (b) a full checkpoint save of a GPT-2-shaped model laid
// out DP x PP (one writer thread per shard: params from dp0, master / exp_avg /
// exp_avg_sq flat-sharded over dp), through the whole commit protocol; (c) loading
// it back: load_latest (size + CRC-32C of every shard) and assembling every tensor.
// Medians over the repeats. See docs/performance.md for the reported numbers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/commit.h"
#include "ckpt/durable_io.h"
#include "ckpt/flat_layout.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/shard_writer.h"
#include "model/init.h"
#include "model/param_registry.h"
#include "bench/stats.h"

using namespace troupe;
using namespace troupe::ckpt;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string dir = "/tmp/troupe-ckpt-bench";
  int repeats = 7;
  int layers = 4, width = 384, vocab = 16384, positions = 1024;
  int dp = 2, pp = 2;
  bool keep = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

using troupe::bench::median;

// Pseudo-random floats (xorshift) for the dd-like write, so that nothing compresses.
void fill(std::vector<float>& v, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = float(int32_t(x >> 32)) * 1e-10f;
  }
}

// One pipeline stage's state: the registry's flat layout and four buffers (param,
// master, exp_avg, exp_avg_sq). Values derive from the initial weights, so the
// tied wte copies of the first and last stage agree bitwise.
struct StageState {
  FlatLayout layout;
  int64_t total = 0;
  std::vector<float> kinds[4];
};

std::vector<StageState> make_stages(const Config& config, int pp) {
  std::vector<StageState> stages;
  for (int s = 0; s < pp; ++s) {
    const model::ParameterRegistry reg(config, model::StageRange::pipeline(config, s, pp));
    StageState st;
    st.layout = flat_layout(reg);
    st.total = reg.total();
    st.kinds[0].resize(size_t(st.total));
    model::init_parameters(reg, config.training().seed(), st.kinds[0].data(), 2);
    st.kinds[1] = st.kinds[0];
    st.kinds[2] = st.kinds[0];
    st.kinds[3] = st.kinds[0];
    for (auto& v : st.kinds[2]) v *= 0.1f;
    for (auto& v : st.kinds[3]) v *= v;
    stages.push_back(std::move(st));
  }
  return stages;
}

// Writes rank (d, s)'s shard: params (d == 0) and its flat share of the optimizer state.
ShardFile write_shard(const CheckpointCommit& commit, const StageState& st, int d, int s, int dp) {
  ShardWriter w(commit.partial_dir(),
                "dp" + std::to_string(d) + "_pp" + std::to_string(s) + ".shard",
                "ckpt_writer/dp" + std::to_string(d) + "/pp" + std::to_string(s) + "/tp0",
                commit.hook());
  if (d == 0) write_flat_range(w, st.layout, TensorPiece::PARAM, st.kinds[0].data(), 0, st.total);
  const int64_t lo = st.total * d / dp, hi = st.total * (d + 1) / dp;
  for (int k = 1; k < 4; ++k) write_flat_range(w, st.layout, TensorKind(k), st.kinds[k].data(), lo, hi);
  return w.finish();
}

double disk_write_seconds(const std::string& path, uint64_t bytes) {
  std::vector<char> block(size_t(4) << 20);
  std::vector<float> noise(block.size() / sizeof(float));
  fill(noise, 77);
  std::memcpy(block.data(), noise.data(), block.size());
  const auto t0 = Clock::now();
  {
    OutputFile out(path);
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min<uint64_t>(block.size(), bytes - done);
      out.write(block.data(), n);
      done += n;
    }
    out.sync();
    out.close();
  }
  const double t = seconds_since(t0);
  std::filesystem::remove(path);
  return t;
}

int usage() {
  std::fprintf(stderr,
               "usage: ckpt_bench [--dir DIR] [--repeats N] [--layers L] [--width W] [--vocab V]\n"
               "                  [--dp D] [--pp P] [--keep]\n"
               "  --keep leaves the last checkpoint under DIR/root for inspect/export\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir") o.dir = next();
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--layers") o.layers = std::stoi(next());
    else if (a == "--width") o.width = std::stoi(next());
    else if (a == "--vocab") o.vocab = std::stoi(next());
    else if (a == "--dp") o.dp = std::stoi(next());
    else if (a == "--pp") o.pp = std::stoi(next());
    else if (a == "--keep") o.keep = true;
    else return usage();
  }
  if (o.repeats < 1 || o.dp < 1 || o.pp < 1 || o.layers % o.pp != 0) return usage();

  Config config;
  auto* m = config.mutable_model();
  m->set_layers(o.layers);
  m->set_heads(o.width / 64 > 0 ? o.width / 64 : 1);
  m->set_width(o.width);
  m->set_vocab_size(o.vocab);
  m->set_max_positions(o.positions);
  config.mutable_parallel()->set_data(o.dp);
  config.mutable_parallel()->set_pipeline(o.pp);

  const auto stages = make_stages(config, o.pp);
  const std::string root = o.dir + "/root";
  std::filesystem::remove_all(o.dir);
  std::filesystem::create_directories(o.dir);

  std::vector<double> disk_mbps, save_mbps, load_mbps, ratio, shard_s, commit_s, prune_s;
  uint64_t ckpt_bytes = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    // (a) and (b) alternate in order so that neither always follows the other's writeback.
    double disk_s = 0;
    auto dd = [&] { disk_s = disk_write_seconds(o.dir + "/dd.bin", ckpt_bytes); };
    if (rep % 2 == 1 && ckpt_bytes > 0) dd();

    // (b) the checkpoint save: shards in parallel, then the commit up to `latest`.
    const auto t0 = Clock::now();
    auto commit = CheckpointCommit::begin(root, rep + 1);
    std::vector<ShardFile> shards(size_t(o.dp * o.pp));
    std::vector<std::thread> writers;
    for (int s = 0; s < o.pp; ++s)
      for (int d = 0; d < o.dp; ++d)
        writers.emplace_back([&, d, s] { shards[size_t(s * o.dp + d)] = write_shard(commit, stages[s], d, s, o.dp); });
    for (auto& t : writers) t.join();
    const double shards_done = seconds_since(t0);
    CheckpointManifest manifest;
    set_manifest_config(manifest, config);
    manifest.mutable_topology()->set_data(o.dp);
    manifest.mutable_topology()->set_pipeline(o.pp);
    manifest.set_step(rep + 1);
    for (auto& s : shards) *manifest.add_shard() = s;
    const std::string dir = commit.commit(manifest, 0);  // keep all: pruning is timed apart
    const double save_s = seconds_since(t0);
    const auto tp = Clock::now();
    prune_checkpoints(root, rep + 1, 1);
    prune_s.push_back(seconds_since(tp));
    shard_s.push_back(shards_done);
    commit_s.push_back(save_s - shards_done);
    ckpt_bytes = 0;
    for (const auto& s : shards) ckpt_bytes += s.size_bytes();

    if (rep % 2 == 0 || disk_s == 0) dd();

    // (c) load: verify every shard, assemble every tensor.
    const auto t1 = Clock::now();
    LoadOutcome loaded = load_latest(root);
    if (!loaded.checkpoint || loaded.checkpoint->dir() != dir) {
      std::fprintf(stderr, "ckpt_bench: reload failed\n");
      return 1;
    }
    uint64_t values = 0;
    for (const auto& t : loaded.checkpoint->tensors())
      values += loaded.checkpoint->read(t.name, t.kind).size();
    const double load_s = seconds_since(t1);

    const double mb = double(ckpt_bytes) / 1e6;
    disk_mbps.push_back(mb / disk_s);
    save_mbps.push_back(mb / save_s);
    load_mbps.push_back(mb / load_s);
    ratio.push_back(disk_s / save_s);
    std::printf("repeat %d: %.1f MB in %zu shards: save %.3f s = shards %.3f + commit %.3f "
                "(%.0f MB/s; prune of the previous %.3f s), disk sequential %.3f s (%.0f MB/s), "
                "save/disk %.2f; load+verify+assemble %.3f s (%.0f MB/s, %llu values)\n",
                rep + 1, mb, shards.size(), save_s, shards_done, save_s - shards_done, mb / save_s,
                prune_s.back(), disk_s, mb / disk_s, disk_s / save_s, load_s, mb / load_s,
                static_cast<unsigned long long>(values));
  }
  std::printf("\nmodel: %d layers, width %d, vocab %d, positions %d; layout DP%d x PP%d; "
              "checkpoint %.1f MB (params + fp32 master + 2 Adam moments%s)\n",
              o.layers, o.width, o.vocab, o.positions, o.dp, o.pp, double(ckpt_bytes) / 1e6,
              o.pp > 1 ? "; the tied wte is stored by the first and the last stage" : "");
  std::printf("medians of %d: checkpoint save %.0f MB/s (shards %.3f s, commit %.3f s), disk "
              "sequential write %.0f MB/s, save/disk %.2f; prune %.3f s; load (verify + "
              "assemble) %.0f MB/s\n",
              o.repeats, median(save_mbps), median(shard_s), median(commit_s), median(disk_mbps),
              median(ratio), median(prune_s), median(load_mbps));
  if (!o.keep) std::filesystem::remove_all(o.dir);
  else std::printf("kept %s\n", root.c_str());
  return 0;
}
