#include "kernels/buffer.h"

#include <stdexcept>

#include "kernels/device.h"

namespace troupe::kernels {

const char* dtype_name(DType t) { return t == DType::kF32 ? "F32" : "I32"; }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    count_ = std::exchange(o.count_, 0);
    dtype_ = o.dtype_;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && device_) device_->release(data_);
  device_ = nullptr;
  data_ = nullptr;
  count_ = 0;
}

namespace {
void expect(DType have, DType want) {
  if (have != want)
    throw std::logic_error(std::string("Buffer holds ") + dtype_name(have) + ", accessed as " +
                           dtype_name(want));
}
}  // namespace

float* Buffer::f32() {
  expect(dtype_, DType::kF32);
  return static_cast<float*>(data_);
}
const float* Buffer::f32() const {
  expect(dtype_, DType::kF32);
  return static_cast<const float*>(data_);
}
int32_t* Buffer::i32() {
  expect(dtype_, DType::kI32);
  return static_cast<int32_t*>(data_);
}
const int32_t* Buffer::i32() const {
  expect(dtype_, DType::kI32);
  return static_cast<const int32_t*>(data_);
}

}  // namespace troupe::kernels
