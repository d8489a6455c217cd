// training.init_from's reading half (ckpt/hf_import.h) against the export
// (ckpt/hf_export.h): a checkpoint of a GPT-2 and of a Llama exported as a Hugging
// Face directory reads back, into a different (pipeline, tensor) layout, bitwise the
// exported values by name and slice, padding rows zero; sharded, BF16 and F16 files
// read; every malformed directory is one error naming the tensor and the file.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/safetensors_view.h"
#include "config/derived.h"
#include "config/hf_config.h"
#include "model/param_registry.h"
#include "model/safetensors.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

// doctest's matcher for a message built at run time.
doctest::Contains contains(const std::string& s) { return doctest::Contains(doctest::String(s.c_str())); }

Config gpt2_config() {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(2);
  m->set_heads(2);
  m->set_width(16);
  m->set_ffn_width(48);
  m->set_vocab_size(50);  // padded to 64 rows, 128 under TP2
  m->set_max_positions(16);
  return c;
}

Config llama_config(bool tied = false) {
  Config c = gpt2_config();
  auto* m = c.mutable_model();
  m->set_architecture(ModelConfig::LLAMA);
  m->set_heads(4);
  m->set_kv_heads(2);
  m->set_width(32);
  m->set_tied_embeddings(tied);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(50000);
  return c;
}

// Distinct values per tensor and element; the padding rows hold garbage on purpose.
std::vector<float> weight_values(const std::string& name, const Shape& shape) {
  std::vector<float> v(size_t(shape_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.2f * test_value(name, TensorPiece::PARAM, int64_t(i));
  return v;
}

// A one-shard checkpoint of `config`'s whole model (step 5).
std::string write_checkpoint(const std::string& root, const Config& config) {
  auto commit = CheckpointCommit::begin(root, 5);
  CheckpointManifest m;
  set_manifest_config(m, config);
  m.set_step(5);
  ShardWriter w(commit.partial_dir(), "all.shard");
  for (const auto& [name, shape] : hf_parameter_shapes(config))
    w.add(PieceSpec::whole(name, TensorPiece::PARAM, shape), weight_values(name, shape));
  *m.add_shard() = w.finish();
  return commit.commit(m, 0);
}

Config with_layout(Config c, int pp, int tp) {
  c.mutable_parallel()->set_pipeline(pp);
  c.mutable_parallel()->set_tensor(tp);
  return c;
}

// Every rank of `run`'s (pp, tp) layout reads its registry from `hf`; each entry must
// equal, bitwise, its box of `global` (name -> the exported unpadded tensor), and the
// vocabulary padding rows zero.
void check_layout_reads(const HfModel& hf, const Config& run,
                        const std::map<std::string, std::vector<float>>& global) {
  const int pp = run.parallel().pipeline(), tp = run.parallel().tensor();
  int64_t checked = 0;
  for (int k = 0; k < pp; ++k)
    for (int t = 0; t < tp; ++t) {
      const model::ParameterRegistry reg(run, model::StageRange::pipeline(run, k, pp), {t, tp});
      std::vector<float> host(size_t(reg.total()), std::nanf(""));
      hf.read_into(reg, host.data());
      for (const auto& e : reg.tensors()) {
        CAPTURE(e.name);
        CAPTURE(k);
        CAPTURE(t);
        const auto& g = global.at(e.name);
        const int64_t rows = e.shape[0], cols = e.shape.size() == 2 ? e.shape[1] : 1;
        const int64_t gcols = e.shape.size() == 2 ? e.global_shape[1] : 1;
        const int64_t c0 = e.shape.size() == 2 ? e.slice_start[1] : 0;
        std::vector<float> want(size_t(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t gr = e.slice_start[0] + r;
            want[size_t(r * cols + c)] = gr < e.valid_rows ? g[size_t(gr * gcols + c0 + c)] : 0.0f;
          }
        const std::vector<float> got(host.begin() + e.offset, host.begin() + e.offset + e.numel);
        CHECK(bitwise_equal(got, want));
        ++checked;
      }
    }
  CHECK(checked > 0);
}

std::map<std::string, std::vector<float>> exported_tensors(const std::string& dir, const HfExportResult& r) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& file : r.weight_files)
    for (const auto& t : model::read_safetensors(dir + "/" + file).tensors) {
      const std::string name = t.name.starts_with("transformer.") ? t.name.substr(12) : t.name;
      out[name] = t.as_f32();
    }
  return out;
}

// A safetensors file of raw tensors in any dtype (the tests' own writer).
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};
void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  for (const auto& t : tensors) out << t.bytes;
}

