// `supervisor inspect-update`: one update on one device, recorded for inspection
// (docs/acceptance.md, part "First"). Everything it writes can be recomputed independently:
// tools/reference_update.py verify DIR does that with PyTorch.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <google/protobuf/text_format.h>

#include "apps/supervisor/cli_args.h"
#include "apps/supervisor/config_args.h"
#include "apps/supervisor/update_json.h"
#include "config/derived.h"
#include "config/model_family.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "model/named_tensors.h"
#include "model/safetensors.h"
#include "engine/reference_trainer.h"
#include "util/durable_file.h"

namespace troupe::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

const char* kUsage =
    "usage: supervisor inspect-update [CONFIG] [--set PATH=VALUE]... [--megatron-args FILE]\n"
    "                                 [--init FILE] [--out DIR] [--threads N]\n\n"
    "Runs ONE update on one CPU device and records it: the config's initial weights\n"
    "(or --init FILE), its first global batch (every data-parallel replica's microbatches\n"
    "in assignment order), forward, backward, the global gradient norm, clipping and AdamW.\n"
    "Writes into DIR (default RUN_DIR/inspect-update):\n"
    "  config.textproto            the resolved config\n"
    "  batch.safetensors           tokens, targets, positions, segments [S, T] (I32),\n"
    "                              loss_mask [S, T] (F32), sample_ids [S] (I64)\n"
    "  params_initial.safetensors  every parameter before the update\n"
    "  grads.safetensors           every gradient, before clipping\n"
    "  params_updated.safetensors  every parameter after the update\n"
    "  adam_m.safetensors          Adam first moments after the update\n"
    "  adam_v.safetensors          Adam second moments after the update\n"
    "  update.json                 loss, loss-bearing tokens, grad norm, clipping, lr,\n"
    "                              the hyperparameters used and both decay groups\n"
    "Tensors carry the family's Hugging Face names (GPT-2's wte.weight, Llama's\n"
    "model.embed_tokens.weight and lm_head.weight have vocab_size rows: the vocabulary\n"
    "padding is dropped). `tools/reference_update.py verify DIR` recomputes the\n"
    "update with PyTorch and compares.\n\n"
    "options:\n";

const char* kOwnOptions =
    "  --init FILE     start from the weights in FILE (safetensors, GPT-2 names, e.g. a\n"
    "                  Hugging Face gpt2 model.safetensors or `supervisor export` output)\n"
    "  --out DIR       output directory (created; files are replaced atomically)\n"
    "  --threads N     compute threads (default: device.threads, or all cores)\n"
    "  -h, --help      this text\n";

const char* decay_style_name(LrScheduleConfig::DecayStyle s) {
  switch (s) {
    case LrScheduleConfig::LINEAR: return "LINEAR";
    case LrScheduleConfig::CONSTANT: return "CONSTANT";
    default: return "COSINE";
  }
}

std::vector<float> download(kernels::Device& dev, const float* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dev.copy_to_host(out.data(), p, out.size() * sizeof(float));
  return out;
}

// The batch as [S, T] tensors, rows in the order the trainer consumed them.
std::vector<model::StTensor> batch_tensors(const std::vector<data::Microbatch>& mbs) {
  std::vector<int32_t> tokens, targets, positions, segments;
  std::vector<float> mask;
  std::vector<int64_t> ids;
  int64_t rows = 0;
  for (const auto& mb : mbs) {
    tokens.insert(tokens.end(), mb.tokens.begin(), mb.tokens.end());
    targets.insert(targets.end(), mb.targets.begin(), mb.targets.end());
    positions.insert(positions.end(), mb.positions.begin(), mb.positions.end());
    segments.insert(segments.end(), mb.segments.begin(), mb.segments.end());
    mask.insert(mask.end(), mb.loss_mask.begin(), mb.loss_mask.end());
    ids.insert(ids.end(), mb.sample_ids.begin(), mb.sample_ids.end());
    rows += mb.batch;
  }
  const int64_t T = mbs.front().seq;
  return {model::StTensor::i32("tokens", {rows, T}, tokens.data()),
          model::StTensor::i32("targets", {rows, T}, targets.data()),
          model::StTensor::i32("positions", {rows, T}, positions.data()),
          model::StTensor::i32("segments", {rows, T}, segments.data()),
          model::StTensor::f32("loss_mask", {rows, T}, mask.data()),
          model::StTensor::i64("sample_ids", {rows}, ids.data())};
}

}  // namespace

