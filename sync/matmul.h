// torch.matmul of two row-major float32 matrices on a CPU, as Debian's torch
// calls OpenBLAS (addmm_impl_cpu_): the same sgemm call, so the same bits.
// PowerSGD's and DeMo's products go through it.
#ifndef RINGLAB_SYNC_MATMUL_H_
#define RINGLAB_SYNC_MATMUL_H_

#include <cstddef>

namespace ringlab::sync {

// C (m x n) = op(A) op(B), leading dimensions as cblas's row-major ones.
void Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
          const float* a, size_t lda, const float* b, size_t ldb, float* c,
          size_t ldc);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_MATMUL_H_
