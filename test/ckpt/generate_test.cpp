// supervisor generate's decoder (model/decoder.h): with its KV cache, the logits of
// every position equal the training stage's forward over the whole sequence; sampling
// is deterministic for a seed; the greedy continuation equals transformers' token for
// token (tools/generate_hf_check.py; skipped without transformers); a text prompt is
// encoded as HF tokenizers' fixture IDs (BOS first) and continued as those IDs are
// (engine/generate_source.h).
//
// Tolerance, fixed before the first run: the decoder accumulates in double, the
// training stage in fp32 with its own order of sums; logits of size ~1 agree to
// about 1e-6: max |decoder - stage| <= 1e-4.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/commit.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "config/derived.h"
#include "data/error.h"
#include "engine/generate_source.h"
#include "kernels/cpu/cpu_device.h"
#include "model/decoder.h"
#include "model/device_decoder.h"
#include "model/gpt_stage.h"
#include "test/ckpt/ckpt_test_util.h"

using namespace troupe;
using namespace troupe::ckpt;
using namespace troupe::ckpt::testing;

namespace {

// head_dim (Llama only): model.head_dim, 0 for width / heads.
Config family(bool llama, int head_dim = 0) {
  Config c;
  auto* m = c.mutable_model();
  m->set_layers(2);
  m->set_width(32);
  m->set_ffn_width(48);
  m->set_vocab_size(50);
  m->set_max_positions(40);
  if (llama) {
    m->set_architecture(ModelConfig::LLAMA);
    m->set_heads(4);
    m->set_kv_heads(2);
    m->set_head_dim(head_dim);
    m->set_tied_embeddings(false);
    m->set_norm_eps(1e-5f);
    m->set_rope_theta(500);
    auto* rs = m->mutable_rope_scaling();  // scaled frequencies in play at these lengths
    rs->set_factor(4);
    rs->set_low_freq_factor(1);
    rs->set_high_freq_factor(4);
    rs->set_original_max_positions(16);
  } else {
    m->set_heads(2);
  }
  return c;
}

// An exported model of `c` with weights of GPT-2-like scale (norm scales near 1).
std::string export_model(const ScratchDir& scratch, const Config& c, const std::string& name) {
  auto commit = CheckpointCommit::begin(scratch / ("ckpt-" + name), 1);
  CheckpointManifest m;
  set_manifest_config(m, c);
  set_position(m, 1, c.batch().global_batch_size());  // a loadable checkpoint (generate opens it as a root)
  ShardWriter w(commit.partial_dir(), "all.shard");
  for (const auto& [tensor, shape] : hf_parameter_shapes(c)) {
    std::vector<float> v(size_t(shape_elements(shape)));
    const bool scale = tensor.ends_with("norm.weight") || tensor.ends_with("ln_1.weight") ||
                       tensor.ends_with("ln_2.weight") || tensor.ends_with("ln_f.weight");
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = test_value(tensor, TensorPiece::PARAM, int64_t(i));
      v[i] = scale ? 1.0f + 0.1f * r : 0.5f * r;
    }
    w.add(PieceSpec::whole(tensor, TensorPiece::PARAM, shape), v);
  }
  *m.add_shard() = w.finish();
  const std::string out = scratch / ("hf-" + name);
  export_hf(Checkpoint::open(commit.commit(m, 0)), out);
  return out;
}

std::vector<float> whole_params(const std::string& dir, const Config& c) {
  const model::ParameterRegistry reg(c, model::StageRange::whole(c));
  std::vector<float> p(size_t(reg.total()));
  HfModel::open(dir, c).read_into(reg, p.data());
  return p;
}

const std::vector<int32_t> kPrompt = {49, 0, 7, 13, 7, 42, 1, 30, 30, 5, 11, 3};

std::vector<int32_t> greedy(const Config& c, const std::vector<float>& params, int n) {
  model::Decoder d(c, params);
  std::vector<float> logits;
  for (const int32_t t : kPrompt) logits = d.step(t);
  std::vector<int32_t> out;
  for (int s = 0; s < n; ++s) {
    out.push_back(model::next_token(logits, {}, s));
    logits = d.step(out.back());
  }
  return out;
}

// The models both decoder cases run: GPT-2, a Llama, and a Llama of 4 heads of 12 over
// width 32 (model.head_dim; q_proj [48, 32]).
struct Family {
  const char* name;
  bool llama;
  int head_dim;
};
const Family kFamilies[] = {{"gpt2", false, 0}, {"llama", true, 0}, {"llama-head-dim", true, 12}};

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';  // (not ("," or "") + ...: GCC 12 warns -Wrestrict on that falsely)
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

