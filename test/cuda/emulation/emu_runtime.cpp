// The CPU emulation's runtime: the scheduler that runs kernels, and the host API as
// synchronous calls.
//
// Kernels: blocks run one after another. A kernel's first launch runs every CUDA thread
// of a block as a fiber (own stack, switched by a 20-line x86-64 context switch at
// __syncthreads and warp shuffles). If no thread of that launch reached a barrier, the
// kernel runs in direct mode from then on: threads are plain calls, one after another.
// A direct-mode kernel that does reach a barrier aborts with a message.
//
// Memory: cudaMalloc carves page-aligned blocks out of one arena, a 16 GiB range of
// address space reserved PROT_NONE at the first allocation (no memory behind it until
// used). Freed blocks go back to a first-fit free list (coalesced; the whole 2 MiB units
// of free space go back to the system) and are reused. The arena up to its high-water mark is made readable
// and writable on entry to the outermost DeviceAccess and PROT_NONE again on its exit,
// under one process-wide lock, so host code that touches device memory faults and the
// device runs one operation at a time. The scheduler's state (g_block, g_stacks, each
// kernel's mode, __shared__ storage) and the arena's bookkeeping are touched only inside
// a DeviceAccess, i.e. under that lock.
//
// Each block has a header before the data (the size, then guard bytes) and guard bytes
// after the requested bytes up to the block's end; cudaFree checks both and aborts on an
// out-of-bounds write, naming the allocation size. Fresh allocations are filled with
// 0xff bytes (NaN as floats), like uninitialised GPU memory, so a read of something never
// written shows up in the results.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
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

// Both only inside a DeviceAccess.
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

// ---- device memory ---------------------------------------------------------------

constexpr size_t kArenaBytes = size_t(16) << 30;
// The arena asks for transparent huge pages: mprotect's cost grows with the page-table
// entries it rewrites, 512 times fewer with 2 MiB pages. So the arena starts on a 2 MiB
// boundary, protection changes cover whole 2 MiB units, and freeing returns only whole
// units to the system (a partial one would split its huge page).
constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kHeader = 256, kGuard = 256;
constexpr unsigned char kGuardByte = 0xa5;

struct Allocation {
  size_t offset, length;  // the block: page-aligned, header and guards included
  size_t bytes;           // as requested; the data starts at offset + kHeader
};

struct Arena {
  unsigned char* base = nullptr;
  size_t reserved = 0, page = 0;
  size_t high = 0;                              // high-water mark: [base, base + high) was ever handed out
  std::map<size_t, size_t> free;                // freed extents below high: offset -> length, coalesced
  std::unordered_map<const void*, Allocation> live;  // by data pointer
};

// Function-local: usable from other translation units' static initialisers.
Arena& arena() {
  static Arena a;
  return a;
}

std::mutex g_device;            // held by the thread inside a DeviceAccess
thread_local int t_depth = 0;   // this thread's nesting of DeviceAccess

size_t huge_up(size_t b) { return (b + kHuge - 1) / kHuge * kHuge; }

void set_access(int prot) {
  const Arena& a = arena();
  if (a.high > 0 && mprotect(a.base, huge_up(a.high), prot) != 0) die("mprotect of the device arena failed");
}

// Reserves the arena at the first allocation: 16 GiB of address space, less where a
// limit on it (ulimit -v) refuses that, down to 1 GiB.
bool reserve(Arena& a) {
  if (a.base) return true;
  for (size_t bytes = kArenaBytes; bytes >= (size_t(1) << 30); bytes /= 2) {
    void* p = mmap(nullptr, bytes + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    auto* raw = static_cast<unsigned char*>(p);
    unsigned char* base = raw + (kHuge - reinterpret_cast<uintptr_t>(raw) % kHuge) % kHuge;
    if (base > raw) munmap(raw, size_t(base - raw));
    munmap(base + bytes, size_t(raw + kHuge - base));
    madvise(base, bytes, MADV_HUGEPAGE);  // a hint; 4 KiB pages work too, only slower
    a.base = base;
    a.reserved = bytes;
    a.page = size_t(sysconf(_SC_PAGESIZE));
    return true;
  }
  return false;
}

// A block of `length` bytes (a multiple of the page size): the first freed extent that
// fits, else above the high-water mark (starting inside a freed extent that ends
// there). Returns the offset, or SIZE_MAX when the arena is full.
size_t take(Arena& a, size_t length) {
  for (auto it = a.free.begin(); it != a.free.end(); ++it) {
    if (it->second < length) continue;
    const size_t at = it->first, rest = it->second - length;
    a.free.erase(it);
    if (rest > 0) a.free.emplace(at + length, rest);
    return at;
  }
  size_t at = a.high;
  auto last = a.free.empty() ? a.free.end() : std::prev(a.free.end());
  if (last != a.free.end() && last->first + last->second == a.high) at = last->first;
  if (length > a.reserved - at) return SIZE_MAX;
  if (last != a.free.end() && at == last->first) a.free.erase(last);
  const size_t open = huge_up(a.high);
  a.high = std::max(a.high, at + length);
  // Inside a DeviceAccess (always, from cudaMalloc) the new pages must be open too.
  if (t_depth > 0 && huge_up(a.high) > open &&
      mprotect(a.base + open, huge_up(a.high) - open, PROT_READ | PROT_WRITE) != 0)
    die("mprotect of the device arena failed");
  return at;
}

// Returns a block to the free list, merged with free neighbours, and the whole 2 MiB
// units of the merged extent to the system (the next use gets zero pages).
void give_back(Arena& a, size_t at, size_t length) {
  auto next = a.free.lower_bound(at);
  if (next != a.free.end() && at + length == next->first) {
    length += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      at = prev->first;
      length += prev->second;
      next = a.free.erase(prev);
    }
  }
  a.free.emplace_hint(next, at, length);
  const size_t from = huge_up(at), to = (at + length) / kHuge * kHuge;
  if (to > from) madvise(a.base + from, to - from, MADV_DONTNEED);
}

