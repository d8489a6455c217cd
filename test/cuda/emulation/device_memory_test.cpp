// The CPU emulation's device memory (include/troupe_cuda_emulation.h): out of host code's
// reach, as on a GPU -- a host dereference of a cudaMalloc pointer dies by SIGSEGV --
// and within reach of every emulated device operation. The deaths run in forked children.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

// The signal that killed a child running f, or 0 when it exited.
template <class F>
int death_signal(F f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not doctest's handlers: the child just dies
    std::signal(SIGABRT, SIG_DFL);
    if (!std::freopen("/dev/null", "w", stderr)) _exit(2);
    f();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

std::vector<unsigned char> to_host(const void* p, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  REQUIRE(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

__global__ void add_index(float* p, float base) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  p[i] += base + float(i);
}

void launch_add_index(float* p, float base, unsigned blocks) {
  ::troupe_emu::launch([&](auto... a) { add_index(a...); }, dim3(blocks), dim3(32), 0, nullptr)(p, base);
}

volatile unsigned char g_sink;

void CUDART_CB read_device(void* p) { g_sink = *static_cast<volatile unsigned char*>(p); }
void CUDART_CB count(void* n) { ++*static_cast<int*>(n); }

}  // namespace

TEST_CASE("host code that touches device memory dies by SIGSEGV; a copy to the host reads the 0xff fill") {
  float* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1000 * sizeof(float)) == cudaSuccess);
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  CHECK(death_signal([&] { g_sink = *reinterpret_cast<volatile unsigned char*>(p); }) == SIGSEGV);
  CHECK(death_signal([&] { *reinterpret_cast<volatile unsigned char*>(p + 999) = 0; }) == SIGSEGV);
  const auto h = to_host(p, 1000 * sizeof(float));
  size_t ff = 0;
  for (unsigned char b : h) ff += b == 0xff;
  CHECK(ff == h.size());
  CHECK(cudaFree(p) == cudaSuccess);
  // Pinned host memory is host memory.
  void* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, 64) == cudaSuccess);
  static_cast<unsigned char*>(pinned)[63] = 1;
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
}

TEST_CASE("kernels, memsets and copies in every direction reach device memory") {
  constexpr int n = 128;
  float *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(&a, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(a, 0, n * sizeof(float)) == cudaSuccess);
  launch_add_index(a, 1.0f, n / 32);
  REQUIRE(cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
  std::vector<float> h(n, 2.0f);
  REQUIRE(cudaMemcpy(a, h.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  launch_add_index(b, 0.0f, n / 32);
  std::vector<float> ha(n), hb(n);
  REQUIRE(cudaMemcpy(ha.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(hb.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < n; ++i) {
    CHECK(ha[size_t(i)] == 2.0f);
    CHECK(hb[size_t(i)] == 1.0f + 2.0f * float(i));
  }
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
}

TEST_CASE("a host callback runs as host code, outside device access") {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 256) == cudaSuccess);
  int calls = 0;
  CHECK(cudaLaunchHostFunc(nullptr, count, &calls) == cudaSuccess);
  CHECK(calls == 1);
  CHECK(death_signal([&] { cudaLaunchHostFunc(nullptr, read_device, p); }) == SIGSEGV);
  CHECK(cudaFree(p) == cudaSuccess);
}

TEST_CASE("cudaFree aborts on a write past the end or before the start of an allocation") {
  CHECK(death_signal([] {
          void* p = nullptr;
          cudaMalloc(&p, 1000);
          cudaMemsetAsync(p, 0, 1001);
          cudaFree(p);
        }) == SIGABRT);
  CHECK(death_signal([] {
          void* p = nullptr;
          cudaMalloc(&p, 1000);
          cudaMemsetAsync(static_cast<char*>(p) - 1, 0, 1);
          cudaFree(p);
        }) == SIGABRT);
  CHECK(death_signal([] {
          int x = 0;
          cudaFree(&x);  // not a device allocation
        }) == SIGABRT);
}

TEST_CASE("freed blocks are reused, filled afresh; an allocation too large fails") {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  REQUIRE(cudaMalloc(&a, 5000) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, 5000) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(a, 0, 5000) == cudaSuccess);
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaMalloc(&c, 3000) == cudaSuccess);
  CHECK(c == a);
  const auto h = to_host(c, 3000);
  CHECK(h.front() == 0xff);
  CHECK(h.back() == 0xff);
  CHECK(cudaFree(b) == cudaSuccess);
  CHECK(cudaFree(c) == cudaSuccess);

  void* huge = nullptr;
  CHECK(cudaMalloc(&huge, size_t(1) << 40) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
}

TEST_CASE("host threads share the emulated device one operation at a time") {
  constexpr int n = 256, threads = 4;
  std::vector<std::thread> pool;
  std::vector<int> bad(threads, 0);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        float* p = nullptr;
        if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) {
          ++bad[size_t(t)];
          continue;
        }
        cudaMemsetAsync(p, 0, n * sizeof(float));
        launch_add_index(p, float(t), n / 32);
        std::vector<float> h(n);
        cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 0; i < n; ++i) bad[size_t(t)] += h[size_t(i)] != float(t) + float(i);
        cudaFree(p);
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) CHECK(bad[size_t(t)] == 0);
  // Afterwards device memory is closed to the host again.
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 64) == cudaSuccess);
  CHECK(death_signal([&] { g_sink = *static_cast<volatile unsigned char*>(p); }) == SIGSEGV);
  CHECK(cudaFree(p) == cudaSuccess);
}
