// The loops that reduce buffers of one element type, shared by every
// host-memory backend (shm_ring's paths, the mpi adapter's user op, gloo's
// bfloat16 reduction, the test backends) and by the benchmarks' floors. For
// the 16-bit types a value is widened to float32 (exactly), summed in
// float32 and rounded back once per call of a kernel: `add`, `add2` and
// `add_divide2` are one hop of a ring (rounded after every partial sum, as
// gloo's and NCCL's rings round), `sum_into` sums all its sources in float32
// and rounds once. The widening and rounding are vectorised (F16C for
// float16, AVX2 integer arithmetic for bfloat16) where the CPU has them,
// picked once at load time; ScalarKernelsFor is the plain twin every
// vectorised result is tested against, bit for bit.
#ifndef RINGLAB_COMM_DTYPE_KERNELS_H_
#define RINGLAB_COMM_DTYPE_KERNELS_H_

#include <cstddef>

#include "comm/dtype/dtype.h"

namespace ringlab::comm::dtype {

// Pointers marked as outputs may equal an input only where said; n counts
// elements. Buffers need the alignment of their type only.
struct ElementKernels {
  DataType type;
  size_t size;      // bytes per element
  bool vectorised;  // whether these are the SIMD loops
  // out = a + b; out = max(a, b); out = min(a, b) (exact: the 16-bit
  // values compared widened).
  void (*add)(void* out, const void* a, const void* b, size_t n);
  void (*maximum)(void* out, const void* a, const void* b, size_t n);
  void (*minimum)(void* out, const void* a, const void* b, size_t n);
  // acc += in.
  void (*accumulate)(void* acc, const void* in, size_t n);
  // acc = out = acc + in (a ring's last reduce-scatter step keeps and
  // forwards it).
  void (*add2)(void* acc, void* out, const void* in, size_t n);
  // acc = out = (acc + in) / divisor, rounded once.
  void (*add_divide2)(void* acc, void* out, const void* in, float divisor,
                      size_t n);
  // x /= divisor.
  void (*scale)(void* x, float divisor, size_t n);
  // dsts[d][0, n) = the sum of srcs[s][0, n) over s in order, in float32,
  // then divided by `divisor` unless it is 0, rounded once; a destination may
  // be one of the sources. Allocates nothing.
  void (*sum_into)(const void* const* srcs, size_t num_srcs, void* const* dsts,
                   size_t num_dsts, size_t n, float divisor);
  // out = float32 of in (exact), and in rounded to the type.
  void (*widen)(float* out, const void* in, size_t n);
  void (*narrow)(void* out, const float* in, size_t n);
};

// The fastest loops this CPU runs for `type`.
const ElementKernels& KernelsFor(DataType type);
// The scalar loops, the reference for KernelsFor's.
const ElementKernels& ScalarKernelsFor(DataType type);

}  // namespace ringlab::comm::dtype

#endif  // RINGLAB_COMM_DTYPE_KERNELS_H_
