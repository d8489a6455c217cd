// The CPU emulation's runtime: the scheduler that runs kernels, and the host API as
// synchronous calls.
//
// Kernels: blocks run one after another. A kernel's first launch runs every CUDA thread
// of a block as a fiber (own stack, switched by a 20-line x86-64 context switch at
// __syncthreads and warp shuffles). If no thread of that launch reached a barrier, the
// kernel runs in direct mode from then on: threads are plain calls, one after another.
// A direct-mode kernel that does reach a barrier aborts with a message.
//
// Memory: device allocations carry a guard zone after the requested bytes; cudaFree
// checks it and aborts on an out-of-bounds write, naming the allocation size. Fresh
// allocations are filled with 0xff bytes (NaN as floats), like uninitialised GPU memory,
// so a read of something never written shows up in the results.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "troupe_cuda_emulation.h"

// troupe_emu_switch(save, load): saves the callee-saved registers, MXCSR and the x87
// control word on the current stack, stores the stack pointer in *save, and resumes
// the context whose stack pointer is `load` (System V x86-64).
extern "C" void troupe_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl troupe_emu_switch
  .type troupe_emu_switch, @function
troupe_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size troupe_emu_switch, .-troupe_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace troupe_emu {
namespace {

constexpr size_t kStackBytes = 64 * 1024;
constexpr int kWarpSize = 32;

struct Barrier {
  int live = 0, arrived = 0;
  unsigned generation = 0;
};

struct Fiber {
  void* sp = nullptr;
  dim3 tid;
  int warp = 0, lane = 0;
  bool done = false;
};

struct Block {
  dim3 bidx, bdim, gdim;
  std::vector<Fiber> fibers;
  Barrier all;
  std::vector<Barrier> warps;
  std::vector<std::array<unsigned char, 8>> slots;  // shuffle values, per thread
  int current = -1;
  void* scheduler_sp = nullptr;
  const std::function<void()>* body = nullptr;
  uint64_t progress = 0;
  bool direct = false;
  uint64_t barriers = 0;  // barrier calls in this launch
};

Block* g_block = nullptr;
std::vector<std::unique_ptr<char[]>> g_stacks;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}

Fiber& current() {
  if (!g_block || g_block->current < 0) die("device built-in used outside a kernel");
  return g_block->fibers[size_t(g_block->current)];
}

void yield() { troupe_emu_switch(&current().sp, g_block->scheduler_sp); }

void release(Barrier& b) {
  b.arrived = 0;
  ++b.generation;
}

void arrive(Barrier& b) {
  if (g_block->direct) die("a kernel that ran without barriers on its first launch reached one later");
  ++g_block->barriers;
  const unsigned gen = b.generation;
  ++g_block->progress;
  if (++b.arrived == b.live) {
    release(b);
    return;
  }
  while (b.generation == gen) yield();
}

// A thread that returns no longer takes part in barriers.
void leave(Barrier& b) {
  --b.live;
  if (b.arrived > 0 && b.arrived == b.live) release(b);
}

void finish_thread() {
  Fiber& f = current();
  f.done = true;
  ++g_block->progress;
  leave(g_block->all);
  leave(g_block->warps[size_t(f.warp)]);
}

[[noreturn]] void fiber_trampoline() {
  (*g_block->body)();
  finish_thread();
  troupe_emu_switch(&current().sp, g_block->scheduler_sp);
  die("a finished fiber was resumed");
}

// A fresh fiber stack whose first switch "returns" into fiber_trampoline with the
// stack aligned as after a call.
void* fresh_stack(char* base) {
  auto top = (reinterpret_cast<uintptr_t>(base) + kStackBytes) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uint64_t*>(top);
  slot[-2] = reinterpret_cast<uint64_t>(&fiber_trampoline);  // return address; rsp = top - 8 after ret
  for (int i = 3; i <= 8; ++i) slot[-i] = 0;                 // rbp, rbx, r12 .. r15
  slot[-9] = 0x1f80;                                          // MXCSR (at sp + 8)
  slot[-10] = 0x037f;                                         // x87 control word (at sp)
  return &slot[-10];
}

}  // namespace

const dim3& thread_idx() { return current().tid; }
const dim3& block_idx() { return (void)current(), g_block->bidx; }
const dim3& block_dim() { return (void)current(), g_block->bdim; }
const dim3& grid_dim() { return (void)current(), g_block->gdim; }
int lane_id() { return current().lane; }

void syncthreads() { arrive(g_block->all); }