// An HF directory for `config` with the tensors of `values` in `dtype` (F32 as is,
// BF16 the high halves of the fp32 bits), named as the registry names them.
void write_hf_dir(const std::string& dir, const Config& config, const std::map<std::string, std::vector<float>>& values,
                  const std::string& dtype = "F32", const std::string& skip = "",
                  const std::vector<RawTensor>& extra = {}) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << hf_config_json(config);
  const model::ParameterRegistry whole(config, model::StageRange::whole(config));
  std::vector<RawTensor> tensors;
  for (const auto& t : whole.tensors()) {
    if (t.name == skip) continue;
    Shape shape = t.global_shape;
    shape[0] = t.valid_rows;
    const auto& v = values.at(t.name);
    std::string bytes;
    if (dtype == "F32") {
      bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    } else {
      for (const float f : v) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const uint16_t half = uint16_t(bits >> 16);
        bytes.append(reinterpret_cast<const char*>(&half), 2);
      }
    }
    tensors.push_back({t.name, dtype, shape, bytes});
  }
  for (const auto& e : extra) tensors.push_back(e);
  write_raw_safetensors(dir + "/model.safetensors", tensors);
}

std::map<std::string, std::vector<float>> model_values(const Config& config) {
  std::map<std::string, std::vector<float>> out;
  const model::ParameterRegistry whole(config, model::StageRange::whole(config));
  for (const auto& t : whole.tensors()) {
    Shape s = t.global_shape;
    s[0] = t.valid_rows;
    out[t.name] = weight_values(t.name, s);
  }
  return out;
}

}  // namespace

TEST_CASE("an exported GPT-2 reads back bitwise into another layout (PP2 x TP2), padding rows zero") {
  ScratchDir scratch;
  const Config trained = gpt2_config();  // written as one whole-model shard
  const Checkpoint ck = Checkpoint::open(write_checkpoint(scratch / "ckpt", trained));
  SUBCASE("GPT2Model names") {
    const auto r = export_hf(ck, scratch / "hf");
    const auto global = exported_tensors(scratch / "hf", r);
    CHECK(global.at("wte.weight").size() == 50 * 16);
    const HfModel hf = HfModel::open(scratch / "hf", with_layout(trained, 2, 2));
    CHECK(hf.files() == std::vector<std::string>{"model.safetensors"});
    check_layout_reads(hf, with_layout(trained, 2, 2), global);
    check_layout_reads(hf, with_layout(trained, 1, 1), global);
    // The exported values are the checkpoint's, row for row.
    const auto wte = ck.read("wte.weight", TensorPiece::PARAM);
    CHECK(bitwise_equal(global.at("wte.weight"), std::vector<float>(wte.begin(), wte.begin() + 50 * 16)));
  }
  SUBCASE("transformer. prefix") {
    const auto r = export_hf(ck, scratch / "hf", {.transformer_prefix = true});
    check_layout_reads(HfModel::open(scratch / "hf", with_layout(trained, 2, 1)), with_layout(trained, 2, 1),
                       exported_tensors(scratch / "hf", r));
  }
}

