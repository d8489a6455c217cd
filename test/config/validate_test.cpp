// Every validation rule, each with the exact message a user sees.
#include <doctest/doctest.h>

#include "config/derived.h"
#include "config/validate.h"
#include "test/config/util.h"

using namespace troupe;
using namespace troupe::config;
using namespace troupe::config::testing;

TEST_CASE("batch: global batch divisible by micro batch x data") {
  CHECK(load_error("parallel { data: 2 }\nbatch { micro_batch_size: 3 global_batch_size: 8 }") ==
        "t.textproto:2: batch.global_batch_size: 8 is not divisible by micro_batch_size x "
        "parallel.data = 6");
}

TEST_CASE("model: width % heads, heads % tensor, ffn % tensor, layers % pipeline") {
  CHECK(load_error("model { width: 66 }") ==
        "t.textproto:1: model.width: 66 is not divisible by model.heads = 4");
  CHECK(load_error("model { heads: 6 width: 96 }\nparallel { tensor: 4 }") ==
        "t.textproto:1: model.heads: 6 is not divisible by parallel.tensor = 4");
  CHECK(load_error("model {\n  ffn_width: 130\n}\nparallel { tensor: 4 }") ==
        "t.textproto:2: model.ffn_width: 130 is not divisible by parallel.tensor = 4");
  CHECK(load_error("model { layers: 3 }\nparallel {\n  pipeline: 2\n}") ==
        "t.textproto:1: model.layers: 3 is not divisible by parallel.pipeline = 2");
}

TEST_CASE("the interleaved schedule: chunks, stages, microbatches, one process; ZB_H1 one chunk") {
  CHECK(load_error("model { layers: 8 }\nparallel { pipeline: 2 schedule: INTERLEAVED_1F1B virtual_stages: 2 }") ==
        "(no error)");
  CHECK(load_error("parallel { virtual_stages: 2 }") ==
        "t.textproto:1: parallel.virtual_stages: 2 model chunks a stage need parallel.schedule INTERLEAVED_1F1B (it "
        "is ONE_F_ONE_B)");
  CHECK(load_error("parallel { virtual_stages: 0 }") ==
        "t.textproto:1: parallel.virtual_stages: 0 is not a chunk count (1 or more)");
  CHECK(load_error("model { layers: 8 }\nparallel { schedule: INTERLEAVED_1F1B virtual_stages: 2 }") ==
        "t.textproto:2: parallel.schedule: INTERLEAVED_1F1B needs parallel.pipeline >= 2");
  CHECK(load_error("model { layers: 8 }\nparallel { pipeline: 2 schedule: INTERLEAVED_1F1B }") ==
        "t.textproto:2: parallel.virtual_stages: INTERLEAVED_1F1B needs 2 or more model chunks a stage");
  CHECK(load_error("model { layers: 4 }\nparallel { pipeline: 2 schedule: INTERLEAVED_1F1B virtual_stages: 4 }") ==
        "t.textproto:2: parallel.virtual_stages: model.layers 4 does not divide into parallel.pipeline 2 x 4 model "
        "chunks");
  CHECK(load_error("model { layers: 8 }\nbatch { global_batch_size: 6 }\n"
                   "parallel { pipeline: 4 schedule: INTERLEAVED_1F1B virtual_stages: 2 }") ==
        "t.textproto:3: parallel.schedule: INTERLEAVED_1F1B walks groups of parallel.pipeline = 4 microbatches; the 6 "
        "microbatches per replica (global_batch_size / (micro_batch_size x data)) are not a multiple");
  CHECK(load_error("model { layers: 8 }\nparallel { pipeline: 2 schedule: ZB_H1 }") == "(no error)");
  CHECK(load_error("model { layers: 8 }\nparallel { pipeline: 2 schedule: ZB_H1 virtual_stages: 2 }") ==
        "t.textproto:2: parallel.virtual_stages: 2 model chunks a stage need parallel.schedule INTERLEAVED_1F1B (it "
        "is ZB_H1)");
}

