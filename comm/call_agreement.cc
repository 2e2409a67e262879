#include "comm/call_agreement.h"

#include <stdexcept>

namespace ringlab::comm {
namespace {

const char* KindName(int64_t kind) {
  return kind == static_cast<int64_t>(CallKind::kAllReduce)   ? "AllReduce"
         : kind == static_cast<int64_t>(CallKind::kBroadcast) ? "Broadcast"
                                                              : "Barrier";
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

}  // namespace ringlab::comm