void warp_exchange(const void* in, void* out, int size, int src_lane) {
  Fiber& f = current();
  const size_t base = size_t(f.warp) * kWarpSize;
  std::memcpy(g_block->slots[base + size_t(f.lane)].data(), in, size_t(size));
  arrive(g_block->warps[size_t(f.warp)]);
  const size_t src = base + size_t(src_lane);
  if (src_lane < 0 || src_lane >= kWarpSize || src >= g_block->fibers.size()) die("shuffle from a lane outside the block");
  std::memcpy(out, g_block->slots[src].data(), size_t(size));
  arrive(g_block->warps[size_t(f.warp)]);
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body, Mode& mode) {
  if (g_block) die("kernel launched from inside a kernel");
  const size_t n = size_t(block.x) * block.y * block.z;
  if (n == 0 || n > 1024) die("block size outside 1..1024 threads");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) die("bad grid dimensions");
  const bool direct = mode == Mode::kDirect;
  if (!direct)
    while (g_stacks.size() < n) g_stacks.push_back(std::make_unique<char[]>(kStackBytes));
  uint64_t barriers = 0;
  Block b;
  b.bdim = block;
  b.gdim = grid;
  b.body = &body;
  b.direct = direct;
  b.fibers.resize(n);
  b.slots.resize(n);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        b.bidx = dim3(bx, by, bz);
        b.warps.assign((n + kWarpSize - 1) / kWarpSize, Barrier{});
        b.all = Barrier{};
        b.all.live = int(n);
        b.progress = 0;
        for (size_t i = 0; i < n; ++i) {
          Fiber& f = b.fibers[i];
          f = Fiber{};
          f.tid = dim3(unsigned(i % block.x), unsigned(i / block.x % block.y), unsigned(i / (size_t(block.x) * block.y)));
          f.warp = int(i / kWarpSize);
          f.lane = int(i % kWarpSize);
          b.warps[size_t(f.warp)].live++;
          if (!direct) f.sp = fresh_stack(g_stacks[i].get());
        }
        g_block = &b;
        if (direct) {
          for (size_t i = 0; i < n; ++i) {
            b.current = int(i);
            body();
          }
        } else {
          for (size_t left = n; left > 0;) {
            const uint64_t before = b.progress;
            left = 0;
            for (size_t i = 0; i < n; ++i) {
              if (b.fibers[i].done) continue;
              b.current = int(i);
              troupe_emu_switch(&b.scheduler_sp, b.fibers[i].sp);
              left += !b.fibers[i].done;
            }
            if (left > 0 && b.progress == before) die("deadlock: threads wait at a barrier the others never reach");
          }
        }
        b.current = -1;
        barriers += b.barriers;
        g_block = nullptr;
      }
  if (mode == Mode::kUnknown) mode = barriers == 0 ? Mode::kDirect : Mode::kFibers;
}

}  // namespace troupe_emu

// ---- host API ----------------------------------------------------------------------

namespace {

thread_local cudaError_t g_last = cudaSuccess;
cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

constexpr size_t kHeader = 256, kGuard = 256;
constexpr unsigned char kGuardByte = 0xa5;

}  // namespace

struct CUstream_st {
  int unused = 0;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
};

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidValue);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "troupe CUDA emulation (CPU)");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->totalGlobalMem = size_t(1) << 30;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t cudaMalloc(void** p, size_t bytes) {
  auto* raw = static_cast<unsigned char*>(std::aligned_alloc(256, kHeader + (bytes + 255) / 256 * 256 + kGuard));
  if (!raw) return fail(cudaErrorMemoryAllocation);
  std::memcpy(raw, &bytes, sizeof(bytes));
  std::memset(raw + kHeader, 0xff, bytes);
  std::memset(raw + kHeader + bytes, kGuardByte, (bytes + 255) / 256 * 256 - bytes + kGuard);
  *p = raw + kHeader;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  auto* raw = static_cast<unsigned char*>(p) - kHeader;
  size_t bytes = 0;
  std::memcpy(&bytes, raw, sizeof(bytes));
  const size_t tail = (bytes + 255) / 256 * 256 - bytes + kGuard;
  for (size_t i = 0; i < tail; ++i)
    if (raw[kHeader + bytes + i] != kGuardByte) {
      std::fprintf(stderr, "CUDA emulation: byte %zu past the end of a %zu-byte device allocation was written\n", i,
                   bytes);
      std::abort();
    }
  std::free(raw);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::malloc(bytes ? bytes : 1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) { return e ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  (*e)->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  fn(data);
  return cudaSuccess;
}