TEST_CASE("parallel.physical_replicas: divides parallel.data; hosting needs the distributed optimizer and the CPU") {
  CHECK(load_error("parallel { data: 4 physical_replicas: 2 }") == "(no error)");
  CHECK(load_error("parallel { data: 4 physical_replicas: 1 }") == "(no error)");
  CHECK(load_error("parallel { data: 4 physical_replicas: 4 }") == "(no error)");
  CHECK(load_error("parallel { data: 4 physical_replicas: 3 }") ==
        "t.textproto:1: parallel.physical_replicas: 3 does not divide parallel.data = 4: each physical replica hosts "
        "a whole number of logical ones");
  CHECK(load_error("parallel { data: 2 physical_replicas: 4 }") ==
        "t.textproto:1: parallel.physical_replicas: 4 does not divide parallel.data = 2: each physical replica hosts "
        "a whole number of logical ones");
  CHECK(load_error("parallel { data: 4 physical_replicas: -2 }") ==
        "t.textproto:1: parallel.physical_replicas: -2 does not divide parallel.data = 4: each physical replica "
        "hosts a whole number of logical ones");
  CHECK(load_error("parallel { data: 4 physical_replicas: 2 distributed_optimizer: false }") ==
        "t.textproto:1: parallel.physical_replicas: 2 physical for 4 logical replicas needs "
        "parallel.distributed_optimizer: a hosted replica's update is its own optimizer shard");
  CHECK(load_error("parallel { data: 4 physical_replicas: 2 }\ndevice { type: CUDA }") ==
        "t.textproto:1: parallel.physical_replicas: 2 physical for 4 logical replicas runs on the CPU device only so "
        "far");
}

TEST_CASE("padded vocab always splits across tensor-parallel ranks") {
  Config c;
  c.mutable_parallel()->set_tensor(8);
  c.mutable_model()->set_heads(8);
  c.mutable_model()->set_vocab_size(50257);
  c.mutable_model()->set_vocab_pad_multiple(1);
  CHECK(config::padded_vocab(c) % 8 == 0);
  CHECK(violations(c).empty());
}

TEST_CASE("sequence parallel needs seq_length % tensor == 0") {
  CHECK(load_error("parallel {\n  tensor: 4\n  sequence_parallel: true\n}\nbatch { seq_length: 30 }") ==
        "t.textproto:3: parallel.sequence_parallel: needs batch.seq_length (30) divisible by "
        "parallel.tensor = 4");
  CHECK(load_error("parallel { tensor: 4 sequence_parallel: true }\nbatch { seq_length: 32 }") ==
        "(no error)");
}

TEST_CASE("seq_length may not exceed max_positions") {
  CHECK(load_error("batch { seq_length: 512 }") ==
        "t.textproto:1: batch.seq_length: 512 exceeds model.max_positions = 256");
}

TEST_CASE("context parallelism must be 1") {
  CHECK(load_error("parallel { context: 2 }") ==
        "t.textproto:1: parallel.context: 2 is not supported: context parallelism must be 1");
}

TEST_CASE("the model families: what LLAMA needs, and Llama knobs refused on GPT2") {
  CHECK(load_error("model { tied_embeddings: false }") == "(no error)");
  CHECK(load_error("model {\n  architecture: LLAMA\n}") ==
        "t.textproto:2: model.ffn_width: must be set for LLAMA (the SwiGLU width; Llama 3 8B: 14336)");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 kv_heads: 3 }") ==
        "t.textproto:1: model.kv_heads: 3 does not divide model.heads = 4");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 heads: 8 kv_heads: 2 }\nparallel { tensor: 8 }") ==
        "(no error)");  // TP 8 over 2 kv heads: each rank keeps both
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 heads: 12 width: 96 kv_heads: 6 }\n"
                   "parallel { tensor: 4 }") ==
        "t.textproto:1: model.kv_heads: 6 and parallel.tensor = 4: one must divide the other (split the kv "
        "heads, or keep every kv head on every rank)");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 heads: 4 width: 20 }") ==
        "t.textproto:1: model.heads: rotary positions need an even head size; width 20 / heads 4 = 5");
  CHECK(load_error("model {\n  kv_heads: 2\n}") ==
        "t.textproto:2: model.kv_heads: 2 needs model.architecture LLAMA: GPT2 attention is multi-head");
  CHECK(load_error("model {\n  rope_theta: 500000\n}") ==
        "t.textproto:2: model.rope_theta: needs model.architecture LLAMA: GPT2 learns absolute positions");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 rope_scaling { factor: 0.5 } }") ==
        "t.textproto:1: model.rope_scaling.factor: must be 0 (no scaling) or at least 1, got 0.5");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 rope_scaling { factor: 8 low_freq_factor: 4 "
                   "high_freq_factor: 1 } }") ==
        "t.textproto:1: model.rope_scaling.high_freq_factor: must exceed low_freq_factor (4), got 1");
  CHECK(load_error("model { norm_eps: -1 }") == "t.textproto:1: model.norm_eps: must be positive, got -1");
}

