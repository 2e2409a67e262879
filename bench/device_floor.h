// The device floor of an allreduce on one GPU: every rank copies its buffer
// into a staging buffer once and adds its buffer into that once (read S,
// write S; read 2S, write S), the least any allreduce does per rank, as
// allreduce_bench's host floor does on the CPU. bench/gpu_threads_bench runs
// it on every rank's stream at once, so that the ranks share the GPU's
// memory bandwidth as their allreduces do.
#ifndef RINGLAB_BENCH_DEVICE_FLOOR_H_
#define RINGLAB_BENCH_DEVICE_FLOOR_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ringlab::bench {

// Enqueues staging = in, then staging += in, on `stream` (two kernels, 16-byte
// loads where both pointers allow). Returns the launches' error; the error
// state is cleared first, so an older error is not taken for these.
cudaError_t LaunchDeviceFloor(const float* in, float* staging, size_t count,
                              cudaStream_t stream);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_DEVICE_FLOOR_H_
