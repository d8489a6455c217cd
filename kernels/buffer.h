// Device memory: a Buffer is a typed, move-only block owned by the Device that
// allocated it (CPU memory today, CUDA memory later). Shapes are not stored here:
// every kernel takes its dimensions explicitly, and the model's parameter registry
// records the shape of each named tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace troupe::kernels {

enum class DType : uint8_t { kF32, kI32 };

inline size_t dtype_size(DType t) { return t == DType::kF32 ? sizeof(float) : sizeof(int32_t); }
const char* dtype_name(DType t);

class Device;

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* device, void* data, int64_t count, DType dtype)
      : device_(device), data_(data), count_(count), dtype_(dtype) {}
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;

  // Typed access; throws std::logic_error when the buffer holds another dtype.
  float* f32();
  const float* f32() const;
  int32_t* i32();
  const int32_t* i32() const;

  int64_t count() const { return count_; }
  size_t bytes() const { return size_t(count_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device* device() const { return device_; }
  bool empty() const { return data_ == nullptr; }

  void reset();

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  int64_t count_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace troupe::kernels
