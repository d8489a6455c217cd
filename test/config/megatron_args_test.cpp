// Importing Megatron-LM argument fragments.
#include <doctest/doctest.h>

#include <google/protobuf/util/message_differencer.h>

#include <fstream>

#include "config/megatron_args.h"
#include "config/validate.h"
#include "test/config/util.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
using namespace troupe::config;
using namespace troupe::config::testing;

namespace {
std::string import_error(const std::string& text) {
  return error_of([&] {
    auto p = parse_megatron_args(text, "m.args");
    validate(p.config, p.origins);
  });
}
}  // namespace

TEST_CASE("the seed fragment imports to exactly configs/seed-500b.textproto") {
  const auto m = parse_megatron_args_file(source_path("configs/seed-500b.megatron-args"));
  validate(m.config, m.origins);
  const Config t = load_config_file(source_path("configs/seed-500b.textproto"));
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.set_message_field_comparison(google::protobuf::util::MessageDifferencer::EQUIVALENT);
  d.ReportDifferencesToString(&diff);
  CHECK_MESSAGE(d.Compare(t, m.config), diff);

  const Config& c = m.config;
  CHECK(c.parallel().tensor() == 8);
  CHECK(c.parallel().pipeline() == 8);
  CHECK(c.parallel().context() == 1);
  CHECK(c.parallel().data() == 80);
  CHECK(c.parallel().sequence_parallel());
  CHECK(c.batch().micro_batch_size() == 1);
  CHECK(c.batch().global_batch_size() == 1920);
  CHECK(c.batch().seq_length() == 8192);
  CHECK(c.optimizer().lr() == 8e-5);
  CHECK(c.optimizer().min_lr() == 8e-6);
  CHECK(c.optimizer().beta2() == 0.95);
  CHECK(c.optimizer().eps() == 1e-8);
  CHECK(c.optimizer().weight_decay() == 0.1);
  CHECK(c.optimizer().clip_grad() == 1.0);
  CHECK(c.lr_schedule().warmup_samples() == 2442240);
  CHECK(c.lr_schedule().decay_samples() == 1220701440);
  CHECK(c.lr_schedule().decay_style() == LrScheduleConfig::COSINE);
  CHECK(c.training().train_samples() == 1220701440);
}

TEST_CASE("origins name file, line and flag") {
  const auto p = parse_megatron_args("# comment\n--lr 1e-4 --min-lr=1e-5\n\n--seq-length 64 \\\n", "m.args");
  CHECK(p.config.optimizer().lr() == 1e-4);
  CHECK(p.config.optimizer().min_lr() == 1e-5);
  CHECK(p.origins.where("optimizer.lr") == "m.args:2 (--lr)");
  CHECK(p.origins.where("optimizer.min_lr") == "m.args:2 (--min-lr)");
  CHECK(p.origins.where("batch.seq_length") == "m.args:4 (--seq-length)");
}

TEST_CASE("validation errors point at the flag") {
  CHECK(import_error("--micro-batch-size 2\n--global-batch-size 10\n--data-parallel-size 2\n") ==
        "m.args:2 (--global-batch-size): batch.global_batch_size: 10 is not divisible by "
        "micro_batch_size x parallel.data = 4");
  CHECK(import_error("--seq-length 8192") ==
        "m.args:1 (--seq-length): batch.seq_length: 8192 exceeds model.max_positions = 256");
  CHECK(import_error("--swiglu --normalization RMSNorm --use-rotary-position-embeddings --disable-bias-linear\n"
                     "--group-query-attention --num-query-groups 3") ==
        "m.args:2 (--num-query-groups): model.kv_heads: 3 does not divide model.heads = 4");
  CHECK(import_error("--context-parallel-size 2") ==
        "m.args:1 (--context-parallel-size): parallel.context: 2 is not supported: context "
        "parallelism must be 1");
}

TEST_CASE("every unsupported flag is listed in one error") {
  CHECK(import_error("--lr 1e-4\n--fp16\n--foo-bar 3 4\n--lr-decay-iters 100 --rampup-batch-size 1 2 3\n") ==
        "m.args: unsupported Megatron-LM flags: --fp16 (line 2: troupe computes in bf16 on GPU; "
        "use --bf16), --foo-bar (line 3), --lr-decay-iters (line 4: troupe counts the schedule "
        "in samples; use --lr-decay-samples), --rampup-batch-size (line 4: troupe keeps the global batch fixed)");
}