TEST_CASE("the KV-cache decoder's logits equal the training forward at every position (GPT-2, Llama, head_dim)") {
  ScratchDir scratch;
  for (const Family& f : kFamilies) {
    CAPTURE(f.name);
    const Config c = family(f.llama, f.head_dim);
    const std::string dir = export_model(scratch, c, f.name);
    const auto params = whole_params(dir, c);
    const int T = int(kPrompt.size());
    kernels::cpu::CpuDevice device(1);
    model::GptStage stage(c, model::StageRange::whole(c), device, 1, {1, T});
    device.copy_from_host(stage.params(), params.data(), params.size() * sizeof(float));
    data::Microbatch mb;
    mb.batch = 1;
    mb.seq = T;
    mb.tokens.assign(kPrompt.begin(), kPrompt.end());
    mb.targets.assign(size_t(T), 0);
    for (int t = 0; t < T; ++t) mb.positions.push_back(t);
    mb.segments.assign(size_t(T), 0);
    mb.loss_mask.assign(size_t(T), 1.0f);
    mb.loss_tokens = mb.global_loss_tokens = T;
    stage.forward(0, mb);
    const int64_t padded = config::padded_vocab(c);
    std::vector<float> want(size_t(T * padded));
    device.copy_to_host(want.data(), stage.logits(0), want.size() * sizeof(float));
    model::Decoder d(c, params);
    double worst = 0, spread = 0;
    for (int t = 0; t < T; ++t) {
      const auto got = d.step(kPrompt[size_t(t)]);
      REQUIRE(got.size() == 50);
      for (int v = 0; v < 50; ++v) {
        worst = std::max(worst, double(std::fabs(got[size_t(v)] - want[size_t(t * padded + v)])));
        spread = std::max(spread, double(std::fabs(got[size_t(v)] - got[0])));
      }
    }
    MESSAGE("max |decoder - training forward| = " << worst << " (" << std::string(f.name) << ")");
    CHECK(worst <= 1e-4);
    CHECK(spread > 0.1);  // the logits are not degenerate
    CHECK_THROWS_WITH_AS(d.step(50), doctest::Contains("token id 50 is outside the vocabulary"),
                         std::invalid_argument);
  }
}

TEST_CASE("sampling is deterministic for a seed; top-k 1 and temperature 0 are greedy") {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[size_t(i)] = std::sin(0.7f * float(i)) * 2;
  const auto draw = [&](model::SamplingOptions o) {
    std::vector<int32_t> out;
    for (int s = 0; s < 64; ++s) out.push_back(model::next_token(logits, o, s));
    return out;
  };
  const auto a = draw({1.0, 0, 7}), b = draw({1.0, 0, 7}), other = draw({1.0, 0, 8});
  CHECK(a == b);
  CHECK(a != other);
  const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  for (const auto t : draw({1.0, 1, 7})) CHECK(t == best);
  for (const auto t : draw({0.0, 0, 7})) CHECK(t == best);
  // Top-k 3: only the three most likely ids ever appear, and more than one of them.
  std::vector<int> order(50);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return logits[size_t(x)] > logits[size_t(y)]; });
  std::set<int32_t> seen;
  for (const auto t : draw({1.0, 3, 7})) {
    seen.insert(t);
    CHECK((t == order[0] || t == order[1] || t == order[2]));
  }
  CHECK(seen.size() > 1);
}

TEST_CASE("greedy generation equals transformers' token for token (GPT-2, Llama with llama3 rope scaling, head_dim)") {
  ScratchDir scratch;
  for (const Family& f : kFamilies) {
    CAPTURE(f.name);
    const Config c = family(f.llama, f.head_dim);
    const std::string dir = export_model(scratch, c, f.name);
    const auto ids = greedy(c, whole_params(dir, c), 24);
    const std::string log = scratch / "generate_check.log";
    const std::string cmd = "python3 " + std::string(TROUPE_SOURCE_DIR) + "/tools/generate_hf_check.py " + dir +
                            " --prompt-ids " + join(kPrompt) + " --expected-ids " + join(ids) + " > " + log + " 2>&1";
    const int status = std::system(cmd.c_str());
    const std::string output = file_bytes(log);
    const int code = status == -1 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
    if (code == 77 || code == 127) {
      MESSAGE("SKIPPED: transformers greedy check (python3 with transformers and torch not available): " << output);
      continue;
    }
    INFO(output);
    CHECK(code == 0);
    CHECK(output.find("\nOK\n") != std::string::npos);
  }
}

