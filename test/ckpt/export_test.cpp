// `supervisor export`: a Hugging Face GPT-2 directory whose tensors round-trip
// exactly, whose config.json describes the model, and which transformers loads
// and runs to the same logits as a reference forward (skipped without transformers).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/hf_export.h"
#include "ckpt/manifest.h"
#include "ckpt/hf_import.h"
#include "ckpt/reader.h"
#include "config/derived.h"
#include "config/hf_config.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "model/safetensors.h"
#include "test/ckpt/ckpt_test_util.h"
#include "test/ckpt/gpt2_reference.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

Config export_config() {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(2);
  m->set_heads(2);
  m->set_width(16);
  m->set_ffn_width(48);
  m->set_vocab_size(50);  // padded to 64 rows
  m->set_max_positions(16);
  m->set_layernorm_eps(1e-5f);
  c.mutable_parallel()->set_pipeline(2);
  return c;
}

// GPT-2-like values: small weights, LayerNorm scales near 1. The padding rows of
// wte hold garbage on purpose: export must drop them.
std::vector<float> weight_values(const std::string& name, const Shape& shape) {
  std::vector<float> v(size_t(shape_elements(shape)));
  const bool norm_scale = name.find("ln_") != std::string::npos && name.ends_with(".weight");
  const bool bias = name.ends_with(".bias");
  for (size_t i = 0; i < v.size(); ++i) {
    const float r = test_value(name, TensorPiece::PARAM, int64_t(i));
    v[i] = norm_scale ? 1.0f + 0.1f * r : (bias ? 0.1f * r : 0.2f * r);
  }
  return v;
}

// Writes the params of `config` as a PP2 checkpoint (tied wte on both stages),
// leaving out `skip` and adding `extra` when given.
std::string write_model_checkpoint(const std::string& root, const Config& config,
                                   const std::string& skip = "", const std::string& extra = "") {
  auto commit = CheckpointCommit::begin(root, 7);
  CheckpointManifest m;
  set_manifest_config(m, config);
  m.set_step(7);
  m.mutable_topology()->set_pipeline(2);
  const auto shapes = hf_parameter_shapes(config);
  for (int stage = 0; stage < 2; ++stage) {
    ShardWriter w(commit.partial_dir(), "pp" + std::to_string(stage) + ".shard");
    for (const auto& [name, shape] : shapes) {
      const bool first = name == "wte.weight" || name == "wpe.weight" || name.starts_with("h.0.");
      const bool tied = name == "wte.weight";
      if (name == skip || !((stage == 0 && first) || (stage == 1 && (!first || tied)))) continue;
      w.add(PieceSpec::whole(name, TensorPiece::PARAM, shape), weight_values(name, shape));
    }
    if (stage == 1 && !extra.empty())
      w.add(PieceSpec::whole(extra, TensorPiece::PARAM, {4}), std::vector<float>(4, 1.0f));
    *m.add_shard() = w.finish();
  }
  return commit.commit(m, 0);
}