int inspect_update_main(int argc, char** argv) {
  ConfigArgs config_args;
  std::string init_path, out_dir;
  int threads = 0;
  CommandLine cmd("inspect-update");
  add_config_options(cmd.options, cmd.positional, config_args);
  cmd.options.add_options()
      ("init", po::value<std::string>(&init_path))
      ("out", po::value<std::string>(&out_dir))
      ("threads", po::value<int>(&threads))
      ("help,h", "");
  if (const auto status = cmd.parse(argc, argv, std::string(kUsage) + config_options_help() + kOwnOptions))
    return *status;
  const LoadedConfig loaded = load_config(config_args);
  const Config& cfg = loaded.config;
  if (cfg.device().type() != DeviceConfig::CPU)
    throw std::invalid_argument("device.type: inspect-update runs on the CPU device (the CUDA backend is not built)");
  if (threads == 0) threads = cfg.device().threads() > 0 ? cfg.device().threads() : int(std::thread::hardware_concurrency());
  if (threads < 1) throw std::invalid_argument("--threads " + std::to_string(threads) + ": must be at least 1");
  if (out_dir.empty()) out_dir = (fs::path(cfg.logging().run_dir()) / "inspect-update").string();
  fs::create_directories(out_dir);

  // The first global batch: replica-major, then microbatch (the assignment order).
  const data::BatchSource source = data::BatchSource::open(cfg);
  std::vector<data::Microbatch> mbs;
  const int64_t per_replica = config::microbatches_per_replica(cfg);
  for (int dp = 0; dp < cfg.parallel().data(); ++dp)
    for (int64_t j = 0; j < per_replica; ++j) mbs.push_back(source.microbatch(0, dp, int(j)));

  kernels::cpu::CpuDevice dev(threads);
  engine::ReferenceTrainer trainer(cfg, dev);
  model::GptStage& m = trainer.model();
  const model::ParameterRegistry& reg = m.registry();
  const int64_t n = m.param_count();
  if (!init_path.empty()) {
    std::vector<float> host(static_cast<size_t>(n));
    model::import_tensors(reg, model::read_safetensors(init_path), host.data());
    dev.copy_from_host(m.params(), host.data(), host.size() * sizeof(float));
  }
  const std::vector<float> initial = download(dev, m.params(), n);

  const engine::StepReport r = trainer.step(mbs);

  const auto path = [&](const char* name) { return (fs::path(out_dir) / name).string(); };
  std::string text;
  google::protobuf::TextFormat::PrintToString(cfg, &text);
  util::write_file_atomically(path("config.textproto"),
                        "# The resolved config of this inspect-update run: " + loaded.describe() + "\n" + text);
  const std::map<std::string, std::string> meta = {{"producer", "supervisor inspect-update"}, {"config", loaded.describe()}};
  model::write_safetensors(path("batch.safetensors"), batch_tensors(mbs), meta);
  model::write_safetensors(path("params_initial.safetensors"), model::export_tensors(reg, initial.data()), meta);
  model::write_safetensors(path("grads.safetensors"), model::export_tensors(reg, download(dev, m.grads(), n).data()), meta);
  model::write_safetensors(path("params_updated.safetensors"), model::export_tensors(reg, download(dev, m.params(), n).data()), meta);
  model::write_safetensors(path("adam_m.safetensors"), model::export_tensors(reg, download(dev, trainer.optimizer().m(), n).data()), meta);
  model::write_safetensors(path("adam_v.safetensors"), model::export_tensors(reg, download(dev, trainer.optimizer().v(), n).data()), meta);

  const data::BatchCounts counts = source.global_counts(0);
  const auto& mc = cfg.model();
  const auto& oc = cfg.optimizer();
  metrics::Json j;
  j["config_source"] = loaded.describe();
  j["init"] = init_path.empty() ? "config seed " + std::to_string(cfg.training().seed()) : init_path;
  const metrics::Json numbers = update_numbers(r, counts);
  for (const auto& [key, value] : numbers.items()) j[key] = value;
  j["successful_updates"] = trainer.successful_updates();
  j["consumed_samples"] = trainer.consumed_samples();
  j["microbatches"] = mbs.size();
  j["threads"] = threads;
  j["parameters"] = n;
  j["config"] = {{"architecture", config::model_family(mc).name},
                 {"kv_heads", config::kv_heads(mc)}, {"head_dim", config::head_size(mc)},
                 {"ffn_width", config::ffn_width(mc)},
                 {"tied_embeddings", mc.tied_embeddings()}, {"rope_theta", mc.rope_theta()},
                 {"norm_eps", config::norm_eps(mc)},
                 {"hidden_dropout", mc.hidden_dropout()}, {"attention_dropout", mc.attention_dropout()},
                 {"layers", mc.layers()}, {"heads", mc.heads()}, {"width", mc.width()},
                 {"vocab_size", mc.vocab_size()}, {"padded_vocab", config::padded_vocab(cfg)},
                 {"vocab_pad_multiple", mc.vocab_pad_multiple() * cfg.parallel().tensor()},
                 {"max_positions", mc.max_positions()}, {"layernorm_eps", mc.layernorm_eps()},
                 {"lr", oc.lr()}, {"min_lr", oc.min_lr()}, {"warmup_init", oc.warmup_init()},
                 {"beta1", oc.beta1()}, {"beta2", oc.beta2()}, {"eps", oc.eps()},
                 {"weight_decay", oc.weight_decay()}, {"clip_grad", oc.clip_grad()},
                 {"warmup_samples", cfg.lr_schedule().warmup_samples()},
                 {"decay_samples", config::decay_samples(cfg)},
                 {"decay_style", decay_style_name(cfg.lr_schedule().decay_style())},
                 {"global_batch_size", cfg.batch().global_batch_size()},
                 {"micro_batch_size", cfg.batch().micro_batch_size()}, {"seq_length", cfg.batch().seq_length()}};
  j["decay"] = reg.names(model::DecayGroup::kDecay);
  j["no_decay"] = reg.names(model::DecayGroup::kNoDecay);
  util::write_file_atomically(path("update.json"), j.dump(2) + "\n");

  std::printf("inspect-update: %s\n", loaded.describe().c_str());
  std::printf("  model       %s, %d layers, width %d, %d heads (%lld kv), vocab %d (padded %lld), %lld parameters\n",
              config::model_family(mc).name, mc.layers(), mc.width(), mc.heads(),
              (long long)config::kv_heads(mc), mc.vocab_size(), (long long)config::padded_vocab(cfg), (long long)n);
  std::printf("  weights     %s\n", j["init"].get<std::string>().c_str());
  std::printf("  batch       %lld samples x %d tokens in %zu microbatches; %lld loss-bearing, %lld padding\n",
              (long long)r.samples, cfg.batch().seq_length(), mbs.size(), (long long)r.loss_tokens,
              (long long)counts.padding_tokens);
  std::printf("  loss        %.6f  (%.4f / %lld tokens)\n", r.loss, r.loss_sum, (long long)r.loss_tokens);
  std::printf("  grad norm   %.6g before clipping; %s\n", r.grad_norm,
              r.skipped ? "NOT FINITE: update skipped"
                        : r.clipped ? ("clipped to " + std::to_string(oc.clip_grad()) + " (factor " +
                                       std::to_string(r.clip_factor) + ")").c_str()
                                    : "not clipped");
  std::printf("  lr          %.6g (update 1 of the schedule)\n", r.lr);
  std::printf("  %s\n", trainer.describe_groups().c_str());
  std::printf("  wrote       %s/{config.textproto, batch, params_initial, grads, params_updated, adam_m, adam_v}.safetensors, update.json\n",
              out_dir.c_str());
  return 0;
}

}  // namespace troupe::cli
