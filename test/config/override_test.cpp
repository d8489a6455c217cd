// --set field.path=value: applied through reflection, errors name the --set argument.
#include <doctest/doctest.h>

#include "config/override.h"
#include "config/validate.h"
#include "test/config/util.h"

using namespace troupe;
using namespace troupe::config;
using namespace troupe::config::testing;

namespace {
std::string set_error(const std::string& assignment) {
  Config c;
  return error_of([&] { apply_override(c, assignment); });
}
}  // namespace

TEST_CASE("scalars of every kind") {
  Config c;
  Origins o("base.textproto");
  apply_override(c, "batch.seq_length=128", &o);
  apply_override(c, "optimizer.lr=3e-4", &o);
  apply_override(c, "parallel.sequence_parallel=true", &o);
  apply_override(c, "lr_schedule.decay_style=LINEAR", &o);
  apply_override(c, "data.prefix=/data/my corpus", &o);
  apply_override(c, "logging.level=\"debug\"", &o);
  apply_override(c, "training.seed=42", &o);
  CHECK(c.batch().seq_length() == 128);
  CHECK(c.optimizer().lr() == 3e-4);
  CHECK(c.parallel().sequence_parallel());
  CHECK(c.lr_schedule().decay_style() == LrScheduleConfig::LINEAR);
  CHECK(c.data().prefix() == "/data/my corpus");
  CHECK(c.logging().level() == "debug");
  CHECK(c.training().seed() == 42);
  CHECK(o.where("batch.seq_length") == "--set batch.seq_length=128");
  CHECK(o.where("optimizer.lr") == "--set optimizer.lr=3e-4");
}

TEST_CASE("a later --set wins and keeps the other fields") {
  Config c;
  c.mutable_batch()->set_micro_batch_size(2);
  apply_override(c, "batch.seq_length=100");
  apply_override(c, "batch.seq_length=200");
  CHECK(c.batch().seq_length() == 200);
  CHECK(c.batch().micro_batch_size() == 2);
}

TEST_CASE("repeated messages: index to edit, index == size to append") {
  Config c;
  apply_override(c, "faults.fault[0].actor=stage/dp0/pp1/tp0");
  apply_override(c, "faults.fault[0].step=5");
  apply_override(c, "faults.fault[1].actor=coordinator");
  REQUIRE(c.faults().fault_size() == 2);
  CHECK(c.faults().fault(0).actor() == "stage/dp0/pp1/tp0");
  CHECK(c.faults().fault(0).step() == 5);
  CHECK(c.faults().fault(1).actor() == "coordinator");
  CHECK(error_of([&] { apply_override(c, "faults.fault[3].step=1"); }) ==
        "--set faults.fault[3].step=1: faults.fault: index 3 skips entries: there are 2 (use 2 to append)");
}

TEST_CASE("errors name the --set argument, the field path and what is wrong") {
  CHECK(set_error("batch.seq_length") == "--set batch.seq_length: expected field.path=value");
  CHECK(set_error("=3") == "--set =3: expected field.path=value");
  CHECK(set_error("batch.seq_lenght=3") ==
        "--set batch.seq_lenght=3: batch.seq_lenght: unknown field (BatchConfig has no field "
        "named \"seq_lenght\")");
  CHECK(set_error("batch.seq_length=long") ==
        "--set batch.seq_length=long: batch.seq_length: wrong type or value (Expected integer, "
        "got: long)");
  CHECK(set_error("batch.seq_length=") == "--set batch.seq_length=: batch.seq_length: missing value after '='");
  CHECK(set_error("batch.seq_length=3 micro_batch_size: 4") ==
        "--set batch.seq_length=3 micro_batch_size: 4: batch.seq_length: \"3 micro_batch_size: "
        "4\" is not a single value");
  CHECK(set_error("lr_schedule.decay_style=SQRT") ==
        "--set lr_schedule.decay_style=SQRT: lr_schedule.decay_style: wrong type or value "
        "(Unknown enumeration value of \"SQRT\" for field \"decay_style\".)");
  CHECK(set_error("batch=3") == "--set batch=3: batch: is a message: set one of its fields (name.field=value)");
  CHECK(set_error("batch.seq_length.x=3") ==
        "--set batch.seq_length.x=3: batch.seq_length: is not a message, so it has no fields below it");
  CHECK(set_error("faults.fault.actor=x") ==
        "--set faults.fault.actor=x: faults.fault: is repeated: give an index, e.g. fault[0]");
  CHECK(set_error("batch[0].seq_length=1") ==
        "--set batch[0].seq_length=1: batch: is not repeated: remove the index");
  CHECK(set_error("model.layers=99999999999") ==
        "--set model.layers=99999999999: model.layers: wrong type or value (Integer out of range "
        "(99999999999))");
}