TEST_CASE("model.head_dim: any even size for LLAMA (the width need not split by the heads), refused on GPT2") {
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 head_dim: 24 }") == "(no error)");
  // Mistral-Nemo's shape: 32 heads of 128 over a width of 5120 (not 5120 / 32 = 160).
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 width: 5120 heads: 32 kv_heads: 8 head_dim: 128 }") ==
        "(no error)");
  // The heads need not divide the width when head_dim gives their size.
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 width: 100 heads: 3 kv_heads: 1 head_dim: 32 }") ==
        "(no error)");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 width: 100 heads: 3 kv_heads: 1 }") ==
        "t.textproto:1: model.width: 100 is not divisible by model.heads = 3");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96\n  head_dim: 7 }") ==
        "t.textproto:2: model.head_dim: 7 is odd: rotary positions turn pairs of each head's values (head_dim / 2 "
        "of them)");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 head_dim: -2 }") ==
        "t.textproto:1: model.head_dim: must not be negative, got -2");
  CHECK(load_error("model { architecture: LLAMA ffn_width: 96 heads: 64 head_dim: 32768 }") ==
        "t.textproto:1: model.head_dim: model.heads 64 x head_dim 32768 = 2097152: the attention width may be at "
        "most 1048576");
  // GPT2: only width / heads (what 0 means anyway).
  CHECK(load_error("model { head_dim: 16 }") == "(no error)");
  CHECK(load_error("model {\n  head_dim: 24\n}") ==
        "t.textproto:2: model.head_dim: 24 needs model.architecture LLAMA: GPT2's c_attn maps the width to q, k and v "
        "of the width each (Hugging Face's GPT2Config has no head_dim), so its head size is width / heads");
  Config c;
  c.mutable_model()->set_width(64);
  CHECK(head_size(c.model()) == 16);
  CHECK(attention_width(c.model()) == 64);
  c.mutable_model()->set_head_dim(24);
  CHECK(head_size(c.model()) == 24);
  CHECK(attention_width(c.model()) == 96);
}

TEST_CASE("data.tokenizer NONE: a dataset tokenized elsewhere names its end-of-document ID") {
  CHECK(load_error("data {\n  tokenizer: NONE\n}") ==
        "t.textproto:2: data.tokenizer: NONE needs data.prefix: a dataset tokenized elsewhere (the embedded default "
        "corpus is byte-tokenized)");
  CHECK(load_error("data {\n  tokenizer: NONE\n  prefix: \"x\"\n}") ==
        "t.textproto:2: data.tokenizer: NONE needs data.eod_id, the dataset's end-of-document ID");
  CHECK(load_error("data { tokenizer: NONE prefix: \"x\"\n  eod_id: 257 }") ==
        "t.textproto:2: data.eod_id: 257 is outside [0, model.vocab_size = 257)");
  CHECK(load_error("data { tokenizer: NONE prefix: \"x\" eod_id: 0 }") == "(no error)");
  CHECK(load_error("data {\n  eod_id: 3\n}") ==
        "t.textproto:2: data.eod_id: only with data.tokenizer NONE or HF_JSON; BYTES knows its own end-of-document "
        "ID");
}

TEST_CASE("data.tokenizer HF_JSON: a tokenizer.json, and eod_id as an override inside the vocabulary") {
  CHECK(load_error("data {\n  tokenizer: HF_JSON\n}") ==
        "t.textproto:2: data.tokenizer_file: the HF_JSON tokenizer needs tokenizer_file (a Hugging Face "
        "tokenizer.json)");
  CHECK(load_error("data { tokenizer: HF_JSON tokenizer_file: \"t.json\" prefix: \"x\" }") == "(no error)");
  CHECK(load_error("data { tokenizer: HF_JSON tokenizer_file: \"t.json\" prefix: \"x\"\n  eod_id: 300 }") ==
        "t.textproto:2: data.eod_id: 300 is outside [0, model.vocab_size = 257)");
  CHECK(load_error("data { tokenizer: HF_JSON tokenizer_file: \"t.json\" prefix: \"x\" eod_id: 3 }") ==
        "(no error)");
  CHECK(load_error("data {\n  tokenizer_file: \"t.json\"\n}") ==
        "t.textproto:2: data.tokenizer_file: only with data.tokenizer HF_JSON, not BYTES");
}