// Inside a DeviceAccess.
void* device_malloc(size_t bytes) {
  Arena& a = arena();
  if (!reserve(a) || bytes > a.reserved) return nullptr;
  const size_t length = (kHeader + bytes + kGuard + a.page - 1) / a.page * a.page;
  const size_t at = take(a, length);
  if (at == SIZE_MAX) return nullptr;
  unsigned char* block = a.base + at;
  std::memcpy(block, &bytes, sizeof(bytes));
  std::memset(block + sizeof(bytes), kGuardByte, kHeader - sizeof(bytes));
  std::memset(block + kHeader, 0xff, bytes);
  std::memset(block + kHeader + bytes, kGuardByte, length - kHeader - bytes);
  a.live.emplace(block + kHeader, Allocation{at, length, bytes});
  return block + kHeader;
}

// Inside a DeviceAccess.
void device_free(void* p) {
  Arena& a = arena();
  const auto it = a.live.find(p);
  if (it == a.live.end()) die("cudaFree of a pointer that is not a live cudaMalloc allocation");
  const Allocation al = it->second;
  a.live.erase(it);
  const unsigned char* block = a.base + al.offset;
  size_t stored = 0;
  std::memcpy(&stored, block, sizeof(stored));
  for (size_t i = kHeader; i-- > 0;)
    if (i < sizeof(stored) ? stored != al.bytes : block[i] != kGuardByte) {
      std::fprintf(stderr, "CUDA emulation: byte %zu before the start of a %zu-byte device allocation was written\n",
                   kHeader - i, al.bytes);
      std::abort();
    }
  for (size_t i = kHeader + al.bytes; i < al.length; ++i)
    if (block[i] != kGuardByte) {
      std::fprintf(stderr, "CUDA emulation: byte %zu past the end of a %zu-byte device allocation was written\n",
                   i - kHeader - al.bytes, al.bytes);
      std::abort();
    }
  give_back(a, al.offset, al.length);
}

}  // namespace

DeviceAccess::DeviceAccess() {
  if (t_depth++ > 0) return;
  g_device.lock();
  set_access(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  if (--t_depth > 0) return;
  set_access(PROT_NONE);
  g_device.unlock();
}

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
  DeviceAccess device;
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

}  // namespace

struct CUstream_st {
  int unused = 0;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
};

namespace {
// The emulated GPUs: TROUPE_EMU_GPUS of them (1 when unset), all one CPU sharing one
// arena; the ordinal only names the device a host thread has selected.
int emulated_device_count() {
  static const int n = [] {
    const char* env = std::getenv("TROUPE_EMU_GPUS");
    const int v = env ? std::atoi(env) : 1;
    return v >= 1 && v <= 64 ? v : 1;
  }();
  return n;
}
thread_local int t_device = 0;
}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emulated_device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emulated_device_count()) return fail(cudaErrorInvalidValue);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= emulated_device_count()) return fail(cudaErrorInvalidValue);
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
  if (!p) return fail(cudaErrorInvalidValue);
  troupe_emu::DeviceAccess device;
  *p = troupe_emu::device_malloc(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  troupe_emu::DeviceAccess device;
  troupe_emu::device_free(p);
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
  troupe_emu::DeviceAccess device;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
  troupe_emu::DeviceAccess device;
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
// Host code: runs outside any DeviceAccess, so device memory is out of its reach.
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  if (troupe_emu::t_depth > 0) troupe_emu::die("cudaLaunchHostFunc inside an emulated device operation");
  fn(data);
  return cudaSuccess;
}
