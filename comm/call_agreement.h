// For the backends whose library does not notice ranks that disagree on a
// call (MPI returns partial or wrong results, Gloo hangs or mixes buffers):
// every call first reduces {desc, -desc} with max across the ranks — one
// small allreduce of 10 integers gives every field's maximum and minimum —
// and any difference is reported on every rank alike, before any data moves,
// naming the field with both values ("count=8 on some ranks, count=9 on
// others"). Also the argument checks every backend makes on entry.
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
};

struct CallDescription {
  int64_t seq = 0;  // the call's number on this rank, from 1
  CallKind kind = CallKind::kBarrier;
  size_t count = 0;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;

  // "call #3 AllReduce(count=8, op=sum)".
  std::string ToString() const;
};

// The buffer to max-reduce across ranks: the fields, then their negatives.
inline constexpr int kAgreementWords = 10;
void EncodeForAgreement(const CallDescription& call,
                        int64_t buf[kAgreementWords]);

// After the max-reduction: throws CommError ("<backend>: mismatched
// collectives: rank R is in <call> but the ranks differ: <fields>") unless
// every rank described the same call.
void ThrowUnlessAgreed(const char* backend, int rank,
                       const CallDescription& call,
                       const int64_t buf[kAgreementWords]);

// std::invalid_argument for an op other than sum and avg, or null data with
// a positive count.
void CheckAllReduceArguments(const char* backend, const float* data,
                             size_t count, ReduceOp op);
// std::invalid_argument for a root outside [0, world_size), or null data
// with a positive count.
void CheckBroadcastArguments(const char* backend, const float* data,
                             size_t count, int root, int world_size);
// std::invalid_argument for null buffers with a positive count, a gathered
// size that does not fit in memory, or a send buffer that overlaps recv other
// than as this rank's block (recv + rank * count, in place). Compares
// addresses only, so it serves device pointers too.
void CheckAllGatherArguments(const char* backend, const float* send,
                             const float* recv, size_t count, int rank,
                             int world_size);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_CALL_AGREEMENT_H_