TEST_CASE("an exported Llama reads back bitwise into other layouts (TP2, PP2 x TP4 with replicated kv heads)") {
  ScratchDir scratch;
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const Config trained = llama_config(tied);
    const std::string name = tied ? "tied" : "untied";
    const Checkpoint ck = Checkpoint::open(write_checkpoint(scratch / ("ckpt-" + name), trained));
    const std::string out = scratch / ("hf-" + name);
    const auto r = export_hf(ck, out);
    const auto global = exported_tensors(out, r);
    CHECK(global.count("lm_head.weight") == (tied ? 0 : 1));
    CHECK(global.at("model.embed_tokens.weight").size() == 50 * 32);
    for (const auto& [pp, tp] : std::vector<std::pair<int, int>>{{1, 2}, {2, 4}, {2, 1}}) {
      CAPTURE(pp);
      CAPTURE(tp);
      const Config run = with_layout(trained, pp, tp);
      check_layout_reads(HfModel::open(out, run), run, global);
    }
  }
}

TEST_CASE("Llama export: config.json and generation_config.json describe the model") {
  ScratchDir scratch;
  Config c = llama_config();
  auto* rs = c.mutable_model()->mutable_rope_scaling();
  rs->set_factor(8);
  rs->set_low_freq_factor(1);
  rs->set_high_freq_factor(4);
  rs->set_original_max_positions(8);
  const auto r = export_hf(Checkpoint::open(write_checkpoint(scratch / "ckpt", c)), scratch / "hf");
  CHECK(dir_entries(scratch / "hf") ==
        std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors"});
  const auto j = nlohmann::json::parse(file_bytes(scratch / "hf/config.json"));
  CHECK(j["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(j["model_type"] == "llama");
  CHECK(j["hidden_size"] == 32);
  CHECK(j["intermediate_size"] == 48);
  CHECK(j["num_hidden_layers"] == 2);
  CHECK(j["num_attention_heads"] == 4);
  CHECK(j["num_key_value_heads"] == 2);
  CHECK(j["head_dim"] == 8);
  CHECK(j["max_position_embeddings"] == 16);
  CHECK(j["vocab_size"] == 50);
  CHECK(j["rms_norm_eps"].get<double>() == 1e-5);
  CHECK(j["rope_theta"].get<double>() == 50000);
  CHECK(j["rope_scaling"]["rope_type"] == "llama3");
  CHECK(j["rope_scaling"]["factor"].get<double>() == 8);
  CHECK(j["rope_scaling"]["original_max_position_embeddings"] == 8);
  CHECK(j["tie_word_embeddings"] == false);
  CHECK(j["attention_bias"] == false);
  CHECK(j["mlp_bias"] == false);
  CHECK(j["hidden_act"] == "silu");
  CHECK(j["torch_dtype"] == "float32");
  // The byte tokenizer's EOD (256) is outside this 50-token vocabulary: the last id.
  CHECK(j["eos_token_id"] == 49);
  const auto g = nlohmann::json::parse(file_bytes(scratch / "hf/generation_config.json"));
  CHECK(g["eos_token_id"] == 49);
  CHECK(g["bos_token_id"] == 49);
  // The exported config.json reads back as the same model (import-config's reader).
  const HfModel hf = HfModel::open(scratch / "hf", c);
  CHECK(hf.read("model.norm.weight").size() == 32);
  Config data_eod = c;
  data_eod.mutable_data()->set_tokenizer(DataConfig::NONE);
  data_eod.mutable_data()->set_eod_id(2);
  CHECK(hf_eod_id(data_eod) == 2);
}

TEST_CASE("export shards past --max-shard-size with an index, and the shards read back as one") {
  ScratchDir scratch;
  const Config c = llama_config();
  const Checkpoint ck = Checkpoint::open(write_checkpoint(scratch / "ckpt", c));
  const auto whole = export_hf(ck, scratch / "one");
  // 8 KB per file: the 6.4 KB embedding alone, then blocks of layers.
  const auto sharded = export_hf(ck, scratch / "many", {.max_shard_bytes = 8000});
  REQUIRE(sharded.weight_files.size() > 2);
  CHECK(sharded.safetensors_path.empty());
  const size_t n = sharded.weight_files.size();
  char first[64];
  std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", n);
  CHECK(sharded.weight_files.front() == first);
  const auto index = nlohmann::json::parse(file_bytes(scratch / "many/model.safetensors.index.json"));
  uint64_t total = 0, biggest = 0;
  std::set<std::string> named;
  for (const auto& file : sharded.weight_files) {
    const auto st = model::read_safetensors(scratch / ("many/" + file));
    uint64_t bytes = 0;
    for (const auto& t : st.tensors) {
      CHECK(index["weight_map"][t.name] == file);
      named.insert(t.name);
      bytes += t.bytes.size();
    }
    // Over the limit only when one tensor alone is.
    if (st.tensors.size() > 1) CHECK(bytes <= 8000);
    biggest = std::max(biggest, bytes);
    total += bytes;
  }
  CHECK(index["metadata"]["total_size"] == total);
  CHECK(named.size() == index["weight_map"].size());
  CHECK(named.size() == size_t(whole.tensors));
  // Read through the index: bitwise the single-file export, in a TP2 layout.
  const Config run = with_layout(c, 1, 2);
  const HfModel hf = HfModel::open(scratch / "many", run);
  CHECK(hf.files() == sharded.weight_files);
  check_layout_reads(hf, run, exported_tensors(scratch / "one", whole));

  SUBCASE("an index that places a tensor in the wrong shard") {
    auto bad = index;
    bad["weight_map"]["model.norm.weight"] = sharded.weight_files.front();
    std::ofstream(scratch / "many/model.safetensors.index.json") << bad.dump();
    CHECK_THROWS_WITH_AS(HfModel::open(scratch / "many", run),
                         contains("tensor model.norm.weight is here, but model.safetensors.index.json "
                                           "places it in " + sharded.weight_files.front()),
                         CheckpointError);
  }
  SUBCASE("an index naming a file outside the directory") {
    auto bad = index;
    bad["weight_map"]["model.norm.weight"] = "../x.safetensors";
    std::ofstream(scratch / "many/model.safetensors.index.json") << bad.dump();
    CHECK_THROWS_WITH_AS(HfModel::open(scratch / "many", run),
                         contains("weight_map.model.norm.weight: \"../x.safetensors\" is not a file name"),
                         CheckpointError);
  }
}

TEST_CASE("BF16 and F16 weights are read as fp32") {
  SUBCASE("half and bfloat16 conversions are exact") {
    CHECK(half_to_float(0x3c00) == 1.0f);
    CHECK(half_to_float(0xc000) == -2.0f);
    CHECK(half_to_float(0x7bff) == 65504.0f);
    CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));      // smallest subnormal
    CHECK(half_to_float(0x03ff) == 1023 * std::ldexp(1.0f, -24));  // largest subnormal
    CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));      // smallest normal
    CHECK(half_to_float(0x3555) == 0.25f * (1 + 0x155 / 1024.0f));  // exponent 13, mantissa 0x155
    CHECK(std::isinf(half_to_float(0x7c00)));
    CHECK(std::isnan(half_to_float(0x7e00)));
    CHECK(std::signbit(half_to_float(0x8000)));
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(bf16_to_float(0xc0a0) == -5.0f);
  }
  SUBCASE("a BF16 model reads as the fp32 values of its bfloat16 bits, in a TP2 layout") {
    ScratchDir scratch;
    const Config c = llama_config();
    const auto values = model_values(c);
    write_hf_dir(scratch / "hf", c, values, "BF16");
    std::map<std::string, std::vector<float>> want;
    for (const auto& [name, v] : values)
      for (const float f : v) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        want[name].push_back(bf16_to_float(uint16_t(bits >> 16)));
      }
    // Truncation changed the values (the check is not F32 in disguise).
    CHECK_FALSE(bitwise_equal(want.at("model.norm.weight"), values.at("model.norm.weight")));
    const Config run = with_layout(c, 2, 2);
    check_layout_reads(HfModel::open(scratch / "hf", run), run, want);
  }
  SUBCASE("an F16 tensor") {
    ScratchDir scratch;
    const std::string path = scratch / "f16.safetensors";
    const uint16_t halves[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    write_raw_safetensors(path, {{"x", "F16", {4}, std::string(reinterpret_cast<const char*>(halves), 8)}});
    const auto view = SafetensorsView::open(path);
    float out[4];
    view.read_f32(*view.find("x"), 0, 4, out);
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.0f);
    CHECK(out[2] == std::ldexp(1.0f, -24));
    CHECK(out[3] == 65504.0f);
  }
}

