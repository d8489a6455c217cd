#include "ckpt/region.h"

#include "ckpt/error.h"

namespace troupe::ckpt {

Region Region::whole(const Shape& shape) {
  Region r;
  for (int64_t n : shape) r.box.push_back({0, n});
  r.flat_end = shape_elements(shape);
  return r;
}

Region Region::of_box(const Box& box) { return Region{box, 0, box_elements(box)}; }

int64_t box_elements(const Box& box) {
  int64_t n = 1;
  for (const auto& d : box) n *= d.extent;
  return n;
}

int64_t shape_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void check_region(const Shape& shape, const Region& region, const std::string& what) {
  if (shape.empty()) throw CheckpointError(what + ": global shape has no dimensions");
  for (int64_t d : shape)
    if (d <= 0) throw CheckpointError(what + ": global shape " + shape_string(shape) +
                                      " has a dimension <= 0");
  if (region.box.size() != shape.size())
    throw CheckpointError(what + ": slice has " + std::to_string(region.box.size()) +
                          " dimensions, global shape " + shape_string(shape) + " has " +
                          std::to_string(shape.size()));
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto& r = region.box[d];
    if (r.offset < 0 || r.extent <= 0 || r.offset + r.extent > shape[d])
      throw CheckpointError(what + ": slice " + region_string(region) + " dimension " +
                            std::to_string(d) + " is outside global shape " +
                            shape_string(shape));
  }
  const int64_t n = box_elements(region.box);
  if (region.flat_begin < 0 || region.flat_begin >= region.flat_end || region.flat_end > n)
    throw CheckpointError(what + ": flat range [" + std::to_string(region.flat_begin) + ", " +
                          std::to_string(region.flat_end) + ") is empty or outside the " +
                          std::to_string(n) + " elements of its slice");
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string region_string(const Region& region) {
  std::string s = "[";
  for (size_t i = 0; i < region.box.size(); ++i) {
    const auto& r = region.box[i];
    s += (i ? ", " : "") + std::to_string(r.offset) + ":" + std::to_string(r.offset + r.extent);
  }
  return s + "] flat [" + std::to_string(region.flat_begin) + ", " +
         std::to_string(region.flat_end) + ")";
}

std::string coordinates_string(const Shape& shape, int64_t index) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = index % shape[d];
    index /= shape[d];
  }
  return shape_string(c);
}

}  // namespace troupe::ckpt