TEST_CASE("Megatron's data flags: one dataset, a weighted blend, per-split blends, argument files") {
  const auto one = parse_megatron_args("--data-path /d/web_text_document --split 98,2,0\n", "m.args");
  CHECK(one.config.data().prefix() == "/d/web_text_document");
  CHECK(one.config.data().blend_size() == 0);
  CHECK(one.config.data().split() == "98,2,0");

  const auto mix = parse_megatron_args("--data-path 0.3 /d/web 0.5 /d/code 2e-1 /d/books --split 90,10,0\n", "m.args");
  REQUIRE(mix.config.data().blend_size() == 3);
  CHECK(mix.config.data().prefix().empty());
  CHECK(mix.config.data().blend(0).weight() == 0.3);
  CHECK(mix.config.data().blend(1).prefix() == "/d/code");
  CHECK(mix.config.data().blend(2).weight() == 0.2);
  CHECK(mix.config.data().blend(2).split().empty());  // the run's --split
  CHECK(mix.origins.where("data.blend") == "m.args:1 (--data-path)");

  const auto per = parse_megatron_args("--train-data-path 1 /d/a 3 /d/b\n--valid-data-path /d/v\n--test-data-path 1 /d/t1 1 /d/t2\n",
                                       "m.args");
  REQUIRE(per.config.data().blend_size() == 2);
  CHECK(per.config.data().blend(1).weight() == 3);
  CHECK(per.config.data().blend(0).split() == "1");  // read whole for training
  REQUIRE(per.config.data().valid_blend_size() == 1);
  CHECK(per.config.data().valid_blend(0).prefix() == "/d/v");
  CHECK(per.config.data().test_blend_size() == 2);

  const troupe::testing::ScratchDir dir("megatron-blend");
  const std::string args = dir / "blend.txt", json = dir / "splits.json";
  std::ofstream(args) << "0.25 /d/x\n0.75\n/d/y\n";
  std::ofstream(json) << R"({"train": ["2", "/d/a", "1", "/d/b"], "valid": "/d/v", "test": null})";
  const auto from_file = parse_megatron_args("--data-args-path " + args + "\n", "m.args");
  REQUIRE(from_file.config.data().blend_size() == 2);
  CHECK(from_file.config.data().blend(1).prefix() == "/d/y");
  const auto from_json = parse_megatron_args("--per-split-data-args-path " + json + "\n", "m.args");
  CHECK(from_json.config.data().blend_size() == 2);
  CHECK(from_json.config.data().valid_blend_size() == 1);
  CHECK(from_json.config.data().test_blend_size() == 0);

  // Refused, each by name with the reason.
  CHECK(import_error("--data-path /d/a /d/b /d/c\n") ==
        "m.args:1: --data-path: 3 prefixes without weights: Megatron then weights each dataset by its size, which "
        "troupe does not build; give weights, W1 PREFIX1 W2 PREFIX2 ...");
  CHECK(import_error("--data-path 0.5 /d/a x /d/b\n") ==
        "m.args:1: --data-path: mixes weights and prefixes in the weights' places: write W1 PREFIX1 W2 PREFIX2 ...");
  CHECK(import_error("--data-path 0.5 /d/a --train-data-path /d/b\n") ==
        "m.args:1: --train-data-path: a blend over the splits (--data-path, line 1) and per-split blends do not go "
        "together: Megatron reads one or the other");
  CHECK(import_error("--data-path 0 /d/a 1 /d/b\n").find("data.blend[0].weight: 0 is not a finite weight > 0") !=
        std::string::npos);
  CHECK(import_error("--data-path -1 /d/a 1 /d/b\n").find("data.blend[0].weight: -1 is not a finite weight > 0") !=
        std::string::npos);
  CHECK(import_error("--data-path nan /d/a 1 /d/b\n").find("data.blend[0].weight: nan is not a finite weight > 0") !=
        std::string::npos);
  CHECK(import_error("--data-path 1 /d/a 1 /d/a\n").find("data.blend[1].prefix: \"/d/a\" is listed twice") !=
        std::string::npos);
  CHECK(import_error("--data-cache-path /c\n") ==
        "m.args: unsupported Megatron-LM flag: --data-cache-path (line 1: troupe keeps a dataset's sample index beside "
        "it (PREFIX.*), not in a cache folder)");
}