TEST_CASE("a --set value is exactly one value: no comment, no second value") {
  CHECK(set_error("model.width=64 # comment") ==
        "--set model.width=64 # comment: model.width: \"64 # comment\" is not a single value: "
        "a --set value takes no comment ('#')");
  CHECK(set_error("model.width=64#") ==
        "--set model.width=64#: model.width: \"64#\" is not a single value: a --set value "
        "takes no comment ('#')");
  CHECK(set_error("logging.level=\"info\" \"debug\"") ==
        "--set logging.level=\"info\" \"debug\": logging.level: \"\"info\" \"debug\"\" is not a "
        "single value: a --set value is one value");
  Config c;
  apply_override(c, "optimizer.lr=-1e-3");  // a sign and a number are one value
  CHECK(c.optimizer().lr() == -1e-3);
  apply_override(c, "model.width= 96 ");
  CHECK(c.model().width() == 96);
  apply_override(c, "data.prefix=/data/a # b");  // an unquoted string is taken whole
  CHECK(c.data().prefix() == "/data/a # b");
}

TEST_CASE("the overridden config is validated with the --set as its location") {
  auto p = parse_config_text("batch {\n  micro_batch_size: 2\n}\n", "base.textproto");
  apply_override(p.config, "batch.global_batch_size=10", &p.origins);
  apply_override(p.config, "parallel.data=2", &p.origins);
  CHECK(error_of([&] { validate(p.config, p.origins); }) ==
        "--set batch.global_batch_size=10: batch.global_batch_size: 10 is not divisible by "
        "micro_batch_size x parallel.data = 4");
}

TEST_CASE("a repeated scalar field is set whole, as a list") {
  Config c;
  apply_override(c, "data.skip_samples=[16, 17, 203]");
  CHECK(std::vector<int64_t>(c.data().skip_samples().begin(), c.data().skip_samples().end()) ==
        std::vector<int64_t>{16, 17, 203});
  apply_override(c, "data.skip_samples=[5]");  // replaced, not appended
  CHECK(std::vector<int64_t>(c.data().skip_samples().begin(), c.data().skip_samples().end()) ==
        std::vector<int64_t>{5});
  apply_override(c, "data.skip_samples=[]");
  CHECK(c.data().skip_samples_size() == 0);
  CHECK(set_error("data.skip_samples=7") ==
        "--set data.skip_samples=7: data.skip_samples: is a list: give it whole, e.g. data.skip_samples=[1, 2] "
        "(data.skip_samples=[] empties it)");
  CHECK(set_error("data.skip_samples[0]=7") ==
        "--set data.skip_samples[0]=7: data.skip_samples: is a list: give it whole, e.g. data.skip_samples=[1, 2] "
        "(data.skip_samples=[] empties it)");
  CHECK(set_error("data.skip_samples=[1, x]") ==
        "--set data.skip_samples=[1, x]: data.skip_samples: wrong type or value (Expected integer, got: x)");
  CHECK(set_error("data.skip_samples=[1] split: \"1,0,0\"").find("data.skip_samples: is a list") != std::string::npos);
  CHECK(set_error("data.skip_samples=[1 # two]").find("takes no comment") != std::string::npos);
}