namespace {

const std::string kTokenizers = std::string(TROUPE_SOURCE_DIR) + "/test/data/fixtures/hf/";

// The fixture case of `text` in extras_expected.json (tools/data_hf_tokenizer_reference.py).
nlohmann::json extras_case(const std::string& text) {
  std::ifstream in(kTokenizers + "extras_expected.json");
  const auto doc = nlohmann::json::parse(in);
  for (const auto& c : doc["cases"])
    if (c["text"] == text) return c;
  FAIL("no fixture case for " << text);
  return {};
}

// A Llama of the Llama-3-style fixture tokenizer's 901 IDs, its checkpoint naming that
// tokenizer.json as the run's (data.tokenizer HF_JSON), and its export with the file
// copied in as transformers would find it.
struct TextModel {
  Config config;
  std::string checkpoint_root, hf_dir;
};
TextModel text_model(const ScratchDir& scratch) {
  TextModel t;
  t.config = family(true);
  t.config.mutable_model()->set_vocab_size(901);
  t.config.mutable_model()->set_max_positions(64);
  t.config.mutable_data()->set_tokenizer(DataConfig::HF_JSON);
  t.config.mutable_data()->set_tokenizer_file(kTokenizers + "llama3_style.tokenizer.json");
  t.hf_dir = export_model(scratch, t.config, "text");
  t.checkpoint_root = scratch / "ckpt-text";
  std::filesystem::copy_file(kTokenizers + "llama3_style.tokenizer.json", t.hf_dir + "/tokenizer.json");
  return t;
}

}  // namespace

TEST_CASE("a text prompt: encoded as HF's tokenizer(text) (the file's BOS first), continued as the same IDs are, "
          "decoded as HF decodes; from a checkpoint's run tokenizer and from a directory's tokenizer.json") {
  ScratchDir scratch;
  const TextModel t = text_model(scratch);
  const std::string text = "Hello world";
  const auto fixture = extras_case(text);
  const auto hf_ids = fixture["ids_special"]["llama3_style"].get<std::vector<int32_t>>();
  REQUIRE(hf_ids.front() == 0);  // <|begin_of_text|>
  for (const std::string& dir : {t.checkpoint_root, t.hf_dir}) {
    CAPTURE(dir);
    const auto source = engine::open_generate_source(dir, "", nullptr);
    REQUIRE(source.tokenizer != nullptr);
    CHECK(source.tokenizer_from == (dir == t.hf_dir ? t.hf_dir + "/tokenizer.json"
                                                    : "the run's data.tokenizer_file " + kTokenizers +
                                                          "llama3_style.tokenizer.json"));
    std::vector<int32_t> ids;
    source.tokenizer->encode_with_special_tokens(text, ids);
    CHECK(ids == hf_ids);
    std::vector<int32_t> plain;
    source.tokenizer->encode(text, plain);
    CHECK(std::vector<int32_t>(hf_ids.begin() + 1, hf_ids.end()) == plain);
    // The ID path is greedy() of the tests above: the same continuation token for token.
    const auto from_text = model::continue_prompt(source.config, source.params, ids, 24, {}, {}, true);
    model::Decoder d(t.config, whole_params(t.hf_dir, t.config));
    std::vector<float> logits;
    for (const int32_t id : hf_ids) logits = d.step(id);
    std::vector<int32_t> from_ids;
    for (int s = 0; s < 24; ++s) {
      from_ids.push_back(model::next_token(logits, {}, s));
      logits = d.step(from_ids.back());
    }
    CHECK(from_text == from_ids);
    std::vector<int32_t> all = ids;
    all.insert(all.end(), from_text.begin(), from_text.end());
    const std::string decoded = source.tokenizer->decode(all);
    CHECK(decoded.rfind("<|begin_of_text|>Hello world", 0) == 0);
    CHECK(source.tokenizer->decode(all, true).rfind("Hello world", 0) == 0);
  }
  // Stops: the checkpoint's at its tokenizer's end of document (<|end_of_text|>, ID 1);
  // the directory's at its generation_config.json eos_token_id, as transformers.
  CHECK(engine::open_generate_source(t.checkpoint_root, "", nullptr).stop_ids == std::vector<int32_t>{1});
  CHECK(engine::open_generate_source(t.hf_dir, "", nullptr).stop_ids ==
        std::vector<int32_t>{int32_t(hf_eod_id(t.config))});
}

