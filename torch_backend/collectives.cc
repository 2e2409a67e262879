// The collectives DDP and its hooks use (broadcast, allreduce, allgather,
// barrier), on the communicator's own calls where it has the element type,
// and the gathered path beneath every collective built here.
#include <cstring>
#include <future>

#include "comm/backend.h"
#include "torch_backend/process_group.h"
#include "torch_backend/tensor_types.h"

namespace ringlab::torch_backend {

ProcessGroupRinglab::RingCall ProcessGroupRinglab::GatherCall(size_t bytes) {
  // float32 words: every backend moves them; each row opens with the call.
  return {comm::CallKind::kAllGather, (kTorchCallBytes + bytes + 3) / 4};
}

ProcessGroupRinglab::RingCall ProcessGroupRinglab::BroadcastCall(size_t bytes,
                                                                 int root) {
  return {comm::CallKind::kBroadcast, (bytes + 3) / 4, comm::DataType::kFloat32,
          comm::ReduceOp::kSum, root};
}

at::Tensor ProcessGroupRinglab::GatherChecked(comm::Communicator& comm,
                                              const TorchCall& call,
                                              const void* data, size_t bytes) {
  const size_t words = GatherCall(bytes).count;
  const int64_t row = static_cast<int64_t>(words * 4);
  at::Tensor mine = at::zeros({row}, at::kByte);
  EncodeTorchCall(call, mine.data_ptr());
  if (bytes > 0) {
    std::memcpy(static_cast<char*>(mine.data_ptr()) + kTorchCallBytes, data,
                bytes);
  }
  at::Tensor rows = at::empty({getSize(), row}, at::kByte);
  comm.AllGather(mine.data_ptr(), rows.data_ptr(), words,
                 comm::DataType::kFloat32);
  std::vector<TorchCall> calls;
  for (int r = 0; r < getSize(); ++r) {
    calls.push_back(DecodeTorchCall(rows[r].data_ptr()));
  }
  CheckTorchCalls(calls, getRank());
  return rows.narrow(1, kTorchCallBytes, static_cast<int64_t>(bytes));
}

void ProcessGroupRinglab::BroadcastBytes(comm::Communicator& comm, void* data,
                                         size_t bytes, int root) {
  const size_t words = BroadcastCall(bytes, root).count;
  if (bytes == words * 4) {
    comm.Broadcast(data, words, comm::DataType::kFloat32, root);
    return;
  }
  at::Tensor padded = at::zeros({static_cast<int64_t>(words * 4)}, at::kByte);
  std::memcpy(padded.data_ptr(), data, bytes);
  comm.Broadcast(padded.data_ptr(), words, comm::DataType::kFloat32, root);
  std::memcpy(data, padded.data_ptr(), bytes);
}

void ProcessGroupRinglab::StagedAllReduce(Channel& channel, const at::Tensor& t,
                                          comm::DataType type,
                                          comm::ReduceOp op) {
  const size_t bytes = t.nbytes();
  if (bytes > channel.staged_bytes) {
    size_t grown = std::max<size_t>(channel.staged_bytes, 4096);
    while (grown < bytes) grown *= 2;
    channel.staged = channel.comm->Allocate(grown / sizeof(float));
    channel.staged_bytes = grown;
  }
  std::memcpy(channel.staged, t.data_ptr(), bytes);
  channel.comm->AllReduce(channel.staged, static_cast<size_t>(t.numel()), type,
                          op);
  std::memcpy(t.data_ptr(), channel.staged, bytes);
}

void ProcessGroupRinglab::GatheredAllReduce(comm::Communicator& comm,
                                            const at::Tensor& t,
                                            const TorchCall& call) {
  const at::Tensor rows = GatherChecked(comm, call, t.data_ptr(), t.nbytes())
                              .contiguous()
                              .view(t.scalar_type());
  // Row after row, in rank order: the same on every rank, and defined for
  // every type torch's elementwise ops take (its prod and sum kernels lack
  // Half on CPU).
  at::Tensor result = rows[0].clone();
  for (int r = 1; r < getSize(); ++r) {
    const at::Tensor row = rows[r];
    switch (call.reduce_op) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::AVG:
        result.add_(row);
        break;
      case c10d::ReduceOp::PRODUCT:
        result.mul_(row);
        break;
      case c10d::ReduceOp::MIN:
        result = at::minimum(result, row);
        break;
      case c10d::ReduceOp::MAX:
        result = at::maximum(result, row);
        break;
      case c10d::ReduceOp::BAND:
        result.bitwise_and_(row);
        break;
      case c10d::ReduceOp::BOR:
        result.bitwise_or_(row);
        break;
      default:  // BXOR (CheckReducible let nothing else through)
        result.bitwise_xor_(row);
    }
  }
  if (call.reduce_op == c10d::ReduceOp::AVG) result.div_(getSize());
  t.view(-1).copy_(result);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::AllReduceInto(
    c10d::OpType type, std::vector<at::Tensor> outputs, const at::Tensor& t,
    c10d::ReduceOp op, std::function<void()> after) {
  const std::string what = c10d::opTypeToString(type);
  comm::DataType ring_type;
  comm::ReduceOp ring_op;
  const comm::BackendDescription& backend =
      channels_.front()->comm->description();
  if (RingType(t, &ring_type) && RingOp(op, &ring_op) &&
      backend.Supports(ring_type) && backend.Supports(ring_op)) {
    const size_t count = static_cast<size_t>(t.numel());
    return Enqueue(type, std::move(outputs),
                   {{comm::CallKind::kAllReduce, count, ring_type, ring_op}},
                   [this, t, ring_type, ring_op, count, after](Channel& c) {
                     if (staging_) {
                       StagedAllReduce(c, t, ring_type, ring_op);
                     } else {
                       c.comm->AllReduce(t.data_ptr(), count, ring_type,
                                         ring_op);
                     }
                     if (after) after();
                   });
  }
  CheckReducible(t.scalar_type(), op.op_, what.c_str());
  TorchCall call{type, t.scalar_type(), op.op_, t.numel()};
  return Enqueue(type, std::move(outputs), {GatherCall(t.nbytes())},
                 [this, t, call, after](Channel& c) {
                   GatheredAllReduce(*c.comm, t, call);
                   if (after) after();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: broadcast takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "ringlab: broadcast from rank ",
              root, " of ", getSize());
  comm::DataType type;
  if (RingType(t, &type)) {  // the communicator checks type and count
    const size_t count = static_cast<size_t>(t.numel());
    return Enqueue(
        c10d::OpType::BROADCAST, {t},
        {{comm::CallKind::kBroadcast, count, type, comm::ReduceOp::kSum, root}},
        [t, type, count, root](Channel& channel) {
          channel.comm->Broadcast(t.data_ptr(), count, type, root);
        });
  }
  // Bytes: the ranks first check that they agree on what they are.
  const TorchCall call{c10d::OpType::BROADCAST, t.scalar_type(),
                       TorchCall::kNone, t.numel(), root};
  return Enqueue(c10d::OpType::BROADCAST, {t},
                 {GatherCall(0), BroadcastCall(t.nbytes(), root)},
                 [this, t, call, root](Channel& channel) {
                   GatherChecked(*channel.comm, call, nullptr, 0);
                   BroadcastBytes(*channel.comm, t.data_ptr(), t.nbytes(),
                                  root);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: allreduce takes one tensor");
  const at::Tensor t = tensors[0];
  if (t.is_sparse()) return SparseAllReduce(t, opts.reduceOp);
  CheckTensor(t, "allreduce");
  return AllReduceInto(c10d::OpType::ALLREDUCE, {t}, t, opts.reduceOp, nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "ringlab: allgather takes one input and one list of outputs");
  const at::Tensor in = inputs[0];
  CheckTensor(in, "allgather");
  const std::vector<at::Tensor> out = outputs[0];
  TORCH_CHECK(static_cast<int>(out.size()) == getSize(),
              "ringlab: allgather needs one output per rank");
  for (const at::Tensor& o : out) {
    CheckTensor(o, "allgather");
    TORCH_CHECK(o.scalar_type() == in.scalar_type() && o.numel() == in.numel(),
                "ringlab: allgather's outputs must match its input");
  }
  const TorchCall call{c10d::OpType::ALLGATHER, in.scalar_type(),
                       TorchCall::kNone, in.numel()};
  return Enqueue(c10d::OpType::ALLGATHER, out, {GatherCall(in.nbytes())},
                 [this, in, out, call](Channel& c) {
                   const at::Tensor rows =
                       GatherChecked(*c.comm, call, in.data_ptr(), in.nbytes());
                   for (int r = 0; r < getSize(); ++r) {
                     std::memcpy(out[r].data_ptr(), rows[r].data_ptr(),
                                 in.nbytes());
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  CheckTensor(input, "allgather");
  CheckTensor(output, "allgather");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == getSize() * input.numel(),
              "ringlab: allgather's output must hold every rank's input");
  const at::Tensor in = input, out = output;
  comm::DataType type;
  if (RingType(in, &type)) {  // the communicator checks type and count
    const size_t count = static_cast<size_t>(in.numel());
    return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out},
                   {{comm::CallKind::kAllGather, count, type}},
                   [in, out, type, count](Channel& channel) {
                     channel.comm->AllGather(in.data_ptr(), out.data_ptr(),
                                             count, type);
                   });
  }
  const TorchCall call{c10d::OpType::_ALLGATHER_BASE, in.scalar_type(),
                       TorchCall::kNone, in.numel()};
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out},
                 {GatherCall(in.nbytes())}, [this, in, out, call](Channel& c) {
                   const at::Tensor rows =
                       GatherChecked(*c.comm, call, in.data_ptr(), in.nbytes());
                   for (int r = 0; r < getSize(); ++r) {
                     std::memcpy(
                         static_cast<char*>(out.data_ptr()) + r * in.nbytes(),
                         rows[r].data_ptr(), in.nbytes());
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::barrier(
    const c10d::BarrierOptions& opts) {
  // As gloo's barrier: it also waits for the calls before it. A timeout of
  // its own (other than the group's, which the communicators keep) is kept
  // through the store.
  const auto timeout = opts.timeout;
  if (timeout == c10d::kUnsetTimeout || timeout == options_.timeout) {
    return Enqueue(
        c10d::OpType::BARRIER, {}, {{comm::CallKind::kBarrier}},
        [](Channel& c) { c.comm->Barrier(); }, Turn::kAfterAll);
  }
  const uint64_t number = barriers_++;
  return Enqueue(
      c10d::OpType::BARRIER, {}, {},
      [this, number, timeout](Channel&) { StoreBarrier(number, timeout); },
      Turn::kAfterAll);
}

}  // namespace ringlab::torch_backend