TEST_CASE("non-positive sizes") {
  CHECK(load_error("model { layers: 0 }") == "t.textproto:1: model.layers: must be positive, got 0");
  CHECK(load_error("model { heads: -2 }") == "t.textproto:1: model.heads: must be positive, got -2");
  CHECK(load_error("model { width: 0 }") == "t.textproto:1: model.width: must be positive, got 0");
  CHECK(load_error("model { ffn_width: -1 }") ==
        "t.textproto:1: model.ffn_width: must not be negative, got -1");
  CHECK(load_error("model { vocab_size: 0 }") ==
        "t.textproto:1: model.vocab_size: must be positive, got 0");
  CHECK(load_error("model { max_positions: 0 }") ==
        "t.textproto:1: model.max_positions: must be positive, got 0");
  CHECK(load_error("parallel { tensor: 0 }") ==
        "t.textproto:1: parallel.tensor: must be positive, got 0");
  CHECK(load_error("parallel { pipeline: 0 }") ==
        "t.textproto:1: parallel.pipeline: must be positive, got 0");
  CHECK(load_error("parallel { data: -1 }") ==
        "t.textproto:1: parallel.data: must be positive, got -1");
  CHECK(load_error("batch { micro_batch_size: 0 }") ==
        "t.textproto:1: batch.micro_batch_size: must be positive, got 0");
  CHECK(load_error("batch { global_batch_size: 0 }") ==
        "t.textproto:1: batch.global_batch_size: must be positive, got 0");
  CHECK(load_error("batch { seq_length: 0 }") ==
        "t.textproto:1: batch.seq_length: must be positive, got 0");
  CHECK(load_error("training { train_samples: 0 }") ==
        "t.textproto:1: training.train_samples: must be positive, got 0");
  CHECK(load_error("data { prefetch_microbatches: 0 }") ==
        "t.textproto:1: data.prefetch_microbatches: must be positive, got 0");
  CHECK(load_error("logging { log_interval: 0 }") ==
        "t.textproto:1: logging.log_interval: must be positive, got 0");
}

TEST_CASE("negative lr, eps, clip, weight decay; non-finite values") {
  CHECK(load_error("optimizer { lr: -1e-3 }") ==
        "t.textproto:1: optimizer.lr: must not be negative, got -0.001");
  CHECK(load_error("optimizer { min_lr: -1 }") ==
        "t.textproto:1: optimizer.min_lr: must not be negative, got -1");
  CHECK(load_error("optimizer { eps: -1e-8 }") ==
        "t.textproto:1: optimizer.eps: must be positive, got -1e-08");
  CHECK(load_error("optimizer { eps: 0 }") == "t.textproto:1: optimizer.eps: must be positive, got 0");
  CHECK(load_error("optimizer { clip_grad: -1 }") ==
        "t.textproto:1: optimizer.clip_grad: must not be negative, got -1");
  CHECK(load_error("optimizer { weight_decay: -0.1 }") ==
        "t.textproto:1: optimizer.weight_decay: must not be negative, got -0.1");
  CHECK(load_error("optimizer { lr: inf }") ==
        "t.textproto:1: optimizer.lr: must be a finite number, got inf");
  CHECK(load_error("optimizer { lr: nan }") ==
        "t.textproto:1: optimizer.lr: must be a finite number, got nan");
  CHECK(load_error("optimizer { clip_grad: 0 }") == "(no error)");  // 0 disables clipping
}

TEST_CASE("betas in [0, 1)") {
  CHECK(load_error("optimizer { beta1: 1.0 }") == "t.textproto:1: optimizer.beta1: 1 is outside [0, 1)");
  CHECK(load_error("optimizer { beta2: -0.5 }") ==
        "t.textproto:1: optimizer.beta2: -0.5 is outside [0, 1)");
  CHECK(load_error("optimizer { beta1: 0 beta2: 0.999 }") == "(no error)");
}

TEST_CASE("min_lr and warmup_init may not exceed lr") {
  CHECK(load_error("optimizer {\n  lr: 1e-4\n  min_lr: 2e-4\n}") ==
        "t.textproto:3: optimizer.min_lr: 0.0002 exceeds optimizer.lr = 0.0001");
  CHECK(load_error("optimizer { warmup_init: 0.1 }") ==
        "t.textproto:1: optimizer.warmup_init: 0.1 exceeds optimizer.lr = 0.001");
}

TEST_CASE("warmup_samples may not exceed the decay end") {
  CHECK(load_error("lr_schedule {\n  warmup_samples: 400\n  decay_samples: 300\n}") ==
        "t.textproto:2: lr_schedule.warmup_samples: 400 exceeds the decay end 300 "
        "(lr_schedule.decay_samples)");
  CHECK(load_error("lr_schedule { warmup_samples: 400 }") ==
        "t.textproto:1: lr_schedule.warmup_samples: 400 exceeds the decay end 320 "
        "(training.train_samples, as decay_samples is 0)");
  CHECK(load_error("lr_schedule { warmup_samples: -1 }") ==
        "t.textproto:1: lr_schedule.warmup_samples: must not be negative, got -1");
  CHECK(load_error("lr_schedule { decay_samples: -1 }") ==
        "t.textproto:1: lr_schedule.decay_samples: must not be negative, got -1");
}

TEST_CASE("train_samples must hold at least one global batch") {
  CHECK(load_error("training { train_samples: 7 }") ==
        "t.textproto:1: training.train_samples: 7 is less than one global batch "
        "(batch.global_batch_size = 8)");
}

