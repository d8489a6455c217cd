// Geometry of tensor pieces: which elements of a global tensor a piece holds, and
// where two pieces overlap.
//
// A rank's local tensor is a box of the global tensor (one DimRange per dimension).
// A region is a row-major flat element range [flat_begin, flat_end) of such a box:
// the whole box without a distributed optimizer, an arbitrary cut of it with one.
// Examples for a global [6, 4] tensor:
//   whole tensor                   box {[0,6), [0,4)}, flat [0, 24)
//   TP2 column block of rank 1     box {[0,6), [2,4)}, flat [0, 12)
//   DP2 flat shard of rank 1       box {[0,6), [0,4)}, flat [12, 24)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::ckpt {

// Global indices [offset, offset + extent) of one dimension.
struct DimRange {
  int64_t offset = 0;
  int64_t extent = 0;
  bool operator==(const DimRange&) const = default;
};

using Shape = std::vector<int64_t>;
using Box = std::vector<DimRange>;

struct Region {
  Box box;
  int64_t flat_begin = 0;
  int64_t flat_end = 0;
  bool operator==(const Region&) const = default;

  int64_t elements() const { return flat_end - flat_begin; }
  // The whole global tensor.
  static Region whole(const Shape& shape);
  // The whole of a box.
  static Region of_box(const Box& box);
};

// Product of the extents (1 for an empty box).
int64_t box_elements(const Box& box);
int64_t shape_elements(const Shape& shape);

// Checks that `shape` has at least one dimension and every dimension is > 0, and
// that `region` lies inside it (box within bounds, 0 <= begin < end <= box elements).
// Throws CheckpointError("<what>: <rule>") otherwise.
void check_region(const Shape& shape, const Region& region, const std::string& what);

// One run of elements held by both regions: `count` consecutive elements starting
// at index `src` of the source's flat range (0 = src.flat_begin) and at index `dst`
// of the destination's.
struct Overlap {
  int64_t src;
  int64_t dst;
  int64_t count;
};

// Calls f(Overlap) for every maximal run along the last dimension of elements that
// both regions (of the same global tensor) hold, in the destination's order.
template <class F>
void for_each_overlap(const Region& src, const Region& dst, F&& f);

// "[2, 3]" / "[0:6, 2:4] flat [0, 12)"; for messages.
std::string shape_string(const Shape& shape);
std::string region_string(const Region& region);
// Row-major coordinates of flat index `index` in `shape`, as "[i, j]".
std::string coordinates_string(const Shape& shape, int64_t index);

}  // namespace troupe::ckpt

#include "ckpt/region_inl.h"