TEST_CASE("init_from refuses a directory that is not the run's model, naming what and where") {
  ScratchDir scratch;
  const Config c = llama_config();
  const auto values = model_values(c);
  const std::string dir = scratch / "hf";
  SUBCASE("config.json differs: every mismatching field, both values") {
    Config other = c;
    other.mutable_model()->set_layers(3);
    other.mutable_model()->set_kv_heads(4);
    other.mutable_model()->set_rope_theta(10000);
    write_hf_dir(dir, c, values);
    try {
      HfModel::open(dir, other);
      FAIL("no error");
    } catch (const CheckpointError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(dir + "/config.json: the Hugging Face model does not match the run's model section") == 0);
      CHECK(msg.find("model.layers: config.json num_hidden_layers = 2, the run has 3") != std::string::npos);
      CHECK(msg.find("model.kv_heads: config.json num_key_value_heads = 2, the run has 4") != std::string::npos);
      CHECK(msg.find("model.rope_theta: config.json rope_theta = 50000, the run has 10000") != std::string::npos);
    }
    Config gpt2 = gpt2_config();
    CHECK_THROWS_WITH_AS(HfModel::open(dir, gpt2), contains("model.architecture: config.json model_type = LLAMA, the run has GPT2"),
                         CheckpointError);
  }
  SUBCASE("a missing tensor") {
    write_hf_dir(dir, c, values, "F32", "model.layers.1.mlp.up_proj.weight");
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c),
                         contains(dir + ": the run's Llama needs model.layers.1.mlp.up_proj.weight [48, 32], "
                                                 "which is in none of the weight files (model.safetensors)"),
                         CheckpointError);
  }
  SUBCASE("a wrong shape") {
    write_hf_dir(dir, c, values, "F32", "model.norm.weight", {{"model.norm.weight", "F32", {16}, std::string(64, '\0')}});
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c),
                         contains(dir + "/model.safetensors: tensor model.norm.weight has shape [16], the "
                                                 "run's model needs [32]"),
                         CheckpointError);
  }
  SUBCASE("an extra tensor") {
    write_hf_dir(dir, c, values, "F32", "", {{"model.layers.2.input_layernorm.weight", "F32", {32}, std::string(128, '\0')}});
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c),
                         contains(dir + "/model.safetensors: tensor model.layers.2.input_layernorm.weight is "
                                                 "not a parameter of the run's Llama"),
                         CheckpointError);
  }
  SUBCASE("a known buffer is skipped") {
    write_hf_dir(dir, c, values, "F32", "", {{"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}, std::string(16, '\0')}});
    CHECK_NOTHROW(HfModel::open(dir, c));
  }
  SUBCASE("an unsupported dtype") {
    write_hf_dir(dir, c, values, "F32", "model.norm.weight", {{"model.norm.weight", "F64", {32}, std::string(256, '\0')}});
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c),
                         contains(dir + "/model.safetensors: tensor model.norm.weight: dtype F64 is not "
                                                 "supported (F32, BF16 and F16 are read as fp32)"),
                         CheckpointError);
  }
  SUBCASE("a tied model with its lm_head spelled out: the same tensor, or refused") {
    const Config tied = llama_config(true);
    const auto tv = model_values(tied);
    const auto& emb = tv.at("model.embed_tokens.weight");
    std::string same(reinterpret_cast<const char*>(emb.data()), emb.size() * 4);
    write_hf_dir(dir, tied, tv, "F32", "", {{"lm_head.weight", "F32", {50, 32}, same}});
    CHECK_NOTHROW(HfModel::open(dir, tied));
    std::string other = same;
    other[5] ^= 1;
    write_hf_dir(dir, tied, tv, "F32", "", {{"lm_head.weight", "F32", {50, 32}, other}});
    CHECK_THROWS_WITH_AS(HfModel::open(dir, tied),
                         contains("lm_head.weight differs from model.embed_tokens.weight, but the run's head "
                                           "is tied"),
                         CheckpointError);
  }
  SUBCASE("no directory, no config.json, no weights") {
    CHECK_THROWS_WITH_AS(HfModel::open(scratch / "nothing", c), contains("nothing: not a directory"),
                         CheckpointError);
    std::filesystem::create_directories(dir);
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c), contains(dir + "/config.json: missing"), CheckpointError);
    std::ofstream(dir + "/config.json") << hf_config_json(c);
    CHECK_THROWS_WITH_AS(HfModel::open(dir, c),
                         contains(dir + ": no model.safetensors and no model.safetensors.index.json"),
                         CheckpointError);
  }
}