int run_python_check(const std::string& model_dir, const std::string& expected,
                     std::string& output) {
  const std::string log = model_dir + "/../hf_check.log";
  const std::string cmd = "python3 " + std::string(TROUPE_SOURCE_DIR) +
                          "/tools/ckpt_hf_check.py " + model_dir + " --expected " + expected +
                          " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  output = file_bytes(log);
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("GPT-2 parameter list follows the config") {
  const Config c = export_config();
  const auto shapes = hf_parameter_shapes(c);
  CHECK(shapes.size() == 2 + 12 * 2 + 2);
  CHECK(shapes[0] == std::pair<std::string, Shape>{"wte.weight", {64, 16}});
  CHECK(shapes[4] == std::pair<std::string, Shape>{"h.0.attn.c_attn.weight", {16, 48}});
  CHECK(shapes[10] == std::pair<std::string, Shape>{"h.0.mlp.c_fc.weight", {16, 48}});
  CHECK(shapes[12] == std::pair<std::string, Shape>{"h.0.mlp.c_proj.weight", {48, 16}});
  int64_t total = 0;
  for (const auto& [name, shape] : shapes) total += shape_elements(shape);
  CHECK(total == config::parameter_count(c));
}

TEST_CASE("export writes safetensors + config.json that round-trip exactly") {
  ScratchDir scratch;
  const Config config = export_config();
  const std::string dir = write_model_checkpoint(scratch / "ckpt", config);
  const Checkpoint c = Checkpoint::open(dir);
  const std::string out = scratch / "hf";
  const HfExportResult result = export_hf(c, out);
  CHECK(result.tensors == 28);
  CHECK(result.parameters == config::parameter_count(config) - (64 - 50) * 16);
  CHECK(dir_entries(out) == std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"});

  // Every tensor bitwise, in Hugging Face order, wte cut to vocab_size rows.
  const model::StFile file = model::read_safetensors(result.safetensors_path);
  const auto& tensors = file.tensors;
  const auto shapes = hf_parameter_shapes(config);
  REQUIRE(tensors.size() == shapes.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(tensors[i].name);
    CHECK(tensors[i].name == shapes[i].first);
    auto want = weight_values(shapes[i].first, shapes[i].second);
    Shape want_shape = shapes[i].second;
    if (shapes[i].first == "wte.weight") {
      want_shape[0] = 50;
      want.resize(50 * 16);
    }
    CHECK(tensors[i].shape == want_shape);
    CHECK(bitwise_equal(tensors[i].as_f32(), want));
  }
  CHECK(file.metadata.at("troupe_step") == "7");

  // The header is 8-byte aligned JSON with the metadata.
  const std::string bytes = file_bytes(result.safetensors_path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["format"] == "pt");
  CHECK(header["__metadata__"]["troupe_step"] == "7");
  CHECK(header["wte.weight"]["dtype"] == "F32");

  const auto j = nlohmann::json::parse(file_bytes(result.config_path));
  CHECK(j["architectures"] == nlohmann::json::array({"GPT2LMHeadModel"}));
  CHECK(j["model_type"] == "gpt2");
  CHECK(j["n_layer"] == 2);
  CHECK(j["n_head"] == 2);
  CHECK(j["n_embd"] == 16);
  CHECK(j["n_inner"] == 48);
  CHECK(j["vocab_size"] == 50);
  CHECK(j["n_positions"] == 16);
  CHECK(j["layer_norm_epsilon"].get<double>() == doctest::Approx(1e-5));
  CHECK(j["activation_function"] == "gelu_new");
  CHECK(j["tie_word_embeddings"] == true);

  // With the "transformer." prefix, only the names change.
  const auto prefixed = export_hf(c, scratch / "hf_prefixed", {.transformer_prefix = true});
  const model::StFile pfile = model::read_safetensors(prefixed.safetensors_path);
  CHECK(pfile.tensors.front().name == "transformer.wte.weight");
  CHECK(bitwise_equal(pfile.tensors.back().as_f32(), tensors.back().as_f32()));
}

TEST_CASE("export refuses a checkpoint that is not the config's GPT-2") {
  ScratchDir scratch;
  const Config config = export_config();
  SUBCASE("missing parameter") {
    const Checkpoint c = Checkpoint::open(write_model_checkpoint(scratch / "a", config, "h.1.ln_2.bias"));
    CHECK_THROWS_WITH_AS(export_hf(c, scratch / "out"),
                         doctest::Contains("GPT-2 parameter h.1.ln_2.bias (param) is missing"),
                         CheckpointError);
  }
  SUBCASE("unknown parameter") {
    const Checkpoint c = Checkpoint::open(write_model_checkpoint(scratch / "b", config, "", "h.9.extra"));
    CHECK_THROWS_WITH_AS(export_hf(c, scratch / "out"),
                         doctest::Contains("parameter h.9.extra is not part of GPT-2"),
                         CheckpointError);
  }
  SUBCASE("shape does not match the config") {
    Config other = config;
    other.mutable_model()->set_ffn_width(32);
    // Weights of a 48-wide MLP under a manifest that claims 32.
    auto commit = CheckpointCommit::begin(scratch / "c", 1);
    CheckpointManifest m;
    set_manifest_config(m, other);
    m.set_step(1);
    ShardWriter w(commit.partial_dir(), "all.shard");
    for (const auto& [name, shape] : hf_parameter_shapes(config))
      w.add(PieceSpec::whole(name, TensorPiece::PARAM, shape), weight_values(name, shape));
    *m.add_shard() = w.finish();
    const Checkpoint c = Checkpoint::open(commit.commit(m, 0));
    CHECK_THROWS_WITH_AS(export_hf(c, scratch / "out"),
                         doctest::Contains("h.0.mlp.c_fc.weight (param) has shape [16, 48], the "
                                           "config implies [16, 32]"),
                         CheckpointError);
  }
  CHECK_FALSE(std::filesystem::exists(scratch / "out"));
}

TEST_CASE("transformers loads the export and reproduces the reference logits") {
  ScratchDir scratch;
  const Config config = export_config();
  const Checkpoint c = Checkpoint::open(write_model_checkpoint(scratch / "ckpt", config));
  const std::string out = scratch / "hf";
  export_hf(c, out);

  // Reference logits from the checkpoint's (unpadded) weights.
  std::map<std::string, std::vector<float>> weights;
  for (const auto& [name, shape] : hf_parameter_shapes(config))
    weights[name] = c.read(name, TensorPiece::PARAM);
  const std::vector<int> tokens = {49, 0, 7, 13, 7, 42, 1, 30, 30, 5, 11};
  const Gpt2Dims dims{2, 2, 16, 48, 50, 1e-5};
  const auto logits = gpt2_reference_logits(
      dims, [&](const std::string& n) -> const std::vector<float>& { return weights.at(n); },
      tokens);
  nlohmann::json expected;
  expected["tokens"] = tokens;
  for (size_t t = 0; t < tokens.size(); ++t)
    expected["logits"].push_back(std::vector<double>(logits.begin() + long(t * 50),
                                                     logits.begin() + long((t + 1) * 50)));
  std::ofstream(scratch / "expected.json") << expected.dump();
  // The reference itself is not degenerate: logits vary across tokens and positions.
  CHECK(std::abs(logits[0] - logits[50]) > 1e-3);

  std::string output;
  const int status = run_python_check(out, scratch / "expected.json", output);
  if (status == 77 || status == 127) {
    MESSAGE("SKIPPED: transformers check (python3 with transformers, torch and safetensors "
            "not available): "
            << output);
    return;
  }
  INFO(output);
  CHECK(status == 0);
  CHECK(output.find("\nOK\n") != std::string::npos);
}

namespace {

// A Llama's checkpoint of `config` (one shard, weights of test_value) exported in
// shards of at most `shard_bytes`, the C++ forward (the training stage, whole model,
// CPU) over the export read back, and ckpt_hf_check.py's transformers forward on the
// export against those logits (skipped without transformers). Returns the export.
// Tolerance, fixed before the first run: both forwards are fp32 over the same
// weights and differ only in the order of their sums (GEMM blocking, RMSNorm and
// softmax reductions), about 1e-6 relative on logits of size ~1 here: 1e-4, as the
// GPT-2 check.
std::string check_llama_export(const ScratchDir& scratch, const Config& config, uint64_t shard_bytes) {
  auto commit = CheckpointCommit::begin(scratch / "ckpt", 3);
  CheckpointManifest manifest;
  set_manifest_config(manifest, config);
  manifest.set_step(3);
  ShardWriter w(commit.partial_dir(), "all.shard");
  for (const auto& [name, shape] : hf_parameter_shapes(config)) {
    std::vector<float> v(size_t(shape_elements(shape)));
    const bool norm = name.ends_with("norm.weight");
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = test_value(name, TensorPiece::PARAM, int64_t(i));
      v[i] = norm ? 1.0f + 0.1f * r : 0.3f * r;
    }
    w.add(PieceSpec::whole(name, TensorPiece::PARAM, shape), v);
  }
  *manifest.add_shard() = w.finish();
  const Checkpoint c = Checkpoint::open(commit.commit(manifest, 0));
  const std::string out = scratch / "hf";
  const auto result = export_hf(c, out, {.max_shard_bytes = shard_bytes});
  CHECK(result.weight_files.size() > 1);

  const std::vector<int> tokens = {49, 0, 7, 13, 7, 42, 1, 30, 30, 5, 11};
  const int T = int(tokens.size());
  kernels::cpu::CpuDevice device(1);
  model::GptStage stage(config, model::StageRange::whole(config), device, 1, {1, T});
  std::vector<float> host(size_t(stage.param_count()));
  HfModel::open(out, config).read_into(stage.registry(), host.data());
  device.copy_from_host(stage.params(), host.data(), host.size() * sizeof(float));
  data::Microbatch mb;
  mb.batch = 1;
  mb.seq = T;
  mb.tokens.assign(tokens.begin(), tokens.end());
  mb.targets.assign(tokens.begin() + 1, tokens.end());
  mb.targets.push_back(0);
  for (int t = 0; t < T; ++t) mb.positions.push_back(t);
  mb.segments.assign(size_t(T), 0);
  mb.loss_mask.assign(size_t(T), 1.0f);
  mb.loss_tokens = mb.global_loss_tokens = T;
  stage.forward(0, mb);
  const int64_t padded = config::padded_vocab(config);
  std::vector<float> logits(size_t(T * padded));
  device.copy_to_host(logits.data(), stage.logits(0), logits.size() * sizeof(float));
  nlohmann::json expected;
  expected["tokens"] = tokens;
  for (int t = 0; t < T; ++t)
    expected["logits"].push_back(std::vector<double>(logits.begin() + t * padded, logits.begin() + t * padded + 50));
  std::ofstream(scratch / "expected.json") << expected.dump();
  CHECK(std::abs(logits[0] - logits[size_t(padded)]) > 1e-3);

  std::string output;
  const int status = run_python_check(out, scratch / "expected.json", output);
  if (status == 77 || status == 127) {
    MESSAGE("SKIPPED: transformers check (python3 with transformers, torch and safetensors "
            "not available): "
            << output);
    return out;
  }
  INFO(output);
  CHECK(status == 0);
  CHECK(output.find("model: LlamaForCausalLM") != std::string::npos);
  CHECK(output.find("\nOK\n") != std::string::npos);
  return out;
}

Config export_llama_config() {
  Config config;
  auto* m = config.mutable_model();
  m->set_architecture(ModelConfig::LLAMA);
  m->set_layers(2);
  m->set_heads(4);
  m->set_kv_heads(2);
  m->set_width(32);
  m->set_ffn_width(48);
  m->set_vocab_size(50);
  m->set_max_positions(16);
  m->set_tied_embeddings(false);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000);
  return config;
}

}  // namespace

