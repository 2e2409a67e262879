#include "comm/call_agreement.h"

namespace ringlab::comm {
namespace {

const char* const kField[kAgreementFields] = {"call",  "kind", "count",
                                              "dtype", "op",   "root"};

std::string FieldValue(int field, int64_t v) {
  switch (field) {
    case 1:
      return CallKindName(static_cast<CallKind>(v));
    case 3:
      return DataTypeName(static_cast<DataType>(v));
    case 4:
      return ReduceOpName(static_cast<ReduceOp>(v));
    default:
      return std::to_string(v);
  }
}

}  // namespace

const char* CallKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce:
      return "AllReduce";
    case CallKind::kBroadcast:
      return "Broadcast";
    case CallKind::kBarrier:
      return "Barrier";
    case CallKind::kAllGather:
      return "AllGather";
    case CallKind::kReduceScatter:
      return "ReduceScatter";
  }
  return "?";
}

std::string CallDescription::ToString() const {
  std::string s = "call #" + std::to_string(seq) + " " + CallKindName(kind) +
                  "(count=" + std::to_string(count);
  if (type != DataType::kFloat32)
    s += std::string(", dtype=") + DataTypeName(type);
  if (kind == CallKind::kAllReduce)
    s += std::string(", op=") + ReduceOpName(op);
  if (kind == CallKind::kBroadcast) s += ", root=" + std::to_string(root);
  return s + ")";
}

void EncodeForAgreement(const CallDescription& call,
                        int64_t buf[kAgreementWords]) {
  const int64_t fields[kAgreementFields] = {call.seq,
                                            static_cast<int64_t>(call.kind),
                                            static_cast<int64_t>(call.count),
                                            static_cast<int64_t>(call.type),
                                            static_cast<int64_t>(call.op),
                                            call.root};
  for (int i = 0; i < kAgreementFields; ++i) {
    buf[i] = fields[i];
    buf[kAgreementFields + i] = -fields[i];
  }
}

void ThrowUnlessAgreed(const std::string& backend, int rank,
                       const CallDescription& call,
                       const int64_t buf[kAgreementWords]) {
  std::string diff;
  for (int i = 0; i < kAgreementFields; ++i) {
    const int64_t most = buf[i], least = -buf[kAgreementFields + i];
    if (most == least) continue;
    diff += std::string(diff.empty() ? "" : ", ") + kField[i] + "=" +
            FieldValue(i, least) + " on some ranks, " + kField[i] + "=" +
            FieldValue(i, most) + " on others";
  }
  if (diff.empty()) return;
  throw CommError(backend + ": mismatched collectives: rank " +
                  std::to_string(rank) + " is in " + call.ToString() +
                  " but the ranks differ: " + diff);
}

}  // namespace ringlab::comm
