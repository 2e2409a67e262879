// How the front (comm/communicator.h) makes sure that the ranks of a backend
// that cannot tell (MPI returns partial or wrong results, Gloo and NCCL hang
// or mix buffers) are in the same call before any data moves: every call
// first reduces {desc, -desc} with max across the ranks (over the front's
// own connections, comm/call_mesh.h, where the job has a store; else one
// small collective of the backend's) — every field's maximum and minimum — and
// any difference is reported on every rank alike, naming the field with both
// values ("count=8 on some ranks, count=9 on others"). The descriptions'
// text is also what backends that check calls themselves print.
#ifndef RINGLAB_COMM_CALL_AGREEMENT_H_
#define RINGLAB_COMM_CALL_AGREEMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace ringlab::comm {

enum class CallKind : int64_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kAllGather = 4,
  kReduceScatter = 5,
};
const char* CallKindName(CallKind kind);

struct CallDescription {
  int64_t seq = 0;  // the call's number on this rank, from 1
  CallKind kind = CallKind::kBarrier;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;

  // "call #3 AllReduce(count=8, op=sum)"; the type where it is not float32.
  std::string ToString() const;
};

// The buffer to max-reduce across ranks: the fields, then their negatives.
inline constexpr int kAgreementFields = 6;
inline constexpr int kAgreementWords = 2 * kAgreementFields;
void EncodeForAgreement(const CallDescription& call,
                        int64_t buf[kAgreementWords]);

// After the max-reduction: throws CommError ("<backend>: mismatched
// collectives: rank R is in <call> but the ranks differ: <fields>") unless
// every rank described the same call.
void ThrowUnlessAgreed(const std::string& backend, int rank,
                       const CallDescription& call,
                       const int64_t buf[kAgreementWords]);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_CALL_AGREEMENT_H_