TEST_CASE("transformers loads a sharded Llama export and reproduces the C++ forward's logits") {
  ScratchDir scratch;
  check_llama_export(scratch, export_llama_config(), 16000);
}

TEST_CASE("a Llama whose head_dim is not width / heads exports it, and transformers reproduces its logits") {
  // width 64, 4 heads of 24 (not 64 / 4 = 16) sharing 2 kv heads: q_proj [96, 64],
  // k_proj and v_proj [48, 64], o_proj [64, 96].
  ScratchDir scratch;
  Config config = export_llama_config();
  config.mutable_model()->set_width(64);
  config.mutable_model()->set_head_dim(24);
  const std::string out = check_llama_export(scratch, config, 40000);
  const auto j = nlohmann::json::parse(file_bytes(out + "/config.json"));
  CHECK(j["head_dim"] == 24);
  CHECK(j["hidden_size"] == 64);
  CHECK(j["num_attention_heads"] == 4);
  const auto index = nlohmann::json::parse(file_bytes(out + "/model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 4 * config::parameter_count(config) - 4 * (64 - 50) * 64 * 2);
  // The config.json reads back as the same model (import-config's reader), head_dim kept.
  const ModelConfig back = config::model_from_hf_config(file_bytes(out + "/config.json"), "config.json");
  CHECK(back.head_dim() == 24);
  CHECK(ckpt::hf_config_mismatches(back, config.model()).empty());
  Config other = config;
  other.mutable_model()->set_head_dim(16);
  CHECK(ckpt::hf_config_mismatches(back, other.model()) ==
        std::vector<std::string>{"model.head_dim: config.json head_dim = 24, the run has 16"});
}
