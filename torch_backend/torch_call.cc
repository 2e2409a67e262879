#include "torch_backend/torch_call.h"

#include <cstring>
#include <sstream>

namespace ringlab::torch_backend {

const char* ReduceOpName(int64_t op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

std::string TorchCall::ToString() const {
  std::ostringstream text;
  text << c10d::opTypeToString(op_type) << " of ";
  if (numel != kNone) text << numel << " ";
  text << dtype;
  if (reduce_op != kNone) text << " by " << ReduceOpName(reduce_op);
  if (root != kNone) text << " with root " << root;
  return text.str();
}

bool TorchCall::operator==(const TorchCall& other) const {
  return op_type == other.op_type && dtype == other.dtype &&
         reduce_op == other.reduce_op && numel == other.numel &&
         root == other.root;
}

void EncodeTorchCall(const TorchCall& call, void* out) {
  const int64_t words[5] = {static_cast<int64_t>(call.op_type),
                            static_cast<int64_t>(call.dtype), call.reduce_op,
                            call.numel, call.root};
  std::memcpy(out, words, sizeof(words));
}

TorchCall DecodeTorchCall(const void* in) {
  int64_t words[5];
  std::memcpy(words, in, sizeof(words));
  TorchCall call;
  call.op_type = static_cast<c10d::OpType>(words[0]);
  call.dtype = static_cast<at::ScalarType>(words[1]);
  call.reduce_op = words[2];
  call.numel = words[3];
  call.root = words[4];
  return call;
}

std::string Disagreement(const std::vector<TorchCall>& calls, int rank) {
  // Every rank reports the same pair, whichever rank it is: the lowest
  // rank's call and the first that differs from it. (This rank's own call
  // is one of them, so a rank whose call differs makes some call differ.)
  int first = 0;
  while (first < static_cast<int>(calls.size()) &&
         calls[first].op_type == c10d::OpType::UNKNOWN) {
    ++first;  // a rank that did not say
  }
  for (size_t r = first + 1; r < calls.size(); ++r) {
    const TorchCall& theirs = calls[r];
    if (theirs.op_type == c10d::OpType::UNKNOWN || theirs == calls[first]) {
      continue;
    }
    return "ringlab: ranks disagree on a collective: rank " +
           std::to_string(first) + " is in " + calls[first].ToString() +
           ", rank " + std::to_string(r) + " in " + theirs.ToString() +
           " (raised on rank " + std::to_string(rank) + ")";
  }
  return "";
}

void CheckTorchCalls(const std::vector<TorchCall>& calls, int rank) {
  const std::string disagreement = Disagreement(calls, rank);
  TORCH_CHECK(disagreement.empty(), disagreement);
}

}  // namespace ringlab::torch_backend