TEST_CASE("other non-negative counters") {
  CHECK(load_error("training { eval_interval: -1 }") ==
        "t.textproto:1: training.eval_interval: must not be negative, got -1");
  CHECK(load_error("training { eval_samples: -1 }") ==
        "t.textproto:1: training.eval_samples: must not be negative, got -1");
  CHECK(load_error("training { token_budget: -1 }") ==
        "t.textproto:1: training.token_budget: must not be negative, got -1");
  CHECK(load_error("checkpoint { interval_steps: -1 }") ==
        "t.textproto:1: checkpoint.interval_steps: must not be negative, got -1");
  CHECK(load_error("checkpoint { interval_seconds: -5 }") ==
        "t.textproto:1: checkpoint.interval_seconds: must not be negative, got -5");
  CHECK(load_error("checkpoint { keep_last: -1 }") ==
        "t.textproto:1: checkpoint.keep_last: must not be negative, got -1");
  CHECK(load_error("device { threads: -1 }") ==
        "t.textproto:1: device.threads: must not be negative, got -1");
}

TEST_CASE("sizes that would overflow derived products are bounded") {
  CHECK(load_error("model { layers: 100000 }") ==
        "t.textproto:1: model.layers: must be at most 16384, got 100000");
  CHECK(load_error("model { width: 2097152 heads: 1 }") ==
        "t.textproto:1: model.width: must be at most 1048576, got 2097152");
  CHECK(load_error("model { ffn_width: 2000000000 }") ==
        "t.textproto:1: model.ffn_width: must be at most 4194304, got 2000000000");
  CHECK(load_error("model { vocab_size: 2147483647 }") ==
        "t.textproto:1: model.vocab_size: must be at most 16777216, got 2147483647");
  CHECK(load_error("model { vocab_pad_multiple: 1000000 }") ==
        "t.textproto:1: model.vocab_pad_multiple: must be at most 65536, got 1000000");
  CHECK(load_error("model { max_positions: 100000000 }") ==
        "t.textproto:1: model.max_positions: must be at most 16777216, got 100000000");
  CHECK(load_error("parallel { tensor: 2000000 }") ==
        "t.textproto:1: parallel.tensor: must be at most 1048576, got 2000000");
  CHECK(load_error("device { threads: 1000000 }") ==
        "t.textproto:1: device.threads: must be at most 4096, got 1000000");
  const std::string ranks = "model { heads: 1 layers: 1024 }\nparallel {\n  pipeline: 1024\n  data: 2048\n}\n"
                            "batch { global_batch_size: 2048 }\ntraining { train_samples: 2048 }";
  CHECK(load_error(ranks) ==
        "t.textproto:4: parallel.data: tensor x pipeline x data = 2097152 ranks, more than 1048576");
}

TEST_CASE("checkpoint lag, fault microbatch, spike detector and calendar efficiency") {
  CHECK(load_error("checkpoint { max_lag_steps: -1 }") ==
        "t.textproto:1: checkpoint.max_lag_steps: must not be negative, got -1");
  CHECK(load_error("faults { fault { actor: \"stage/dp0/pp0/tp0\" microbatch: -1 } }") ==
        "t.textproto:1: faults.fault[0].microbatch: must not be negative, got -1");
  // The proto default batch: 8 microbatches of 1 sequence per update, indices 0..7.
  CHECK(load_error("faults {\n  fault {\n    actor: \"stage/dp0/pp0/tp0\"\n    kind: NAN_GRADIENT\n"
                   "    phase: BACKWARD\n    microbatch: 8\n  }\n}") ==
        "t.textproto:6: faults.fault[0].microbatch: 8 is past the last microbatch of a replica (8 "
        "per update, counted from 0): the fault would never fire");
  CHECK(load_error("faults { fault { actor: \"stage/dp0/pp0/tp0\" kind: NAN_GRADIENT phase: BACKWARD "
                   "microbatch: 7 } }") == "(no error)");
  CHECK(load_error("logging { spike_window: 0 }") ==
        "t.textproto:1: logging.spike_window: must be positive, got 0");
  CHECK(load_error("logging { spike_mad_k: -1 }") ==
        "t.textproto:1: logging.spike_mad_k: must not be negative, got -1");
  CHECK(load_error("logging {\n  spike_loss_min_jump: inf\n}") ==
        "t.textproto:2: logging.spike_loss_min_jump: must be a finite number, got inf");
  CHECK(load_error("logging { spike_grad_norm_min_jump: nan }") ==
        "t.textproto:1: logging.spike_grad_norm_min_jump: must be a finite number, got nan");
  CHECK(load_error("logging { spike_mad_k: 0 spike_loss_min_jump: 0 spike_grad_norm_min_jump: 0 }") ==
        "(no error)");
  // The old rule's field is gone: a config naming it is told so, not silently changed.
  CHECK(load_error("logging { spike_multiple: 3 }").find("logging.spike_multiple: unknown field") !=
        std::string::npos);
  CHECK(load_error("logging { spike_min_history: 0 }") ==
        "t.textproto:1: logging.spike_min_history: must be positive, got 0");
  CHECK(load_error("logging {\n  spike_window: 5\n  spike_min_history: 6\n}") ==
        "t.textproto:3: logging.spike_min_history: 6 exceeds logging.spike_window = 5: no step "
        "would ever be judged");
  CHECK(load_error("logging { calendar_efficiency: 0 }") ==
        "t.textproto:1: logging.calendar_efficiency: 0 is outside (0, 1] (a share of wall time)");
  CHECK(load_error("logging { calendar_efficiency: 1.5 }") ==
        "t.textproto:1: logging.calendar_efficiency: 1.5 is outside (0, 1] (a share of wall time)");
  CHECK(load_error("logging { calendar_efficiency: nan }") ==
        "t.textproto:1: logging.calendar_efficiency: nan is outside (0, 1] (a share of wall time)");
  CHECK(load_error("logging { calendar_efficiency: 1 }") == "(no error)");
}

