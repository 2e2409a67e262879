#include "comm/call_agreement.h"

#include <cstdint>
#include <functional>
#include <stdexcept>

namespace ringlab::comm {
namespace {

const char* KindName(int64_t kind) {
  switch (static_cast<CallKind>(kind)) {
    case CallKind::kAllReduce:
      return "AllReduce";
    case CallKind::kBroadcast:
      return "Broadcast";
    case CallKind::kBarrier:
      return "Barrier";
    case CallKind::kAllGather:
      return "AllGather";
  }
  return "?";
}

}  // namespace

std::string CallDescription::ToString() const {
  std::string s = "call #" + std::to_string(seq) + " " +
                  KindName(static_cast<int64_t>(kind)) +
                  "(count=" + std::to_string(count);
  if (kind == CallKind::kAllReduce)
    s += std::string(", op=") + ReduceOpName(op);
  if (kind == CallKind::kBroadcast) s += ", root=" + std::to_string(root);
  return s + ")";
}

void EncodeForAgreement(const CallDescription& call,
                        int64_t buf[kAgreementWords]) {
  const int64_t fields[5] = {call.seq, static_cast<int64_t>(call.kind),
                             static_cast<int64_t>(call.count),
                             static_cast<int64_t>(call.op), call.root};
  for (int i = 0; i < 5; ++i) {
    buf[i] = fields[i];
    buf[5 + i] = -fields[i];
  }
}

void ThrowUnlessAgreed(const char* backend, int rank,
                       const CallDescription& call,
                       const int64_t buf[kAgreementWords]) {
  static const char* const kField[5] = {"call", "kind", "count", "op", "root"};
  auto value = [](int field, int64_t v) {
    return field == 3   ? std::string(ReduceOpName(static_cast<ReduceOp>(v)))
           : field == 1 ? std::string(KindName(v))
                        : std::to_string(v);
  };
  std::string diff;
  for (int i = 0; i < 5; ++i) {
    if (buf[i] == -buf[5 + i]) continue;
    diff += std::string(diff.empty() ? "" : ", ") + kField[i] + "=" +
            value(i, -buf[5 + i]) + " on some ranks, " + kField[i] + "=" +
            value(i, buf[i]) + " on others";
  }
  if (diff.empty()) return;
  throw CommError(std::string(backend) + ": mismatched collectives: rank " +
                  std::to_string(rank) + " is in " + call.ToString() +
                  " but the ranks differ: " + diff);
}

void CheckAllReduceArguments(const char* backend, const float* data,
                             size_t count, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    throw std::invalid_argument(std::string(backend) +
                                ": unsupported reduce op");
  }
  if (data == nullptr && count > 0) {
    throw std::invalid_argument(std::string(backend) +
                                ": AllReduce of null data");
  }
}

void CheckBroadcastArguments(const char* backend, const float* data,
                             size_t count, int root, int world_size) {
  if (root < 0 || root >= world_size) {
    throw std::invalid_argument(std::string(backend) + ": Broadcast root " +
                                std::to_string(root) + " not in [0, " +
                                std::to_string(world_size) + ")");
  }
  if (data == nullptr && count > 0) {
    throw std::invalid_argument(std::string(backend) +
                                ": Broadcast of null data");
  }
}

void CheckAllGatherArguments(const char* backend, const float* send,
                             const float* recv, size_t count, int rank,
                             int world_size) {
  if (count == 0) return;
  if (send == nullptr || recv == nullptr) {
    throw std::invalid_argument(std::string(backend) +
                                ": AllGather of null data");
  }
  const size_t world = static_cast<size_t>(world_size);
  if (count > SIZE_MAX / sizeof(float) / world) {
    throw std::invalid_argument(std::string(backend) + ": AllGather of " +
                                std::to_string(count) + " floats from " +
                                std::to_string(world_size) +
                                " ranks does not fit in memory");
  }
  // std::less gives a total order even on pointers into different objects.
  const std::less<const float*> before;
  const float* in_place = recv + static_cast<size_t>(rank) * count;
  const bool overlaps = before(send, recv + world * count) &&
                        before(recv, send + count) && send != in_place;
  if (overlaps) {
    throw std::invalid_argument(
        std::string(backend) +
        ": AllGather's send buffer overlaps recv other than as this rank's "
        "block (recv + rank * count)");
  }
}

}  // namespace ringlab::comm
