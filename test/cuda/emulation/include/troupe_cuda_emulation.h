// A CPU emulation of the part of the CUDA runtime, cuBLAS and CUB that kernels/cuda
// uses, so that the CUDA device's own code -- every kernel body, every launch
// geometry, the scratch management and the cuBLAS calls' row-major mapping -- runs
// and is checked against kernels/cpu on machines without a GPU (test_cuda_emulated).
//
// What it is: kernels run on the host thread, block after block; inside a block each
// CUDA thread is a fiber (ucontext), switched at __syncthreads and warp shuffles, so
// barriers and butterflies behave as on the GPU (threads that have returned no longer
// count, as on Volta and later). __shared__ becomes static storage (blocks run one at a
// time). Streams, events and host callbacks are synchronous: work is done when it is
// enqueued. cuBLAS GEMMs are naive column-major loops with fp32 accumulation, bf16
// operands rounded exactly as the GPU would read them; CUB's radix sort is a stable sort.
//
// Device memory is out of the host's reach, as on a GPU: cudaMalloc hands out blocks of
// one reserved address range (the arena) that is mapped PROT_NONE except while an
// emulated device operation runs (a troupe_emu::DeviceAccess: a kernel launch, a copy or
// memset, a cuBLAS or CUB call), so host code that dereferences a device pointer dies
// by SIGSEGV. cudaMallocHost memory is plain host memory. Device operations hold one
// process-wide lock: the emulated device runs one operation at a time, whichever host
// thread enqueues it.
//
// What it is not: a GPU. It cannot show races between blocks, memory-model or alignment
// faults, occupancy, or anything about real cuBLAS; timings mean nothing. While one
// thread's device operation runs, the arena is open to every thread, so a host access
// from another thread at that moment goes unnoticed. The emulated device reports itself
// as "troupe CUDA emulation (CPU)".
//
// Kernel launches `k<<<grid, block, shmem, stream>>>(args)` are not C++: the build
// rewrites them to `::troupe_emu::launch([&](auto... a) { k(a...); }, grid, block, shmem,
// stream)(args)` (transform_launches.cmake) before compiling the .cu files as C++.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>

// ---- types -----------------------------------------------------------------------
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct alignas(16) float4 {
  float x, y, z, w;
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNotReady = 600,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0;
constexpr unsigned cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem;
};
struct cudaFuncAttributes {
  int maxThreadsPerBlock;
};
typedef void (*cudaHostFn_t)(void*);
#define CUDART_CB

// ---- host API (emu_runtime.cpp) ----------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data);
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}

namespace troupe_emu {
// The scope of one emulated device operation: while one is alive on a thread, that
// thread holds the device lock and the whole arena is readable and writable (one
// mprotect on entry, one on exit). Scopes nest on one thread; the outermost one
// decides. Everything in the emulation that reads or writes device memory runs inside
// one; host callbacks (cudaLaunchHostFunc) run outside, as host code.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
}  // namespace troupe_emu

// ---- device side -----------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

namespace troupe_emu {

const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void syncthreads();
// Every live lane of the calling warp publishes `size` bytes at `in`; each then reads
// lane `src`'s bytes into `out`.
void warp_exchange(const void* in, void* out, int size, int src_lane);
int lane_id();
// How a kernel runs: unknown until its first launch, then directly (no thread of the
// first launch reached a barrier: threads run one after another, no fibers) or as fibers.
enum class Mode { kUnknown, kDirect, kFibers };
// Runs body once per thread of every block of the grid (blocks in order), inside a
// DeviceAccess. A kernel in direct mode that reaches a barrier after all aborts with a
// message (never silently).
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body, Mode& mode);

template <class F>
struct Launcher {
  F f;
  dim3 grid, block;
  template <class... A>
  void operator()(A... a) {
    static Mode mode = Mode::kUnknown;  // one per kernel (F is the launch's lambda type)
    const auto args = std::make_tuple(a...);
    run_grid(grid, block, [&] { std::apply(f, args); }, mode);
  }
};
template <class F>
Launcher<F> launch(F f, dim3 grid, dim3 block, size_t /*shared bytes*/, cudaStream_t /*stream*/) {
  return Launcher<F>{f, grid, block};
}

template <class T>
T shfl_xor(T v, int mask) {
  static_assert(sizeof(T) <= 8, "emulated shuffles move at most 8 bytes");
  T r;
  warp_exchange(&v, &r, int(sizeof(T)), lane_id() ^ mask);
  return r;
}

}  // namespace troupe_emu

#define threadIdx (::troupe_emu::thread_idx())
#define blockIdx (::troupe_emu::block_idx())
#define blockDim (::troupe_emu::block_dim())
#define gridDim (::troupe_emu::grid_dim())
inline void __syncthreads() { ::troupe_emu::syncthreads(); }
template <class T>
T __shfl_xor_sync(unsigned /*mask: every live lane takes part*/, T v, int lane_mask) {
  return ::troupe_emu::shfl_xor(v, lane_mask);
}

// IEEE single-precision operations with explicit rounding (the emulation build uses
// -ffp-contract=off, so plain operators round the same way).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// ---- bf16 ------------------------------------------------------------------------
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return {uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return {uint16_t(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