TEST_CASE("model: init_std, layernorm_eps, vocab_pad_multiple, byte vocabulary") {
  CHECK(load_error("model { init_std: 0 }") == "t.textproto:1: model.init_std: must be positive, got 0");
  CHECK(load_error("model { layernorm_eps: -1e-5 }") ==
        "t.textproto:1: model.layernorm_eps: must be positive, got -1e-05");
  CHECK(load_error("model { vocab_pad_multiple: 0 }") ==
        "t.textproto:1: model.vocab_pad_multiple: must be positive, got 0");
  CHECK(load_error("model { vocab_size: 256 }") ==
        "t.textproto:1: model.vocab_size: 256 is too small for the BYTES tokenizer (256 bytes "
        "+ EOD = 257)");
}

TEST_CASE("data: split weights, GPT-2 files") {
  CHECK(load_error("data { split: \"98,2,x\" }") ==
        "t.textproto:1: data.split: \"98,2,x\" is not 1 to 3 comma-separated non-negative "
        "weights (train,valid,test)");
  CHECK(load_error("data { split: \"1,1,1,1\" }") ==
        "t.textproto:1: data.split: \"1,1,1,1\" is not 1 to 3 comma-separated non-negative "
        "weights (train,valid,test)");
  CHECK(load_error("data { split: \"0,50,50\" }") ==
        "t.textproto:1: data.split: \"0,50,50\" gives the training split no weight");
  CHECK(load_error("data { split: \"100\" }") == "(no error)");
  // Named at the line that chose the tokenizer (the missing field has no line).
  CHECK(load_error("model { vocab_size: 50257 }\ndata {\n  tokenizer: GPT2\n}") ==
        "t.textproto:3: data.vocab_file: the GPT2 tokenizer needs vocab_file (GPT-2's vocab.json)");
  CHECK(load_error("data {\n  tokenizer: GPT2\n  vocab_file: \"v.json\"\n}") ==
        "t.textproto:2: data.merges_file: the GPT2 tokenizer needs merges_file (GPT-2's "
        "merges.txt)");
}

TEST_CASE("validation every N updates needs validation samples") {
  CHECK(load_error("training {\n  eval_interval: 10\n}") ==
        "t.textproto:2: training.eval_interval: 10 asks for validation every 10 updates, but "
        "training.eval_samples is 0");
  CHECK(load_error("training { eval_interval: 10 eval_samples: 8 }") == "(no error)");
  CHECK(load_error("training { eval_samples: 8 }") == "(no error)");  // only at the end
}

TEST_CASE("eval_samples: whole evaluation microbatches on every replica") {
  const std::string layout = "parallel { data: 2 }\nbatch { micro_batch_size: 2 }\n";
  CHECK(load_error(layout + "training {\n  eval_samples: 2\n}") ==
        "t.textproto:4: training.eval_samples: 2 is less than one evaluation microbatch per "
        "replica (batch.micro_batch_size x parallel.data = 4); 0 turns evaluation off");
  CHECK(load_error(layout + "training {\n  eval_interval: 5\n  eval_samples: 33\n}") ==
        "t.textproto:5: training.eval_samples: 33 is not a multiple of batch.micro_batch_size x "
        "parallel.data = 4");
  CHECK(load_error(layout + "training { eval_samples: 32 }") == "(no error)");
  CHECK(load_error(layout + "training { eval_samples: 0 }") == "(no error)");  // evaluation off

  Config c;
  c.mutable_parallel()->set_data(2);
  c.mutable_batch()->set_micro_batch_size(2);
  c.mutable_training()->set_eval_samples(32);
  CHECK(config::eval_microbatches_per_replica(c) == 8);
  c.mutable_training()->set_eval_samples(0);
  CHECK(config::eval_microbatches_per_replica(c) == 0);
}

