#include "sync/matmul.h"

#include <cblas.h>

namespace ringlab::sync {

// C = op(A) op(B) for row-major matrices, as torch's bmm calls OpenBLAS
// (addmm_impl_cpu_): sgemm even for one column, but a one-column result is
// laid out column-major, so that call is C (m x 1) = op(A) B in
// column-major terms; a wider one row-major (cblas_sgemm(CblasRowMajor,
// ...), that is C^T = op(B)^T op(A)^T). The two differ in OpenBLAS's
// summation order (checked against torch.bmm: the row-major call for
// P = M q of a 10 x 1024 matrix differed in one element of ten). A
// one-column B (strides 1, 1) is what ATen's rule calls transposed, with
// leading dimension 1: sgemm(op(A), 'T', m, 1, k, ..., b, 1, ...). Where
// OpenBLAS has kernels of its own per transposition (SkylakeX, Cooperlake)
// 'N' with ldb = k sums otherwise (checked against torch.matmul on
// SkylakeX: 963 of 1024 elements of M q differed for a 1024 x 784 M).
void Gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
          const float* a, size_t lda, const float* b, size_t ldb, float* c,
          size_t ldc) {
  if (n == 1 && !trans_b) {
    cblas_sgemm(CblasColMajor, trans_a ? CblasNoTrans : CblasTrans, CblasTrans,
                static_cast<int>(m), 1, static_cast<int>(k), 1.0f, a,
                static_cast<int>(lda), b, 1, 0.0f, c, static_cast<int>(m));
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c,
              static_cast<int>(ldc));
}

}  // namespace ringlab::sync
