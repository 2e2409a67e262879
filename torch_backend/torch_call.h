// A collective as torch described it (the op, the reduction, the torch
// element type, the element count, the root), which a gathered call carries
// in front of each rank's data. The communicator sees only words of bytes
// on the gathered and copying paths (an int32 sum gathers float32 words, an
// int64 broadcast moves them), so there it cannot tell ranks that disagree
// apart: every rank compares every row's description with its own after the
// gather and, all seeing the same rows, all refuse alike, naming both sides.
#ifndef RINGLAB_TORCH_BACKEND_TORCH_CALL_H_
#define RINGLAB_TORCH_BACKEND_TORCH_CALL_H_

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace ringlab::torch_backend {

struct TorchCall {
  static constexpr int64_t kNone = -1;  // a field the call does not have
  c10d::OpType op_type = c10d::OpType::UNKNOWN;
  at::ScalarType dtype = at::kByte;
  int64_t reduce_op = kNone;  // c10d::ReduceOp::RedOpType
  int64_t numel = kNone;      // kNone: the ranks' counts may differ
  int64_t root = kNone;

  // "allreduce of 2 Int by MIN", "broadcast of 4 Float from rank 1".
  std::string ToString() const;
  bool operator==(const TorchCall& other) const;
};

// The description's size in a gathered row.
inline constexpr size_t kTorchCallBytes = 5 * sizeof(int64_t);
void EncodeTorchCall(const TorchCall& call, void* out);
TorchCall DecodeTorchCall(const void* in);

// `calls` holds the ranks' descriptions, by rank (one of kind UNKNOWN: a
// rank that did not describe its call, left out). "" when they are equal,
// else what every rank raises: "ringlab: ranks disagree on a collective:
// rank 0 is in ..., rank 1 in ... (raised on rank `rank`)".
std::string Disagreement(const std::vector<TorchCall>& calls, int rank);
// A RuntimeError with the Disagreement unless it is "".
void CheckTorchCalls(const std::vector<TorchCall>& calls, int rank);

// The name of a reduction as torch spells it ("SUM", "BXOR").
const char* ReduceOpName(int64_t op);

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_TORCH_CALL_H_