TEST_CASE("supervision: periods positive, watchdog longer than a heartbeat") {
  CHECK(load_error("supervision { max_restarts: -1 }") ==
        "t.textproto:1: supervision.max_restarts: must not be negative, got -1");
  CHECK(load_error("supervision { intensity_period_s: 0 }") ==
        "t.textproto:1: supervision.intensity_period_s: must be positive, got 0");
  CHECK(load_error("supervision { heartbeat_interval_s: 0 }") ==
        "t.textproto:1: supervision.heartbeat_interval_s: must be positive, got 0");
  CHECK(load_error("supervision {\n  heartbeat_interval_s: 2\n  step_watchdog_s: 1\n}") ==
        "t.textproto:3: supervision.step_watchdog_s: 1 must exceed "
        "supervision.heartbeat_interval_s = 2 (or be 0: off)");
  CHECK(load_error("supervision { step_watchdog_s: 0 }") == "(no error)");
}

TEST_CASE("logging: level and run_dir") {
  CHECK(load_error("logging { level: \"verbose\" }") ==
        "t.textproto:1: logging.level: \"verbose\" is not one of trace, debug, info, warn, error, "
        "critical, off");
  CHECK(load_error("logging { run_dir: \"\" }") == "t.textproto:1: logging.run_dir: must not be empty");
}

TEST_CASE("faults: actor path syntax, required actor, step, phase of checkpoint faults") {
  CHECK(load_error("faults {\n  fault { actor: \"stage/dp1/pp0/tp0\" step: 3 phase: BACKWARD }\n"
                   "  fault { actor: \"coordinator\" kind: HANG }\n"
                   "  fault { actor: \"writer/dp0/pp1/tp0\" kind: CORRUPT_SHARD phase: CHECKPOINT_WRITE }\n"
                   "  fault { actor: \"writer/dp0/pp1/tp0\" kind: KILL phase: CHECKPOINT_WRITE }\n}") ==
        "(no error)");
  CHECK(load_error("faults {\n  fault { step: 2 }\n}") ==
        "t.textproto:2: faults.fault[0].actor: is required (an actor path such as "
        "\"stage/dp1/pp0/tp0\")");
  CHECK(load_error("faults {\n  fault { actor: \"loader/dp0\" }\n  fault {\n    actor: \"stage/dp1//tp0\"\n  }\n}") ==
        "t.textproto:4: faults.fault[1].actor: \"stage/dp1//tp0\" is not an actor path: it has an "
        "empty segment (\"//\" or a trailing \"/\")");
  CHECK(load_error("faults { fault { actor: \"stage/dp1/pp/tp0\" } }") ==
        "t.textproto:1: faults.fault[0].actor: \"stage/dp1/pp/tp0\" is not an actor path: segment "
        "\"pp\" is not a coordinate like dp1, pp0 or tp0");
  CHECK(load_error("faults { fault { actor: \"Stage/dp1\" } }") ==
        "t.textproto:1: faults.fault[0].actor: \"Stage/dp1\" is not an actor path: it must start "
        "with an actor kind such as \"stage\"");
  CHECK(load_error("faults { fault { actor: \"stage/dp1/dp2\" } }") ==
        "t.textproto:1: faults.fault[0].actor: \"stage/dp1/dp2\" is not an actor path: coordinate "
        "\"dp\" appears twice");
  CHECK(load_error("faults { fault { actor: \"stage-x\" } }") ==
        "t.textproto:1: faults.fault[0].actor: \"stage-x\" is not an actor path: actor kind "
        "\"stage-x\" may hold only a-z, 0-9 and _");
  CHECK(load_error("faults { fault { actor: \"\" } }") ==
        "t.textproto:1: faults.fault[0].actor: \"\" is not an actor path: it is empty");
  CHECK(load_error("faults { fault { actor: \"coordinator\" step: 0 } }") ==
        "t.textproto:1: faults.fault[0].step: must be 1 or more (updates count from 1), got 0");
  CHECK(load_error("faults {\n  fault {\n    actor: \"coordinator\"\n    step: 41\n  }\n}") ==
        "t.textproto:4: faults.fault[0].step: 41 is past the last update (40 = train_samples / "
        "global_batch_size): the fault would never fire");
  CHECK(load_error("faults { fault { actor: \"coordinator\" step: 40 } }") == "(no error)");
  CHECK(load_error("faults {\n  fault {\n    actor: \"writer/dp0\"\n    kind: TRUNCATE_SHARD\n  }\n}") ==
        "t.textproto:4: faults.fault[0].phase: FORWARD does not fit kind TRUNCATE_SHARD: checkpoint "
        "faults (CORRUPT_SHARD, TRUNCATE_SHARD, FAIL_WRITE) need phase CHECKPOINT_WRITE");
}

