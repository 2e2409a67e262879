// What a torch tensor is to a ringlab communicator: whether its element type
// is one the communicator reduces (float32, float16, bfloat16) or only bytes
// it moves, which torch reductions map onto the communicator's, and the
// checks gloo makes of a collective's tensors, with gloo's kind of error (a
// RuntimeError naming the op and the type).
#ifndef RINGLAB_TORCH_BACKEND_TENSOR_TYPES_H_
#define RINGLAB_TORCH_BACKEND_TENSOR_TYPES_H_

#include <ATen/ATen.h>

#include <cstddef>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "comm/communicator.h"

namespace ringlab::torch_backend {

// A CPU tensor, dense and contiguous (as gloo wants them); else a
// RuntimeError naming `what`, the call.
void CheckTensor(const at::Tensor& t, const char* what);
// The communicator's element type for `t`, where it has one.
bool RingType(const at::Tensor& t, comm::DataType* type);
// The communicator's reduction for `op`, where it has one.
bool RingOp(const c10d::ReduceOp& op, comm::ReduceOp* ring);
// Whether rows of `type` reduce by `op` with torch's own ops (the gathered
// path); otherwise a RuntimeError, as gloo's, naming `what`, op and type.
void CheckReducible(at::ScalarType type, c10d::ReduceOp::RedOpType op,
                    const char* what);

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_TENSOR_TYPES_H_
