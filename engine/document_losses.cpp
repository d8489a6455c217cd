#include "engine/document_losses.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace troupe::engine {

std::vector<msg::SegmentLoss> segment_losses(const float* token_losses, const data::Microbatch& mb) {
  std::vector<msg::SegmentLoss> out;
  const size_t T = size_t(mb.seq);
  for (int32_t r = 0; r < mb.batch; ++r) {
    const size_t base = size_t(r) * T;
    // A row's segments are runs of equal IDs (fill_row numbers them 0, 1, ... in order).
    for (size_t t = 0; t < T;) {
      const int32_t seg = mb.segments[base + t];
      msg::SegmentLoss s{r, seg, 0.0, 0};
      for (; t < T && mb.segments[base + t] == seg; ++t) {
        s.loss_sum += double(token_losses[base + t]);
        s.loss_tokens += mb.loss_mask[base + t] != 0.0f ? 1 : 0;
      }
      if (s.loss_tokens > 0) out.push_back(s);
    }
  }
  return out;
}

std::vector<metrics::DocumentLoss> document_losses(const std::vector<std::vector<msg::SegmentLoss>>& segments,
                                                   const std::vector<int64_t>& sample_ids, int rows,
                                                   const data::BatchSource& src) {
  std::map<std::pair<int32_t, int64_t>, metrics::DocumentLoss> docs;  // by (dataset, document)
  for (size_t i = 0; i < segments.size(); ++i) {
    int32_t pieces_row = -1;
    std::vector<data::BatchSource::SamplePiece> pieces;
    for (const auto& s : segments[i]) {
      const size_t at = i * size_t(rows) + size_t(s.row);
      if (s.row < 0 || s.row >= rows || at >= sample_ids.size())
        throw std::invalid_argument("document_losses: microbatch " + std::to_string(i) + " reports row " +
                                    std::to_string(s.row) + ", outside its " + std::to_string(rows) + " rows");
      const int64_t id = sample_ids[at];
      if (s.row != pieces_row) {
        pieces = src.pieces_of(id);
        pieces_row = s.row;
      }
      if (s.segment < 0 || size_t(s.segment) >= pieces.size())
        throw std::invalid_argument("document_losses: microbatch " + std::to_string(i) + " row " +
                                    std::to_string(s.row) + " reports segment " + std::to_string(s.segment) +
                                    ", but sample " + std::to_string(id) + " has " + std::to_string(pieces.size()) +
                                    " pieces");
      const auto& piece = pieces[size_t(s.segment)];
      metrics::DocumentLoss& d = docs[{piece.dataset, piece.document}];
      d.dataset = piece.dataset;
      d.document = piece.document;
      if (d.samples.empty() || d.samples.back() != id) d.samples.push_back(id);
      d.loss_sum += s.loss_sum;
      d.loss_tokens += s.loss_tokens;
    }
  }
  std::vector<metrics::DocumentLoss> out;
  out.reserve(docs.size());
  for (auto& [id, d] : docs) out.push_back(std::move(d));
  return out;
}

}  // namespace troupe::engine
