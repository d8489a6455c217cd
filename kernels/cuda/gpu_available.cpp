// Is there a GPU this build can run on? Asked once per process; the answer (and the
// reason when it is no) is cached.
#include <mutex>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/launch.h"

namespace troupe::kernels::cuda {
namespace {

std::string describe_error(const char* call, cudaError_t e) {
  return std::string(call) + ": error " + std::to_string(int(e)) + " " + cudaGetErrorName(e) + ": " +
         cudaGetErrorString(e);
}

struct Probe {
  int count = 0;
  bool ok = false;
  std::string why;
};

const Probe& probe() {
  static Probe p;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaError_t e = cudaGetDeviceCount(&p.count);
    if (e != cudaSuccess) {
      p.count = 0;
      p.why = describe_error("cudaGetDeviceCount", e);
      (void)cudaGetLastError();
      return;
    }
    if (p.count == 0) {
      p.why = "cudaGetDeviceCount found no CUDA device";
      return;
    }
    int current = 0;
    (void)cudaGetDevice(&current);
    e = launch::probe_kernel_image();
    if (e != cudaSuccess) {
      cudaDeviceProp prop{};
      (void)cudaGetDeviceProperties(&prop, current);
      p.why = "device " + std::to_string(current) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
              std::to_string(prop.minor) + ") cannot run this build's kernels (sm_90 code + compute_90 PTX): " +
              describe_error("cudaFuncGetAttributes", e);
      (void)cudaGetLastError();
      return;
    }
    p.ok = true;
  });
  return p;
}

}  // namespace

bool gpu_available(std::string* why) {
  const Probe& p = probe();
  if (why) *why = p.why;
  return p.ok;
}

int device_count() { return probe().count; }

}  // namespace troupe::kernels::cuda
