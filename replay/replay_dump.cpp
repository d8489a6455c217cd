#include "replay/replay_dump.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "ckpt/reader.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "engine/document_losses.h"
#include "kernels/cpu/cpu_device.h"
#include "metrics/json.h"
#include "metrics/json_records.h"
#include "model/gpt_stage.h"
#include "model/stage_range.h"
#include "util/durable_file.h"

namespace troupe::replay {
namespace {

namespace fs = std::filesystem;

// Printable text of byte-tokenizer IDs: bytes as they are (JSON escapes the rest),
// the end-of-document ID as "\n<EOD>\n".
std::string byte_text(const std::vector<int32_t>& tokens) {
  std::string text;
  for (const int32_t t : tokens) {
    if (t >= 0 && t < 256) text += char(t);
    else text += "\n<EOD>\n";
  }
  return text;
}

}  // namespace

StepDump dump_step(const Config& c, int64_t step, const std::string& checkpoint, const std::string& dir) {
  if (c.device().type() != DeviceConfig::CPU)
    throw std::invalid_argument("--dump runs the model on the CPU device; device.type is not CPU");
  const int threads = c.device().threads() > 0 ? c.device().threads() : int(std::max(1u, std::thread::hardware_concurrency()));
  kernels::cpu::CpuDevice device(threads);
  model::GptStage model(c, model::StageRange::whole(c), device, 1);
  if (!checkpoint.empty()) {
    const auto ck = ckpt::Checkpoint::open(checkpoint);
    if (ck.step() != step - 1)
      throw std::invalid_argument(fmt::format("{}: holds step {}, the dump of step {} needs the weights after step {}",
                                              checkpoint, ck.step(), step, step - 1));
    engine::restore_stage(ck, model);
  } else if (step != 1) {
    throw std::invalid_argument(fmt::format("the dump of step {} needs a checkpoint of step {}", step, step - 1));
  }

  const auto src = data::BatchSource::open(c, data::Split::Train);
  const int64_t consumed = (step - 1) * int64_t(c.batch().global_batch_size());
  const int64_t per_replica = config::microbatches_per_replica(c);
  const bool bytes = c.data().tokenizer() == DataConfig::BYTES;

  StepDump d;
  d.step = step;
  d.dir = dir;
  // The losses by document as a live run's spike record computes them
  // (engine/document_losses.h), from the microbatches in the global batch's order; the
  // tokens of each document (a dump's own) beside them.
  std::map<std::pair<int64_t, int64_t>, DumpedDocument> docs;  // by (dataset, document)
  std::vector<std::vector<msg::SegmentLoss>> segments;
  std::vector<int64_t> ids;
  std::vector<float> losses;
  for (int dp = 0; dp < c.parallel().data(); ++dp) {
    for (int64_t j = 0; j < per_replica; ++j) {
      const data::Microbatch mb = src.microbatch(consumed, dp, int(j));
      model.forward(0, mb);
      const int64_t n = int64_t(mb.batch) * mb.seq;
      losses.resize(size_t(n));
      device.copy_to_host(losses.data(), model.token_losses(0), size_t(n) * sizeof(float));
      segments.push_back(engine::segment_losses(losses.data(), mb));
      ids.insert(ids.end(), mb.sample_ids.begin(), mb.sample_ids.end());
      for (int r = 0; r < mb.batch; ++r) {
        const int64_t id = mb.sample_ids[size_t(r)];
        for (const auto& p : src.pieces_of(id)) {
          DumpedDocument& doc = docs[{p.dataset, p.document}];
          doc.dataset = p.dataset;
          doc.document = p.document;
          if (doc.samples.empty() || doc.samples.back() != id) doc.samples.push_back(id);
          // Input positions [slot, slot + length) of the row come from this piece; the
          // window's last position (index T) is a target only.
          for (int32_t t = p.slot; t < p.slot + p.length && t < mb.seq; ++t)
            doc.tokens.push_back(mb.tokens[size_t(r) * size_t(mb.seq) + size_t(t)]);
        }
      }
    }
  }
  for (const auto& l : engine::document_losses(segments, ids, c.batch().micro_batch_size(), src)) {
    DumpedDocument& doc = docs.at({l.dataset, l.document});
    doc.loss_sum = l.loss_sum;
    doc.loss_tokens = l.loss_tokens;
  }
  for (auto& [id, doc] : docs) {
    d.loss_sum += doc.loss_sum;
    d.loss_tokens += doc.loss_tokens;
    d.documents.push_back(std::move(doc));
  }
  std::stable_sort(d.documents.begin(), d.documents.end(),
                   [](const DumpedDocument& a, const DumpedDocument& b) { return a.loss_mean() > b.loss_mean(); });

  fs::create_directories(dir);
  std::string lines;
  for (const auto& doc : d.documents) {
    metrics::Json j = {{"dataset", doc.dataset},
                       {"prefix", src.prefix_of(int(doc.dataset))},
                       {"document", doc.document},
                       {"samples", doc.samples},
                       {"loss_sum", metrics::json_number(doc.loss_sum)},
                       {"loss_tokens", doc.loss_tokens},
                       {"loss_mean", metrics::json_number(doc.loss_mean())},
                       {"tokens", doc.tokens}};
    j["text"] = bytes ? metrics::Json(byte_text(doc.tokens)) : metrics::Json(nullptr);
    lines += j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace) + "\n";
  }
  util::write_file_atomically((fs::path(dir) / "documents.jsonl").string(), lines);
  const metrics::Json summary = {{"step", step},
                                 {"documents", d.documents.size()},
                                 {"loss_sum", metrics::json_number(d.loss_sum)},
                                 {"loss_tokens", d.loss_tokens},
                                 {"loss", metrics::json_number(d.loss_tokens ? d.loss_sum / double(d.loss_tokens) : 0.0)},
                                 {"weights", checkpoint.empty() ? metrics::Json("initial") : metrics::Json(checkpoint)}};
  util::write_file_atomically((fs::path(dir) / "summary.json").string(), summary.dump(2) + "\n");
  return d;
}

std::string format_dump(const StepDump& d, size_t top) {
  std::string out = fmt::format("\nstep {}: {} documents, loss {:.6f} over {} loss-bearing tokens; written to {}\n",
                                d.step, d.documents.size(), d.loss_tokens ? d.loss_sum / double(d.loss_tokens) : 0.0,
                                d.loss_tokens, d.dir);
  out += fmt::format("{:>10}  {:>10}  {:>7}  {:>12}  {}\n", "document", "mean loss", "tokens", "loss sum", "samples");
  for (size_t i = 0; i < d.documents.size() && i < top; ++i) {
    const auto& doc = d.documents[i];
    std::string ids;
    for (size_t k = 0; k < doc.samples.size(); ++k) {
      if (k) ids += ',';
      ids += std::to_string(doc.samples[k]);
    }
    out += fmt::format("{:>10}  {:>10.4f}  {:>7}  {:>12.4f}  {}\n", doc.document, doc.loss_mean(), doc.loss_tokens,
                       doc.loss_sum, ids);
  }
  return out;
}

}  // namespace troupe::replay