TEST_CASE("export writes a new directory whole, or nothing") {
  ScratchDir scratch;
  const Config c = llama_config();
  const Checkpoint ck = Checkpoint::open(write_checkpoint(scratch / "ckpt", c));
  std::filesystem::create_directories(scratch / "busy");
  std::ofstream(scratch / "busy/notes.txt") << "mine";
  CHECK_THROWS_WITH_AS(export_hf(ck, scratch / "busy"), contains("busy: exists and is not empty"),
                       CheckpointError);
  CHECK(dir_entries(scratch / "busy") == std::vector<std::string>{"notes.txt"});
  // An empty directory is filled; no staging directory is left beside it.
  std::filesystem::create_directories(scratch / "empty");
  export_hf(ck, scratch / "empty");
  CHECK(dir_entries(scratch / "empty").size() == 3);
  for (const auto& e : dir_entries(scratch.path())) CHECK(e.find(".partial") == std::string::npos);
  CHECK_THROWS_WITH_AS(export_hf(ck, scratch / "out", {.transformer_prefix = true}),
                       contains("--transformer-prefix is for GPT-2"), CheckpointError);
  CHECK_FALSE(std::filesystem::exists(scratch / "out"));
}

TEST_CASE("directories saved by transformers' own save_pretrained read whole (fp32 GPT-2; sharded BF16 Llama)") {
  // Tolerance: each tensor's sum in double of the values read against torch's float64
  // sum of the same values: only the order of the additions differs (< 1e-12 here).
  ScratchDir scratch;
  const std::string log = scratch / "save.log";
  const std::string cmd = "python3 " + std::string(TROUPE_SOURCE_DIR) + "/tools/hf_save_tiny_models.py " +
                          scratch.path() + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  const int code = status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
  if (code == 77 || code == 127) {
    MESSAGE("SKIPPED: transformers-saved directories (python3 with transformers and torch not available): "
            << file_bytes(log));
    return;
  }
  INFO(file_bytes(log));
  REQUIRE(code == 0);
  for (const std::string name : {"gpt2", "llama-bf16"}) {
    CAPTURE(name);
    const std::string dir = scratch / name;
    Config c;
    *c.mutable_model() = config::model_from_hf_config(file_bytes(dir + "/config.json"), dir + "/config.json");
    if (name == "llama-bf16") CHECK(c.model().rope_theta() == 50000);  // from transformers 5's rope_parameters
    const auto expected = nlohmann::json::parse(file_bytes(dir + "/expected.json"));
    for (const int tp : {1, 2}) {
      c.mutable_parallel()->set_tensor(tp);
      const HfModel hf = HfModel::open(dir, c);
      if (name == "llama-bf16") CHECK(hf.files().size() == 4);
      const model::ParameterRegistry whole(c, model::StageRange::whole(c));
      std::vector<float> host(size_t(whole.total()));
      hf.read_into(whole, host.data());
      for (const auto& t : whole.tensors()) {
        CAPTURE(t.name);
        const std::string key = name == "gpt2" ? "transformer." + t.name : t.name;
        REQUIRE(expected.contains(key));
        double sum = 0;
        for (int64_t i = 0; i < t.numel; ++i) sum += host[size_t(t.offset + i)];
        const double want = expected[key].get<double>();
        CHECK(std::fabs(sum - want) <= 1e-12 * (1 + std::fabs(want)));
      }
    }
  }
}
