#include "test/ckpt/ckpt_test_util.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "ckpt/commit.h"
#include "ckpt/manifest.h"

namespace troupe::ckpt::testing {

float test_value(const std::string& name, TensorKind kind, int64_t index) {
  uint64_t h = fnv1a64(name) ^ (uint64_t(kind) * 0x9e3779b97f4a7c15ull);
  h ^= uint64_t(index) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return float(int64_t(h >> 40) - (int64_t(1) << 23)) / float(1 << 23);
}

std::vector<float> expected_region(const std::string& name, TensorKind kind, const Shape& shape,
                                   const Region& region) {
  std::vector<float> out;
  for (int64_t j = region.flat_begin; j < region.flat_end; ++j) {
    // Local coordinates of j in the box, then the global row-major index.
    int64_t rest = j, global = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t local = rest % region.box[d].extent;
      rest /= region.box[d].extent;
      global += (region.box[d].offset + local) * stride;
      stride *= shape[d];
    }
    out.push_back(test_value(name, kind, global));
  }
  return out;
}

std::vector<NamedShape> small_gpt2_tensors() {
  const int64_t w = 8, f = 32;
  std::vector<NamedShape> t = {{"wte.weight", {24, w}}, {"wpe.weight", {6, w}}};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    t.push_back({h + "ln_1.weight", {w}});
    t.push_back({h + "ln_1.bias", {w}});
    t.push_back({h + "attn.c_attn.weight", {w, 3 * w}});
    t.push_back({h + "attn.c_attn.bias", {3 * w}});
    t.push_back({h + "attn.c_proj.weight", {w, w}});
    t.push_back({h + "attn.c_proj.bias", {w}});
    t.push_back({h + "ln_2.weight", {w}});
    t.push_back({h + "ln_2.bias", {w}});
    t.push_back({h + "mlp.c_fc.weight", {w, f}});
    t.push_back({h + "mlp.c_fc.bias", {f}});
    t.push_back({h + "mlp.c_proj.weight", {f, w}});
    t.push_back({h + "mlp.c_proj.bias", {w}});
  }
  t.push_back({"ln_f.weight", {w}});
  t.push_back({"ln_f.bias", {w}});
  return t;
}

std::vector<PieceSpec> flat_shard_pieces(const std::vector<NamedShape>& tensors, TensorKind kind,
                                         int ranks, int rank) {
  int64_t total = 0;
  for (const auto& t : tensors) total += shape_elements(t.shape);
  const int64_t per = total / ranks;
  const int64_t lo = per * rank, hi = rank == ranks - 1 ? total : lo + per;
  std::vector<PieceSpec> out;
  int64_t at = 0;
  for (const auto& t : tensors) {
    const int64_t n = shape_elements(t.shape);
    const int64_t b = std::max(lo, at), e = std::min(hi, at + n);
    if (b < e) {
      Region r = Region::whole(t.shape);
      r.flat_begin = b - at;
      r.flat_end = e - at;
      out.push_back({t.name, kind, t.shape, r});
    }
    at += n;
  }
  return out;
}

std::vector<NamedShape> stage_tensors(int stage, int stages) {
  const auto all = small_gpt2_tensors();
  const int layers = 2;
  const int first = stage * layers / stages, last = (stage + 1) * layers / stages;
  std::vector<NamedShape> out;
  for (const auto& t : all) {
    bool mine = false;
    if (t.name == "wte.weight" || t.name == "wpe.weight") mine = stage == 0;
    else if (t.name.rfind("ln_f.", 0) == 0) mine = stage == stages - 1;
    else {
      const int layer = std::stoi(t.name.substr(2));
      mine = layer >= first && layer < last;
    }
    if (mine) out.push_back(t);
  }
  if (stage == stages - 1 && stage != 0) out.push_back(all[0]);  // tied wte copy
  return out;
}

void set_position(CheckpointManifest& m, int64_t step, int64_t global_batch) {
  m.set_step(step);
  m.set_consumed_samples(step * global_batch);
  m.set_successful_updates(step);
  m.set_lr_schedule_samples(step * global_batch);
  m.mutable_data_position()->set_consumed_samples(step * global_batch);
}

CheckpointManifest test_manifest(int64_t step, int dp, int pp) {
  CheckpointManifest m;
  Config config;
  config.mutable_model()->set_layers(2);
  config.mutable_model()->set_width(8);
  config.mutable_parallel()->set_data(dp);
  config.mutable_parallel()->set_pipeline(pp);
  set_manifest_config(m, config);
  m.mutable_topology()->set_data(dp);
  m.mutable_topology()->set_pipeline(pp);
  m.mutable_topology()->set_tensor(1);
  m.set_step(step);
  m.set_consumed_samples(step * 8);
  m.set_successful_updates(step - step / 5);
  m.set_skipped_updates(step / 5);
  m.set_lr_schedule_samples((step - step / 5) * 8);
  auto* rng = m.add_rng();
  rng->set_name("init");
  rng->set_state(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  rng = m.add_rng();
  rng->set_name("data/dp0");
  rng->set_state(std::to_string(step * 977));
  m.mutable_data_position()->set_consumed_samples(step * 8);
  m.mutable_data_position()->set_epoch(step / 7);
  return m;
}

std::string save_test_checkpoint(const std::string& root, int64_t step, int dp, int pp,
                                 int keep_last, const CommitHook& hook) {
  auto commit = CheckpointCommit::begin(root, step, hook);
  CheckpointManifest m = test_manifest(step, dp, pp);
  for (int p = 0; p < pp; ++p) {
    const auto tensors = stage_tensors(p, pp);
    for (int d = 0; d < dp; ++d) {
      ShardWriter w(commit.partial_dir(), "dp" + std::to_string(d) + "_pp" + std::to_string(p) + ".shard",
                    "ckpt_writer/dp" + std::to_string(d) + "/pp" + std::to_string(p) + "/tp0",
                    commit.hook());
      if (d == 0)
        for (const auto& t : tensors) add_test_piece(w, PieceSpec::whole(t.name, TensorPiece::PARAM, t.shape));
      for (TensorKind k : {TensorPiece::MASTER, TensorPiece::EXP_AVG, TensorPiece::EXP_AVG_SQ})
        for (const auto& spec : flat_shard_pieces(tensors, k, dp, d)) add_test_piece(w, spec);
      *m.add_shard() = w.finish();
    }
  }
  return commit.commit(m, keep_last);
}

void add_test_piece(ShardWriter& writer, const PieceSpec& spec) {
  const auto data = expected_region(spec.name, spec.kind, spec.global_shape, spec.region);
  writer.add(spec, data);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe::ckpt::testing