TEST_CASE("single-field rules come before the rules that combine fields") {
  // micro_batch_size 0 would divide by zero in the divisibility rule.
  const auto v = violations([] {
    Config c;
    c.mutable_batch()->set_micro_batch_size(0);
    c.mutable_model()->set_width(66);
    return c;
  }());
  REQUIRE(v.size() == 1);
  CHECK(v[0].field == "batch.micro_batch_size");
}

TEST_CASE("a rule on a field left at its default points at the related field that was set") {
  Config c;
  c.mutable_optimizer()->set_lr(1e-5);  // below the default min_lr 1e-4
  Origins o("cfg.textproto");
  o.set("optimizer.lr", "cfg.textproto:7");
  CHECK(error_of([&] { validate(c, o); }) ==
        "cfg.textproto:7: optimizer.min_lr: 0.0001 exceeds optimizer.lr = 1e-05");
  CHECK(load_error("batch {\n  seq_length: 300\n}") ==
        "t.textproto:2: batch.seq_length: 300 exceeds model.max_positions = 256");
  CHECK(load_error("\nmodel {\n  max_positions: 32\n}") ==
        "t.textproto:3: batch.seq_length: 64 exceeds model.max_positions = 32");
  // Nothing relevant set: the source as a whole.
  CHECK(error_of([&] { validate(c, Origins("cfg.textproto")); }) ==
        "cfg.textproto: optimizer.min_lr: 0.0001 exceeds optimizer.lr = 1e-05");
}

TEST_CASE("data.skip_samples: non-negative IDs, each once") {
  CHECK(load_error("data { skip_samples: [4, 9, 2] }") == "(no error)");
  // A list's entries have no line of their own: the error names the data block's.
  CHECK(load_error("data {\n  skip_samples: [4, -1]\n}") ==
        "t.textproto:1: data.skip_samples: entry 1 is -1: sample IDs are non-negative");
  CHECK(load_error("data { skip_samples: 7 skip_samples: 3 skip_samples: 7 }") ==
        "t.textproto:1: data.skip_samples: sample ID 7 is listed twice");
}

TEST_CASE("logging.on_spike ROLLBACK: its counts positive, its checkpoints reachable, one process") {
  CHECK(load_error("logging { on_spike: ROLLBACK rollback_steps: 20 }") == "(no error)");
  CHECK(load_error("logging { on_spike: ROLLBACK rollback_steps: 0 }").find("logging.rollback_steps") !=
        std::string::npos);
  CHECK(load_error("logging { rollback_limit: 0 }").find("logging.rollback_limit") != std::string::npos);
  CHECK(load_error("logging { rollback_skip_samples: -1 }").find("logging.rollback_skip_samples") !=
        std::string::npos);
  // keep_last 3 x interval 5 reaches 11 steps back: 11 is fine, 12 is not.
  CHECK(load_error("checkpoint { interval_steps: 5 keep_last: 3 }\nlogging { on_spike: ROLLBACK rollback_steps: 11 }") ==
        "(no error)");
  CHECK(load_error("checkpoint { interval_steps: 5 keep_last: 3 }\nlogging { on_spike: ROLLBACK rollback_steps: 12 }") ==
        "t.textproto:2: logging.rollback_steps: 12 steps back cannot always be reached: checkpoint.keep_last 3 x "
        "interval_steps 5 keeps checkpoints only 11 steps back (need (keep_last - 1) x interval_steps >= "
        "rollback_steps - 1)");
  // The same settings without ROLLBACK are nobody's business.
  CHECK(load_error("checkpoint { interval_steps: 5 keep_last: 3 }\nlogging { rollback_steps: 12 }") == "(no error)");
  CHECK(load_error("cluster { workers: 2 }\nlogging { on_spike: ROLLBACK }").find("ROLLBACK runs in one process only") !=
        std::string::npos);
}

TEST_CASE("parallel.schedule ZB_H1: two stages at least, no recomputation") {
  CHECK(load_error("parallel { schedule: ZB_H1 }") ==
        "t.textproto:1: parallel.schedule: ZB_H1 needs parallel.pipeline >= 2 (got 1): its weight passes fill the "
        "pipeline's bubble, and one stage has none");
  CHECK(load_error("parallel { schedule: ZB_H1 pipeline: 2 }\nmodel { recompute: SELECTIVE }") ==
        "t.textproto:1: parallel.schedule: ZB_H1 needs model.recompute NONE (got SELECTIVE): the weight pass reads "
        "the activations that recomputation does not keep");
  // Dropout is supported by the split backward.
  CHECK(load_error("parallel { schedule: ZB_H1 pipeline: 2 }\nmodel { hidden_dropout: 0.1 }") == "(no error)");
}
