// send, recv and recv from any source, through the group's mailbox
// (mailbox.h): each message opens with the call as torch described it, so
// that a receive of another type or size than was sent is refused, naming
// both. Sends run in order on one thread, receives on another.
#include <cstring>

#include "torch_backend/process_group.h"
#include "torch_backend/tensor_types.h"

namespace ringlab::torch_backend {
namespace {

const at::Tensor& OneTensor(const std::vector<at::Tensor>& tensors,
                            const char* what) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: ", what, " takes one tensor");
  CheckTensor(tensors[0], what);
  return tensors[0];
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::send(
    std::vector<at::Tensor>& tensors, int dst, int tag) {
  const at::Tensor t = OneTensor(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < getSize() && dst != getRank(),
              "ringlab: send to rank ", dst, " from rank ", getRank(), " of ",
              getSize());
  // The tensor is read when the send runs: as over gloo, the caller leaves
  // it alone until the Work completes.
  std::string header(kTorchCallBytes, '\0');
  EncodeTorchCall(
      {c10d::OpType::SEND, t.scalar_type(), TorchCall::kNone, t.numel()},
      header.data());
  return EnqueuePointToPoint(
      c10d::OpType::SEND, {t}, sends_, [this, dst, tag, header, t] {
        mailbox_->Send(dst, tag, header, t.data_ptr(), t.nbytes());
        return getRank();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::Receive(c10d::OpType type,
                                                            const at::Tensor& t,
                                                            int src, int tag) {
  return EnqueuePointToPoint(type, {t}, receives_, [this, t, src, tag] {
    int source = src;
    // The tensor's bytes straight from the connection where the message
    // fits it.
    Mailbox::Sink sink{kTorchCallBytes, t.data_ptr(), t.nbytes()};
    const std::string message = mailbox_->Receive(src, tag, &source, &sink);
    TORCH_CHECK(message.size() >= kTorchCallBytes, "ringlab: rank ", source,
                " sent a message of ", message.size(), " bytes (tag ", tag,
                ")");
    TorchCall sent = DecodeTorchCall(message.data());
    sent.op_type = c10d::OpType::RECV;
    const TorchCall mine{c10d::OpType::RECV, t.scalar_type(), TorchCall::kNone,
                         t.numel()};
    TORCH_CHECK(sent == mine, "ringlab: rank ", getRank(), " in ",
                mine.ToString(), " from rank ", source, ", which sent ",
                sent.numel, " ", sent.dtype, " (tag ", tag, ")");
    if (!sink.filled && t.nbytes() > 0) {
      std::memcpy(t.data_ptr(), message.data() + kTorchCallBytes, t.nbytes());
    }
    return source;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::recv(
    std::vector<at::Tensor>& tensors, int src, int tag) {
  const at::Tensor& t = OneTensor(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < getSize() && src != getRank(),
              "ringlab: recv from rank ", src, " on rank ", getRank(), " of ",
              getSize());
  return Receive(c10d::OpType::RECV, t, src, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  const at::Tensor& t = OneTensor(tensors, "recv");
  return Receive(c10d::OpType::RECVANYSOURCE, t, Mailbox::kAnyRank, tag);
}

}  // namespace ringlab::torch_backend
