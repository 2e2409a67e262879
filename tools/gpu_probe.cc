// What the GPU check prints about a machine before it runs anything, as the
// CUDA runtime itself sees it: runtime and driver versions, every device
// (name, compute capability, memory, SMs, PCI bus, compute mode — under
// Exclusive_Process every second rank's context fails —, whether it maps
// host memory, host-native atomics, concurrent kernels), whether a context
// can actually be created on each, and NCCL's version when it is linked in.
// Exits 0 when at least one device is usable, 1 otherwise ("probe: FAIL
// <why>" is its last line), so that a broken driver or library path reads
// as a failure, never as a machine with nothing to test.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#ifdef RINGLAB_WITH_NCCL
#include <nccl.h>
#endif

#include "cli/usage_error.h"

namespace {

std::string Error(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) +
         ")";
}

const char* ComputeMode(int mode) {
  switch (mode) {
    case cudaComputeModeDefault:
      return "Default";
    case cudaComputeModeExclusive:
      return "Exclusive_Thread";
    case cudaComputeModeProhibited:
      return "Prohibited";
    case cudaComputeModeExclusiveProcess:
      return "Exclusive_Process";
  }
  return "unknown";
}

int Attribute(cudaDeviceAttr attr, int device) {
  int value = -1;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) return -1;
  return value;
}

// Prints one device; true when a context could be made current on it.
bool ProbeDevice(int d) {
  char name[256] = "?";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
    std::snprintf(name, sizeof(name), "%s", prop.name);
  }
  char bus[64] = "?";
  cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
  const int mode = Attribute(cudaDevAttrComputeMode, d);
  std::printf(
      "device %d: %s, sm_%d%d, %.1f GiB, %d SMs, bus %s, compute mode %s, "
      "map host memory %d, host-native atomics %d, concurrent kernels %d\n",
      d, name, Attribute(cudaDevAttrComputeCapabilityMajor, d),
      Attribute(cudaDevAttrComputeCapabilityMinor, d),
      static_cast<double>(prop.totalGlobalMem) / (1 << 30),
      Attribute(cudaDevAttrMultiProcessorCount, d), bus, ComputeMode(mode),
      Attribute(cudaDevAttrCanMapHostMemory, d),
      Attribute(cudaDevAttrHostNativeAtomicSupported, d),
      Attribute(cudaDevAttrConcurrentKernels, d));
  if (mode == cudaComputeModeExclusiveProcess ||
      mode == cudaComputeModeExclusive) {
    std::printf(
        "device %d: WARNING: exclusive compute mode: ranks that share it as "
        "processes (ipc_ring) fail after the first\n",
        d);
  }
  cudaError_t err = cudaSetDevice(d);
  if (err == cudaSuccess) err = cudaFree(nullptr);  // creates the context
  if (err != cudaSuccess) {
    std::printf("device %d: no context: %s\n", d, Error(err).c_str());
    return false;
  }
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("device %d: context OK, %.1f of %.1f GiB free\n", d,
              static_cast<double>(free_bytes) / (1 << 30),
              static_cast<double>(total) / (1 << 30));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    ringlab::cli::ExitWithUsageError(
        std::string("gpu_probe takes no arguments, got '") + argv[1] + "'");
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t driver_err = cudaDriverGetVersion(&driver);
  std::printf("cuda runtime: %d.%d (built with %d.%d)\n", runtime / 1000,
              runtime % 1000 / 10, CUDART_VERSION / 1000,
              CUDART_VERSION % 1000 / 10);
  if (driver_err != cudaSuccess || driver == 0) {
    std::printf("cuda driver: none (%s)\n", driver_err != cudaSuccess
                                                ? Error(driver_err).c_str()
                                                : "no driver installed");
  } else {
    std::printf("cuda driver: supports CUDA %d.%d\n", driver / 1000,
                driver % 1000 / 10);
  }
#ifdef RINGLAB_WITH_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    std::printf("nccl: %d.%d.%d (built with %d.%d.%d)\n", nccl / 10000,
                nccl / 100 % 100, nccl % 100, NCCL_MAJOR, NCCL_MINOR,
                NCCL_PATCH);
  } else {
    std::printf("nccl: ncclGetVersion failed\n");
  }
#else
  std::printf("nccl: not built (no NCCL when CUDA was configured)\n");
#endif
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    std::printf("devices: 0\nprobe: FAIL cudaGetDeviceCount: %s\n",
                Error(err).c_str());
    return 1;
  }
  std::printf("devices: %d\n", count);
  int usable = 0;
  for (int d = 0; d < count; ++d) usable += ProbeDevice(d);
  if (usable == 0) {
    std::printf("probe: FAIL %s\n",
                count == 0 ? "no CUDA device" : "no device takes a context");
    return 1;
  }
  std::printf("probe: OK %d usable device(s)\n", usable);
  return 0;
}