TEST_CASE("a model without a tokenizer says why; --tokenizer FILE supplies one; a bad one is refused, named") {
  ScratchDir scratch;
  const TextModel t = text_model(scratch);
  std::filesystem::remove(t.hf_dir + "/tokenizer.json");
  const auto bare = engine::open_generate_source(t.hf_dir, "", nullptr);
  CHECK(bare.tokenizer == nullptr);
  CHECK(bare.no_tokenizer == t.hf_dir + " has no tokenizer.json (nor GPT-2's vocab.json + merges.txt)");
  const auto given = engine::open_generate_source(t.hf_dir, kTokenizers + "llama3_seq.tokenizer.json", nullptr);
  REQUIRE(given.tokenizer != nullptr);
  std::vector<int32_t> ids;
  given.tokenizer->encode_with_special_tokens("Hello world", ids);
  CHECK(ids == extras_case("Hello world")["ids_special"]["llama3_seq"].get<std::vector<int32_t>>());
  CHECK_THROWS_WITH_AS(engine::open_generate_source(t.hf_dir, scratch / "missing.json", nullptr),
                       (scratch / "missing.json" +
                        ": cannot open the Hugging Face tokenizer (tokenizer.json): No such file or directory")
                           .c_str(),
                       data::DataError);

  // A checkpoint whose run tokenizer file has gone, and one of a dataset tokenized elsewhere.
  Config moved = t.config;
  moved.mutable_data()->set_tokenizer_file(scratch / "gone.json");
  const std::string moved_dir = export_model(scratch, moved, "moved");
  const auto gone = engine::open_generate_source(scratch / "ckpt-moved", "", nullptr);
  CHECK(gone.tokenizer == nullptr);
  CHECK(gone.no_tokenizer == "its tokenizer (the run's data.tokenizer_file " + scratch / "gone.json" +
                                 ") cannot be read: " + scratch / "gone.json" +
                                 ": cannot open the Hugging Face tokenizer (tokenizer.json): No such file or directory");
  Config none = t.config;
  none.mutable_data()->set_tokenizer(DataConfig::NONE);
  none.mutable_data()->set_eod_id(3);
  export_model(scratch, none, "none");
  const auto elsewhere = engine::open_generate_source(scratch / "ckpt-none", "", nullptr);
  CHECK(elsewhere.tokenizer == nullptr);
  CHECK(elsewhere.no_tokenizer == "the run's dataset was tokenized elsewhere (data.tokenizer NONE)");
  CHECK(elsewhere.stop_ids == std::vector<int32_t>{3});
}

TEST_CASE("generation on a kernels::Device (the path of --device cuda) on the CPU device: the logits of every "
          "step equal the KV-cache decoder's, the continuations token for token (GPT-2, Llama, head_dim)") {
  // Tolerance as for the training forward above (the same kernels): 1e-4.
  ScratchDir scratch;
  for (const Family& f : kFamilies) {
    CAPTURE(f.name);
    const Config c = family(f.llama, f.head_dim);
    const auto params = whole_params(export_model(scratch, c, f.name), c);
    kernels::cpu::CpuDevice device(1);
    model::DeviceDecoder on_device(c, params, device, 30);
    model::Decoder reference(c, params);
    double worst = 0;
    std::vector<int32_t> fed = kPrompt;
    for (size_t i = 0; i < 30; ++i) {
      if (i >= fed.size()) fed.push_back(int32_t((fed.back() * 7 + 3) % 50));
      const auto a = on_device.step(fed[i]), b = reference.step(fed[i]);
      REQUIRE(a.size() == b.size());
      for (size_t v = 0; v < a.size(); ++v) worst = std::max(worst, double(std::fabs(a[v] - b[v])));
    }
    MESSAGE("max |device stepper - KV-cache decoder| over 30 positions = " << worst << " (" << std::string(f.name)
                                                                          << ")");
    CHECK(worst <= 1e-4);
    CHECK(on_device.position() == 30);
    CHECK_THROWS_WITH_AS(on_device.step(1), "position 30 is past the decoder's capacity 30", std::invalid_argument);
    model::DeviceDecoder fresh(c, params, device, 40);
    CHECK(model::continue_prompt(fresh, c, kPrompt, 24, {}, {}, true) == greedy(c, params, 24));
    model::DeviceDecoder sampled(c, params, device, 40);
    const model::SamplingOptions hot{0.9, 10, 5};
    CHECK(model::continue_prompt(sampled, c, kPrompt, 24, hot, {}, true) ==
          model::continue_prompt(c, params, kPrompt, 24, hot, {}, true));
  }
}
