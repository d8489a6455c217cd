// The shared config arguments of every subcommand: CONFIG, --set, --megatron-args.
#include <doctest/doctest.h>

#include <google/protobuf/util/message_differencer.h>

#include "apps/supervisor/config_args.h"
#include "config/embedded_default.h"
#include "test/config/util.h"

using namespace troupe;
using namespace troupe::cli;
using namespace troupe::config::testing;
namespace po = boost::program_options;

namespace {

ConfigArgs parse(std::vector<const char*> argv) {
  ConfigArgs args;
  po::options_description options;
  po::positional_options_description positional;
  add_config_options(options, positional, args);
  argv.insert(argv.begin(), "supervisor test");
  po::variables_map vm;
  po::store(po::command_line_parser(int(argv.size()), const_cast<char**>(argv.data()))
                .options(options)
                .positional(positional)
                .run(),
            vm);
  po::notify(vm);
  return args;
}

}  // namespace

TEST_CASE("command line: CONFIG positional, --set repeated in order, --megatron-args") {
  const ConfigArgs a = parse({"c.textproto", "--set", "batch.seq_length=32", "--set=optimizer.lr=1e-4"});
  CHECK(a.config_path == "c.textproto");
  CHECK(a.sets == std::vector<std::string>{"batch.seq_length=32", "optimizer.lr=1e-4"});
  CHECK(a.megatron_args.empty());
  const ConfigArgs b = parse({"--megatron-args", "m.args"});
  CHECK(b.config_path.empty());
  CHECK(b.megatron_args == "m.args");
}

TEST_CASE("no CONFIG: the embedded default, with overrides on top") {
  const LoadedConfig c = load_config(parse({"--set", "training.train_samples=640"}));
  CHECK(c.source == std::string(config::kEmbeddedDefaultName));
  CHECK(c.config.model().layers() == 4);
  CHECK(c.config.training().train_samples() == 640);
  CHECK(c.describe() ==
        "embedded default (configs/default.textproto) --set training.train_samples=640");
  CHECK(c.origins.where("training.train_samples") == "--set training.train_samples=640");
}

TEST_CASE("CONFIG and --megatron-args load the same seed plan") {
  const std::string t = source_path("configs/seed-500b.textproto");
  const std::string m = source_path("configs/seed-500b.megatron-args");
  const LoadedConfig a = load_config(parse({t.c_str()}));
  const LoadedConfig b = load_config(parse({"--megatron-args", m.c_str()}));
  CHECK(a.source == t);
  CHECK(b.source == "Megatron-LM arguments " + m);
  // Equivalent: equal values, whether written out or left at the default.
  CHECK(google::protobuf::util::MessageDifferencer::Equivalent(a.config, b.config));
  CHECK_FALSE(google::protobuf::util::MessageDifferencer::Equivalent(
      a.config, load_config(parse({t.c_str(), "--set", "optimizer.beta2=0.98"})).config));
}

TEST_CASE("errors: both inputs, a bad --set, a rule broken by an override") {
  CHECK(error_of([] { load_config(parse({"a.textproto", "--megatron-args", "m.args"})); }) ==
        "give either CONFIG (a.textproto) or --megatron-args (m.args), not both");
  CHECK(error_of([] { load_config(parse({"--set", "batch.nope=1"})); }) ==
        "--set batch.nope=1: batch.nope: unknown field (BatchConfig has no field named \"nope\")");
  CHECK(error_of([] { load_config(parse({"--set", "batch.global_batch_size=6"})); }) ==
        "--set batch.global_batch_size=6: batch.global_batch_size: 6 is not divisible by "
        "micro_batch_size x parallel.data = 4");
  // A rule the override broke on another field is named at the override.
  CHECK(error_of([] { load_config(parse({"--set", "data.tokenizer=GPT2"})); }) ==
        "--set data.tokenizer=GPT2: data.vocab_file: the GPT2 tokenizer needs vocab_file (GPT-2's vocab.json)");
  CHECK(error_of([] { load_config(parse({"/no/such.textproto"})); }) ==
        "/no/such.textproto: cannot open the config file: No such file or directory");
}
