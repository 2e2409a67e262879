#include "torch_backend/tensor_types.h"

#include "torch_backend/torch_call.h"

namespace ringlab::torch_backend {

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "ringlab: ", what,
              ": only CPU tensors so far, not ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "ringlab: ", what, ": only dense ",
              "tensors, not ", t.layout());
  TORCH_CHECK(t.is_contiguous(), "ringlab: ", what,
              ": the tensor must be contiguous");
}

bool RingType(const at::Tensor& t, comm::DataType* type) {
  switch (t.scalar_type()) {
    case at::kFloat:
      *type = comm::DataType::kFloat32;
      return true;
    case at::kHalf:
      *type = comm::DataType::kFloat16;
      return true;
    case at::kBFloat16:
      *type = comm::DataType::kBFloat16;
      return true;
    default:
      return false;
  }
}

bool RingOp(const c10d::ReduceOp& op, comm::ReduceOp* ring) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      *ring = comm::ReduceOp::kSum;
      return true;
    case c10d::ReduceOp::AVG:
      *ring = comm::ReduceOp::kAvg;
      return true;
    case c10d::ReduceOp::MAX:
      *ring = comm::ReduceOp::kMax;
      return true;
    case c10d::ReduceOp::MIN:
      *ring = comm::ReduceOp::kMin;
      return true;
    default:
      return false;
  }
}

void CheckReducible(at::ScalarType s, c10d::ReduceOp::RedOpType op,
                    const char* what) {
  const bool integral = at::isIntegralType(s, /*includeBool=*/true);
  const bool complex = at::isComplexType(s);
  TORCH_CHECK(integral || complex || at::isFloatingType(s), "ringlab: ", what,
              " of ", s, ": only real, complex and integer types reduce");
  switch (op) {
    case c10d::ReduceOp::SUM:
      return;
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      // As gloo: complex numbers only sum.
      TORCH_CHECK(!complex, "ringlab: ", what, " ", ReduceOpName(op), " of ", s,
                  ": complex tensors only sum");
      TORCH_CHECK(s != at::kBool || op == c10d::ReduceOp::PRODUCT,
                  "ringlab: ", what, " ", ReduceOpName(op),
                  " of Bool does not reduce");
      return;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(integral, "ringlab: ", what, " ", ReduceOpName(op), " of ", s,
                  ": bitwise reductions need an integer type");
      return;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!integral, "ringlab: ", what, " AVG of ", s,
                  ": only floating types average");
      return;
    default:
      TORCH_CHECK(false, "ringlab: ", what, " ", ReduceOpName(op), " of ", s,
                  ": this reduction op is not supported");
  }
}

}  // namespace ringlab::torch_backend