TEST_CASE("recomputation flags import to model.recompute, recompute_method and recompute_num_layers") {
  const auto sel = parse_megatron_args("--recompute-activations", "m.args");
  CHECK(sel.config.model().recompute() == ModelConfig::SELECTIVE);
  CHECK(sel.origins.where("model.recompute") == "m.args:1 (--recompute-activations)");
  const auto full = parse_megatron_args(
      "--num-layers 4 --recompute-granularity full\n--recompute-method block --recompute-num-layers 1", "m.args");
  CHECK(full.config.model().recompute() == ModelConfig::FULL);
  CHECK(full.config.model().recompute_method() == ModelConfig::BLOCK);
  CHECK(full.config.model().recompute_num_layers() == 1);
  CHECK(parse_megatron_args("--recompute-granularity selective", "m.args").config.model().recompute() ==
        ModelConfig::SELECTIVE);
  CHECK(import_error("--recompute-granularity partial") ==
        "m.args:1: --recompute-granularity: \"partial\" is not supported: Megatron-LM recomputes selective or full");
}

TEST_CASE("behaviour switches are accepted; choices are checked") {
  CHECK(import_error("--bf16 --use-distributed-optimizer --overlap-grad-reduce "
                     "--overlap-param-gather --optimizer adam --weight-decay-incr-style constant "
                     "--position-embedding-type learned_absolute --normalization LayerNorm "
                     "--attention-dropout 0 --hidden-dropout 0.0") == "(no error)");
  CHECK(import_error("--optimizer sgd") ==
        "m.args:1: --optimizer: \"sgd\" is not supported: troupe implements AdamW only "
        "(--optimizer adam)");
  CHECK(import_error("\n--weight-decay-incr-style linear") ==
        "m.args:2: --weight-decay-incr-style: \"linear\" is not supported: troupe keeps weight "
        "decay constant (--weight-decay-incr-style constant)");
  CHECK(import_error("--lr-decay-style WSD") ==
        "m.args:1: --lr-decay-style: \"WSD\" is not supported: troupe decays cosine, linear or constant");
  CHECK(import_error("--position-embedding-type alibi") ==
        "m.args:1: --position-embedding-type: \"alibi\" is not supported: troupe has learned absolute (GPT2) "
        "or rotary (LLAMA) positions");
  CHECK(import_error("--normalization Foo") ==
        "m.args:1: --normalization: \"Foo\" is not supported: troupe normalizes with LayerNorm (GPT2) or "
        "RMSNorm (LLAMA)");
  CHECK(import_error("--hidden-dropout 1.5") ==
        "m.args:1 (--hidden-dropout): model.hidden_dropout: must lie in [0, 1), got 1.5");
}

TEST_CASE("dropout: Megatron-LM's 0.1 defaults when the fragment leaves it out, its values when it sets them") {
  const auto unset = parse_megatron_args("--num-layers 2", "m.args");
  CHECK(unset.config.model().hidden_dropout() == 0.1f);
  CHECK(unset.config.model().attention_dropout() == 0.1f);
  CHECK(unset.origins.where("model.hidden_dropout") == "m.args (Megatron-LM's default --hidden-dropout 0.1)");
  CHECK(unset.origins.where("model.attention_dropout") == "m.args (Megatron-LM's default --attention-dropout 0.1)");
  const auto set = parse_megatron_args("--num-layers 2\n--hidden-dropout 0 --attention-dropout 0.05", "m.args");
  CHECK(set.config.model().hidden_dropout() == 0.0f);
  CHECK(set.config.model().attention_dropout() == 0.05f);
  CHECK(set.origins.where("model.hidden_dropout") == "m.args:2 (--hidden-dropout)");
}

