#include "ckpt/flat_layout.h"

#include <algorithm>

#include "ckpt/error.h"
#include "model/param_registry.h"

namespace troupe::ckpt {

FlatLayout flat_layout(const model::ParameterRegistry& registry) {
  FlatLayout out;
  for (const auto& t : registry.tensors()) {
    LocalTensor l{t.name, t.global_shape, {}, t.offset};
    for (size_t d = 0; d < t.shape.size(); ++d) l.box.push_back({t.slice_start[d], t.shape[d]});
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<FlatPiece> flat_range_pieces(const FlatLayout& layout, TensorKind kind,
                                         int64_t begin, int64_t end) {
  std::vector<FlatPiece> out;
  for (const auto& t : layout) {
    const int64_t n = box_elements(t.box);
    const int64_t b = std::max(begin, t.offset), e = std::min(end, t.offset + n);
    if (b >= e) continue;
    out.push_back({{t.name, kind, t.global_shape, Region{t.box, b - t.offset, e - t.offset}}, b});
  }
  return out;
}

void write_flat_range(ShardWriter& writer, const FlatLayout& layout, TensorKind kind,
                      const float* buffer, int64_t begin, int64_t end) {
  for (const auto& p : flat_range_pieces(layout, kind, begin, end))
    writer.add(p.spec, std::span<const float>(buffer + p.buffer_offset,
                                              size_t(p.spec.region.elements())));
}

void read_flat_range(const Checkpoint& checkpoint, const FlatLayout& layout, TensorKind kind,
                     int64_t begin, int64_t end, float* out) {
  for (const auto& p : flat_range_pieces(layout, kind, begin, end)) {
    if (!checkpoint.has(p.spec.name, kind))
      throw CheckpointError(checkpoint.dir() + ": no tensor " + tensor_label(p.spec.name, kind) +
                            " to load");
    if (checkpoint.shape(p.spec.name, kind) != p.spec.global_shape)
      throw CheckpointError(checkpoint.dir() + ": " + tensor_label(p.spec.name, kind) +
                            " has shape " + shape_string(checkpoint.shape(p.spec.name, kind)) +
                            " in the checkpoint, the layout expects " +
                            shape_string(p.spec.global_shape));
    checkpoint.read_into(p.spec.name, kind, p.spec.region,
                         std::span<float>(out + (p.buffer_offset - begin),
                                          size_t(p.spec.region.elements())));
  }
}

}  // namespace troupe::ckpt
