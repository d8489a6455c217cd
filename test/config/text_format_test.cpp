// Parsing text-format configs: syntax errors name file, line and field path;
// every set field's line is recorded; the shipped configs and the embedded default load.
#include <doctest/doctest.h>

#include "config/derived.h"
#include "config/embedded_default.h"
#include "test/config/util.h"

using namespace troupe;
using namespace troupe::config;
using namespace troupe::config::testing;

TEST_CASE("unknown field: file, line, field path inside its message") {
  CHECK(load_error("model {\n  layers: 2\n  widht: 64\n}\n") ==
        "t.textproto:3: model.widht: unknown field (Message type \"troupe.ModelConfig\" has no "
        "field named \"widht\".)");
  CHECK(load_error("# comment\nbogus: 1\n") ==
        "t.textproto:2: bogus: unknown field (Message type \"troupe.Config\" has no field named "
        "\"bogus\".)");
}

TEST_CASE("wrong type: a string where an integer belongs, a float for an int") {
  CHECK(load_error("batch {\n  seq_length: \"long\"\n}\n") ==
        "t.textproto:2: batch.seq_length: wrong type or value (Expected integer, got: \"long\")");
  CHECK(load_error("model { layers: 2 }\nbatch {\n  global_batch_size: 1.5\n}\n") ==
        "t.textproto:3: batch.global_batch_size: wrong type or value (Expected integer, got: 1.5)");
}

TEST_CASE("unknown enum value names the field") {
  CHECK(load_error("lr_schedule {\n  decay_style: COSINUS\n}\n") ==
        "t.textproto:2: lr_schedule.decay_style: wrong type or value (Unknown enumeration value "
        "of \"COSINUS\" for field \"decay_style\".)");
  CHECK(load_error("faults {\n  fault { actor: \"stage/dp0/pp0/tp0\" phase: BACKWARDS }\n}\n") ==
        "t.textproto:2: faults.fault.phase: wrong type or value (Unknown enumeration value of "
        "\"BACKWARDS\" for field \"phase\".)");
}

TEST_CASE("out-of-range integer, repeated singular field, unbalanced braces") {
  CHECK(load_error("model { layers: 99999999999 }") ==
        "t.textproto:1: model.layers: wrong type or value (Integer out of range (99999999999))");
  CHECK(load_error("optimizer {\n  lr: 1e-3\n  lr: 2e-3\n}\n") ==
        "t.textproto:3: optimizer.lr: Non-repeated field \"lr\" is specified multiple times.");
  CHECK(load_error("model {\n  layers: 2\n") ==
        "t.textproto:3: model: unexpected end of input (Expected identifier, got: ); is a '}' "
        "missing?");
  CHECK(load_error("model {\n  layers 2\n}") ==
        "t.textproto:2: model.layers: syntax error (Expected \":\", found \"2\".)");
  CHECK(load_error("model { layers: 2 }\n}\n") ==
        "t.textproto:2: syntax error (Expected identifier, got: })");
}

TEST_CASE("every set field records its line, nested and repeated") {
  const auto p = parse_config_text(
      "model {\n"
      "  layers: 4\n"
      "}\n"
      "faults {\n"
      "  fault { actor: \"stage/dp0/pp0/tp0\" }\n"
      "  fault {\n"
      "    actor: \"loader/dp1\"\n"
      "  }\n"
      "}\n",
      "f.textproto");
  CHECK(p.origins.where("model") == "f.textproto:1");
  CHECK(p.origins.where("model.layers") == "f.textproto:2");
  CHECK(p.origins.where("model.width") == "f.textproto:1");  // unset: its message's line
  CHECK(p.origins.where("faults.fault[0].actor") == "f.textproto:5");
  CHECK(p.origins.where("faults.fault[1]") == "f.textproto:6");
  CHECK(p.origins.where("faults.fault[1].actor") == "f.textproto:7");
  CHECK(p.origins.where("faults.fault[1].step") == "f.textproto:6");
  CHECK(p.origins.where("batch.seq_length") == "f.textproto");  // nothing set there
}

TEST_CASE("a semantic error points at the line of the field") {
  CHECK(load_error("batch {\n  micro_batch_size: 2\n\n  global_batch_size: 10\n}\nparallel { data: 2 }\n") ==
        "t.textproto:4: batch.global_batch_size: 10 is not divisible by micro_batch_size x "
        "parallel.data = 4");
}

TEST_CASE("a missing file, a directory or a device as the config is one clear error") {
  CHECK(error_of([] { load_config_file("/nonexistent/x.textproto"); }) ==
        "/nonexistent/x.textproto: cannot open the config file: No such file or directory");
  CHECK(error_of([] { load_config_file("/tmp"); }) == "/tmp: config file is a directory, not a regular file");
  CHECK(error_of([] { load_config_file("/dev/zero"); }) ==
        "/dev/zero: config file is a character device, not a regular file");
  CHECK(error_of([] { load_config_file("/proc/self/mem"); }) ==
        "/proc/self/mem: cannot read the config file: Input/output error");
}

TEST_CASE("the embedded default is configs/default.textproto and is valid") {
  const std::string file = read_config_file(source_path("configs/default.textproto"));
  CHECK(std::string(embedded_default_text()) == file);
  const Config c = load_config_text(embedded_default_text(), std::string(kEmbeddedDefaultName));
  CHECK(c.model().layers() == 4);
  CHECK(c.parallel().data() == 2);
  CHECK(c.parallel().pipeline() == 2);
  CHECK(config::microbatches_per_replica(c) == 4);
  CHECK(config::eval_microbatches_per_replica(c) == 8);
}

TEST_CASE("proto defaults are a valid config") {
  CHECK(load_error("") == "(no error)");
}

TEST_CASE("shipped configs load and say what they claim") {
  const Config gpt2 = load_config_file(source_path("configs/gpt2-124m.textproto"));
  CHECK(gpt2.model().layers() == 12);
  CHECK(gpt2.model().heads() == 12);
  CHECK(gpt2.model().width() == 768);
  CHECK(gpt2.model().vocab_size() == 50257);
  CHECK(gpt2.model().max_positions() == 1024);
  CHECK(gpt2.data().tokenizer() == DataConfig::GPT2);
  CHECK(config::padded_vocab(gpt2) == 50304);
  CHECK(config::parameter_count(gpt2) == 124475904);
  CHECK(config::tokens_per_update(gpt2) == 524288);
  CHECK(config::eval_microbatches_per_replica(gpt2) == 32);

  const Config seed = load_config_file(source_path("configs/seed-500b.textproto"));
  CHECK(config::parameter_count(seed) == 500002136064);
  CHECK(config::parameter_count(seed) >= 500000000000);
  CHECK(config::parameter_count(seed) < 500010700000);
  CHECK(config::padded_vocab(seed) == 128512);
  CHECK(seed.model().width() / seed.model().heads() == 128);
}