TEST_CASE("decay style, tokenizer and data flags") {
  const auto p = parse_megatron_args(
      "--lr-decay-style linear --tokenizer-type GPT2BPETokenizer --vocab-file v.json "
      "--merge-file m.txt --data-path /d/corpus_text_document --split 949,50,1 "
      "--save ck --load ck --save-interval 100 --eval-interval 50 --log-interval 5",
      "m.args");
  CHECK(p.config.lr_schedule().decay_style() == LrScheduleConfig::LINEAR);
  CHECK(p.config.data().tokenizer() == DataConfig::GPT2);
  CHECK(p.config.data().vocab_file() == "v.json");
  CHECK(p.config.data().merges_file() == "m.txt");
  CHECK(p.config.data().prefix() == "/d/corpus_text_document");
  CHECK(p.config.data().split() == "949,50,1");
  CHECK(p.config.checkpoint().dir() == "ck");
  CHECK(p.config.checkpoint().load() == "ck");
  CHECK(p.config.checkpoint().interval_steps() == 100);
  CHECK(p.config.training().eval_interval() == 50);
  CHECK(p.config.logging().log_interval() == 5);

  // Megatron's HuggingFaceTokenizer: a model folder's tokenizer.json, or the file itself.
  const auto hf = parse_megatron_args("--tokenizer-type HuggingFaceTokenizer --tokenizer-model /m/Llama-3-8B", "m.args");
  CHECK(hf.config.data().tokenizer() == DataConfig::HF_JSON);
  CHECK(hf.config.data().tokenizer_file() == "/m/Llama-3-8B/tokenizer.json");
  CHECK(parse_megatron_args("--tokenizer-type HuggingFaceTokenizer --tokenizer-model t/my.json", "m.args")
            .config.data()
            .tokenizer_file() == "t/my.json");
}

TEST_CASE("malformed values and words") {
  CHECK(import_error("--lr fast") == "m.args:1: --lr: expected a number, got \"fast\"");
  CHECK(import_error("--num-layers 2.5") == "m.args:1: --num-layers: expected an integer, got \"2.5\"");
  CHECK(import_error("--num-layers 3000000000") ==
        "m.args:1: --num-layers: 3000000000 is outside [-2147483648, 2147483647]");
  CHECK(import_error("--train-samples -5") ==
        "m.args:1: --train-samples: -5 is outside [0, 9223372036854775807]");
  CHECK(import_error("--lr\n--min-lr 1e-5") == "m.args:1: --lr: expects a value");
  CHECK(import_error("--bf16=yes") == "m.args:1: --bf16: takes no value (got \"yes\")");
  CHECK(import_error("--lr 1e-4 stray") == "m.args:1: expected a flag (--name), got \"stray\"");
  CHECK(import_error("--data-path \"/a b") == "m.args:1: unterminated quote");
}

TEST_CASE("a Llama fragment imports to the LLAMA family with Megatron's defaults for what it leaves out") {
  const std::string llama =
      "--num-layers 4 --hidden-size 128 --num-attention-heads 4\n"
      "--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear\n"
      "--group-query-attention --num-query-groups 2 --rotary-base 500000 --norm-epsilon 1e-6\n"
      "--untie-embeddings-and-output-weights --seq-length 64 --max-position-embeddings 64\n"
      "--micro-batch-size 1 --global-batch-size 8\n";
  auto p = parse_megatron_args(llama, "m.args");
  validate(p.config, p.origins);
  const auto& m = p.config.model();
  CHECK(m.architecture() == ModelConfig::LLAMA);
  CHECK(m.kv_heads() == 2);
  CHECK(m.rope_theta() == 500000);
  CHECK(m.norm_eps() == doctest::Approx(1e-6));
  CHECK_FALSE(m.tied_embeddings());
  CHECK(m.ffn_width() == 320);  // Megatron's SwiGLU default: 4 * 128 * 2 / 3 = 341, down to a multiple of 64
  CHECK(p.origins.where("model.ffn_width").find("--swiglu default") != std::string::npos);
  CHECK(p.origins.where("model.kv_heads") == "m.args:3 (--num-query-groups)");
  // --ffn-hidden-size given: kept; --group-query-attention alone: Megatron's one group.
  auto q = parse_megatron_args(
      "--hidden-size 128 --num-attention-heads 4 --normalization RMSNorm --swiglu --use-rotary-position-embeddings "
      "--disable-bias-linear --group-query-attention --ffn-hidden-size 384",
      "m.args");
  CHECK(q.config.model().ffn_width() == 384);
  CHECK(q.config.model().kv_heads() == 1);
}

TEST_CASE("--kv-channels is model.head_dim: any even size for a Llama fragment, only hidden / heads for GPT2") {
  const std::string llama =
      "--num-layers 2 --hidden-size 128 --num-attention-heads 4 --kv-channels 48\n"
      "--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear\n"
      "--group-query-attention --num-query-groups 2\n";
  auto p = parse_megatron_args(llama, "m.args");
  validate(p.config, p.origins);
  CHECK(p.config.model().head_dim() == 48);
  CHECK(p.origins.where("model.head_dim") == "m.args:1 (--kv-channels)");
  CHECK(import_error("--hidden-size 128 --num-attention-heads 4 --kv-channels 32") == "(no error)");
  CHECK(import_error("--hidden-size 128 --num-attention-heads 4\n--kv-channels 48") ==
        "m.args:2 (--kv-channels): model.head_dim: 48 needs model.architecture LLAMA: GPT2's c_attn maps the width to "
        "q, k and v of the width each (Hugging Face's GPT2Config has no head_dim), so its head size is width / heads");
}

TEST_CASE("a mix of the two families' features is refused with what is missing") {
  CHECK(import_error("--normalization RMSNorm --swiglu") ==
        "m.args: the fragment sets --normalization RMSNorm, --swiglu but not --position-embedding-type rope, "
        "--disable-bias-linear: troupe's LLAMA family is RMSNorm, SwiGLU, rotary positions and no linear biases "
        "together");
  CHECK(import_error("--group-query-attention --num-query-groups 2") ==
        "m.args:1: --group-query-attention: troupe's GPT2 family is multi-head; grouped queries come with the "
        "LLAMA features (--normalization RMSNorm, --swiglu, --position-embedding-type rope, --disable-bias-linear)");
  CHECK(import_error("--num-query-groups 2") ==
        "m.args:1: --num-query-groups: has no effect without --group-query-attention (Megatron-LM ignores it); "
        "add that flag or drop this one");
}

TEST_CASE("the virtual-pipeline flags import to the interleaved schedule") {
  auto parsed = [](const std::string& text) { return parse_megatron_args(text, "m.args").config.parallel(); };
  const auto a = parsed("--num-layers 8\n--pipeline-model-parallel-size 2\n--virtual-pipeline-model-parallel-size 2");
  CHECK(a.schedule() == ParallelConfig::INTERLEAVED_1F1B);
  CHECK(a.virtual_stages() == 2);
  // N layers a chunk: v = 8 / (2 x 2), whatever order the flags come in.
  const auto b = parsed("--num-layers-per-virtual-pipeline-stage 2\n--num-layers 8\n--pipeline-model-parallel-size 2");
  CHECK(b.schedule() == ParallelConfig::INTERLEAVED_1F1B);
  CHECK(b.virtual_stages() == 2);
  // One chunk a stage is the plain schedule.
  const auto c = parsed("--num-layers 8\n--pipeline-model-parallel-size 2\n--num-layers-per-virtual-pipeline-stage 4");
  CHECK(c.schedule() == ParallelConfig::ONE_F_ONE_B);
  CHECK(c.virtual_stages() == 1);
  CHECK(import_error("--num-layers 8\n--pipeline-model-parallel-size 2\n--num-layers-per-virtual-pipeline-stage 3") ==
        "m.args:3: --num-layers-per-virtual-pipeline-stage: 3 layers a chunk do not divide --num-layers 8 over "
        "--pipeline-model-parallel-size 2");
  CHECK(import_error("--virtual-pipeline-model-parallel-size 2\n--num-layers-per-virtual-pipeline-stage 4") ==
        "m.args:2: --num-layers-per-virtual-pipeline-stage: give it or --virtual-pipeline-model-parallel-size (line "
        "1), not both");
}
