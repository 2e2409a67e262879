// The collectives ProcessGroupGloo has beyond DDP's, built once on the
// communicator's allreduce, broadcast and allgather, whichever backend the
// group runs on: reduce, the coalesced calls, gather, scatter, alltoall and
// the sparse allreduce. What they cost beyond a native algorithm (scatter
// and alltoall move every rank's whole input, reduce an allreduce's bytes)
// docs/pytorch-backend.md states.
#include <cstring>
#include <numeric>

#include "comm/gather_strings.h"
#include "torch_backend/process_group.h"
#include "torch_backend/tensor_types.h"

namespace ringlab::torch_backend {
namespace {

// The tensors' bytes end to end, and back.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  size_t bytes = 0;
  for (const at::Tensor& t : tensors) bytes += t.nbytes();
  at::Tensor flat = at::empty({static_cast<int64_t>(bytes)}, at::kByte);
  size_t at = 0;
  for (const at::Tensor& t : tensors) {
    if (t.nbytes() > 0) {
      std::memcpy(static_cast<char*>(flat.data_ptr()) + at, t.data_ptr(),
                  t.nbytes());
    }
    at += t.nbytes();
  }
  return flat;
}

void Unflatten(const char* flat, const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.nbytes() > 0) std::memcpy(t.data_ptr(), flat, t.nbytes());
    flat += t.nbytes();
  }
}

void CheckSameType(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(!tensors.empty(), "ringlab: ", what, " of no tensors");
  for (const at::Tensor& t : tensors) {
    CheckTensor(t, what);
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "ringlab: ", what,
                ": every tensor must be of one type, not ",
                tensors[0].scalar_type(), " and ", t.scalar_type());
  }
}

// The root's list of one tensor per rank (gather's outputs, scatter's
// inputs), each like `like`; a RuntimeError otherwise.
std::vector<at::Tensor> RootTensors(
    const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
    int size, const char* what, const char* which) {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size,
              "ringlab: ", what, "'s root needs one tensor per rank in its ",
              which);
  for (const at::Tensor& t : lists[0]) {
    CheckTensor(t, what);
    TORCH_CHECK(
        t.scalar_type() == like.scalar_type() && t.sizes() == like.sizes(),
        "ringlab: ", what, "'s ", which, " must match its tensor");
  }
  return lists[0];
}

// A rank other than the root gives no list (or an empty one).
void CheckNotRoot(const std::vector<std::vector<at::Tensor>>& lists,
                  const char* what, const char* which) {
  TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()),
              "ringlab: ", what, "'s ", which, " are the root's only");
}

void CheckRoot(int64_t root, int size, const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "ringlab: ", what, " root ", root,
              " is not a rank of ", size);
}

}  // namespace

std::vector<std::string> ProcessGroupRinglab::GatherVariable(
    comm::Communicator& comm, const TorchCall& call, const std::string& mine) {
  std::string row(kTorchCallBytes, '\0');
  EncodeTorchCall(call, row.data());
  std::vector<std::string> rows = comm::AllGatherStrings(comm, row + mine);
  std::vector<TorchCall> calls;
  for (std::string& r : rows) {
    calls.push_back(DecodeTorchCall(r.data()));
    r.erase(0, kTorchCallBytes);
  }
  CheckTorchCalls(calls, getRank());
  return rows;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: reduce takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "reduce");
  CheckRoot(opts.rootRank, getSize(), "reduce");
  // An allreduce whose result only the root keeps: the others' tensors are
  // left as they were.
  const bool root = opts.rootRank == getRank();
  const at::Tensor reduced = root ? t : t.clone();
  return AllReduceInto(c10d::OpType::REDUCE, {t}, reduced, opts.reduceOp,
                       nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  CheckSameType(tensors, "allreduce_coalesced");
  std::vector<at::Tensor> flat_views;
  for (const at::Tensor& t : tensors) flat_views.push_back(t.view(-1));
  const at::Tensor flat = at::cat(flat_views);
  return AllReduceInto(c10d::OpType::ALLREDUCE_COALESCED, tensors, flat,
                       opts.reduceOp, [flat, tensors] {
                         Unflatten(static_cast<const char*>(flat.data_ptr()),
                                   tensors);
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  CheckSameType(inputs, "allgather_coalesced");
  TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(),
              "ringlab: allgather_coalesced needs a list of outputs per rank");
  std::vector<at::Tensor> outputs;
  for (const std::vector<at::Tensor>& list : output_lists) {
    TORCH_CHECK(list.size() == inputs.size(), "ringlab: allgather_coalesced ",
                "needs an output per input for every rank");
    for (size_t i = 0; i < list.size(); ++i) {
      CheckTensor(list[i], "allgather_coalesced");
      TORCH_CHECK(list[i].scalar_type() == inputs[i].scalar_type() &&
                      list[i].sizes() == inputs[i].sizes(),
                  "ringlab: allgather_coalesced's outputs must match its "
                  "inputs");
      outputs.push_back(list[i]);
    }
  }
  const at::Tensor flat = Flatten(inputs);
  const TorchCall call{c10d::OpType::ALLGATHER_COALESCED,
                       inputs[0].scalar_type(), TorchCall::kNone, flat.numel()};
  return Enqueue(
      c10d::OpType::ALLGATHER_COALESCED, outputs, {GatherCall(flat.nbytes())},
      [this, flat, call, output_lists](Channel& c) {
        const at::Tensor rows =
            GatherChecked(*c.comm, call, flat.data_ptr(), flat.nbytes());
        for (int r = 0; r < getSize(); ++r) {
          Unflatten(static_cast<const char*>(rows[r].data_ptr()),
                    output_lists[r]);
        }
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "ringlab: gather takes one input");
  const at::Tensor in = inputs[0];
  CheckTensor(in, "gather");
  CheckRoot(opts.rootRank, getSize(), "gather");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> out;
  if (root == getRank()) {
    out = RootTensors(outputs, in, getSize(), "gather", "outputs");
  } else {
    CheckNotRoot(outputs, "gather", "outputs");
  }
  const TorchCall call{c10d::OpType::GATHER, in.scalar_type(), TorchCall::kNone,
                       in.numel(), opts.rootRank};
  // The ranks' calls checked (ExchangeCalls), each sends the root its tensor
  // directly: an allgather would move every rank's to every rank.
  return Enqueue(
      c10d::OpType::GATHER, out, {},
      [this, in, out, call](Channel&) {
        CheckTorchCalls(ExchangeCalls(call), getRank());
        const int root = static_cast<int>(call.root);
        if (getRank() != root) {
          rooted_mail_->Send(root, 0, "", in.data_ptr(), in.nbytes());
          return;
        }
        if (in.nbytes() > 0) {
          std::memcpy(out[root].data_ptr(), in.data_ptr(), in.nbytes());
        }
        for (int r = 0; r < getSize(); ++r) {
          if (r == root) continue;
          int source = r;
          Mailbox::Sink sink{0, out[r].data_ptr(), in.nbytes()};
          const std::string part = rooted_mail_->Receive(r, 0, &source, &sink);
          TORCH_CHECK(sink.filled, "ringlab: gather: rank ", r, " sent ",
                      part.size(), " bytes, not ", in.nbytes());
        }
      },
      Turn::kSizesInside);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "ringlab: scatter takes one output");
  const at::Tensor out = outputs[0];
  CheckTensor(out, "scatter");
  CheckRoot(opts.rootRank, getSize(), "scatter");
  const int root = static_cast<int>(opts.rootRank);
  // The ranks' calls checked (ExchangeCalls), the root sends each rank its
  // part directly.
  std::vector<at::Tensor> parts;
  if (root == getRank()) {
    parts = RootTensors(inputs, out, getSize(), "scatter", "inputs");
  } else {
    CheckNotRoot(inputs, "scatter", "inputs");
  }
  const TorchCall call{c10d::OpType::SCATTER, out.scalar_type(),
                       TorchCall::kNone, out.numel(), root};
  return Enqueue(
      c10d::OpType::SCATTER, {out}, {},
      [this, parts, out, call, root](Channel&) {
        CheckTorchCalls(ExchangeCalls(call), getRank());
        if (getRank() != root) {
          int source = root;
          Mailbox::Sink sink{0, out.data_ptr(), out.nbytes()};
          const std::string part =
              rooted_mail_->Receive(root, 0, &source, &sink);
          TORCH_CHECK(sink.filled, "ringlab: scatter: rank ", root, " sent ",
                      part.size(), " bytes, not ", out.nbytes());
          return;
        }
        for (int r = 0; r < getSize(); ++r) {
          if (r == root) continue;
          rooted_mail_->Send(r, 0, "", parts[r].data_ptr(), parts[r].nbytes());
        }
        if (out.nbytes() > 0) {
          std::memcpy(out.data_ptr(), parts[root].data_ptr(), out.nbytes());
        }
      },
      Turn::kSizesInside);
}

std::vector<TorchCall> ProcessGroupRinglab::ExchangeCalls(
    const TorchCall& call) {
  std::string mine(kTorchCallBytes, '\0');
  EncodeTorchCall(call, mine.data());
  for (int r = 0; r < getSize(); ++r) {
    if (r != getRank()) rooted_mail_->Send(r, 0, mine, nullptr, 0);
  }
  std::vector<TorchCall> calls(getSize(), call);
  for (int r = 0; r < getSize(); ++r) {
    if (r == getRank()) continue;
    int source = r;
    const std::string theirs = rooted_mail_->Receive(r, 0, &source);
    TORCH_CHECK(theirs.size() == kTorchCallBytes, "ringlab: rank ", r, " sent ",
                theirs.size(), " bytes where its call was due");
    calls[r] = DecodeTorchCall(theirs.data());
  }
  return calls;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::AllToAll(
    c10d::OpType type, std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> inputs) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                  outputs.size() == inputs.size(),
              "ringlab: alltoall needs one input and one output per rank");
  for (const at::Tensor& t : inputs) CheckTensor(t, "alltoall");
  for (const at::Tensor& t : outputs) {
    CheckTensor(t, "alltoall");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "ringlab: ", "alltoall's tensors must be of one type");
  }
  // Each rank's parts for every rank, opened by their byte counts: a rank
  // learns from the row itself where its part lies.
  std::vector<int64_t> sizes;
  for (const at::Tensor& t : inputs) {
    sizes.push_back(static_cast<int64_t>(t.nbytes()));
  }
  const at::Tensor parts = Flatten(inputs);
  std::string mine(sizes.size() * sizeof(int64_t), '\0');
  std::memcpy(mine.data(), sizes.data(), mine.size());
  mine.append(static_cast<const char*>(parts.data_ptr()), parts.nbytes());
  const TorchCall call{type, inputs[0].scalar_type()};
  return Enqueue(
      type, outputs, {},
      [this, mine, call, outputs](Channel& c) {
        const std::vector<std::string> rows =
            GatherVariable(*c.comm, call, mine);
        for (int r = 0; r < getSize(); ++r) {
          const int64_t* sizes =
              reinterpret_cast<const int64_t*>(rows[r].data());
          const int64_t skip =
              std::accumulate(sizes, sizes + getRank(), int64_t{0});
          TORCH_CHECK(
              sizes[getRank()] == static_cast<int64_t>(outputs[r].nbytes()),
              "ringlab: alltoall: rank ", r, " sends ", sizes[getRank()],
              " bytes to rank ", getRank(), ", which expects ",
              outputs[r].nbytes());
          if (sizes[getRank()] > 0) {
            std::memcpy(outputs[r].data_ptr(),
                        rows[r].data() + getSize() * sizeof(int64_t) + skip,
                        sizes[getRank()]);
          }
        }
      },
      Turn::kSizesInside);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions&) {
  return AllToAll(c10d::OpType::ALLTOALL, outputs, inputs);
}

// The parts of `t` along its first dimension, `splits` rows each (equal
// parts where empty).
std::vector<at::Tensor> ProcessGroupRinglab::SplitRows(
    const at::Tensor& t, const std::vector<int64_t>& splits) {
  CheckTensor(t, "alltoall_base");
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  std::vector<int64_t> counts = splits;
  if (counts.empty()) {
    TORCH_CHECK(rows % getSize() == 0, "ringlab: alltoall_base: ", rows,
                " rows do not split equally among ", getSize(), " ranks");
    counts.assign(getSize(), rows / getSize());
  }
  TORCH_CHECK(
      static_cast<int>(counts.size()) == getSize() &&
          std::accumulate(counts.begin(), counts.end(), int64_t{0}) == rows,
      "ringlab: alltoall_base: split sizes must be one per rank and "
      "add up to the tensor's ",
      rows, " rows");
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (int64_t n : counts) {
    parts.push_back(t.narrow(0, start, n));
    start += n;
  }
  return parts;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  std::vector<at::Tensor> outputs = SplitRows(output, output_split_sizes);
  return AllToAll(c10d::OpType::ALLTOALL_BASE, outputs,
                  SplitRows(input, input_split_sizes));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::SparseAllReduce(
    const at::Tensor& t, c10d::ReduceOp op) {
  TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM, "ringlab: sparse allreduce ",
              ReduceOpName(op.op_), ": sparse tensors only sum, as gloo's");
  TORCH_CHECK(t.device().is_cpu(), "ringlab: sparse allreduce: only CPU ",
              "tensors so far, not ", t.device());
  // As gloo: every rank's indices and values, summed in rank order.
  const at::Tensor mine = t.coalesce();
  const at::Tensor indices = mine.indices().contiguous();
  const at::Tensor values = mine.values().contiguous();
  std::string row(sizeof(int64_t), '\0');
  const int64_t nnz = mine._nnz();
  std::memcpy(row.data(), &nnz, sizeof(nnz));
  row.append(static_cast<const char*>(indices.data_ptr()), indices.nbytes());
  row.append(static_cast<const char*>(values.data_ptr()), values.nbytes());
  // The dense sizes must agree; the call's count is their product.
  const TorchCall call{c10d::OpType::ALLREDUCE, t.scalar_type(), op.op_,
                       t.numel()};
  return Enqueue(
      c10d::OpType::ALLREDUCE, {t}, {},
      [this, row, call, t, indices, values](Channel& c) {
        const std::vector<std::string> rows =
            GatherVariable(*c.comm, call, row);
        at::Tensor sum;
        for (const std::string& r : rows) {
          int64_t nnz;
          std::memcpy(&nnz, r.data(), sizeof(nnz));
          std::vector<int64_t> value_sizes = values.sizes().vec();
          value_sizes[0] = nnz;
          at::Tensor i = at::empty({indices.size(0), nnz}, at::kLong);
          at::Tensor v = at::empty(value_sizes, values.options());
          std::memcpy(i.data_ptr(), r.data() + sizeof(int64_t), i.nbytes());
          std::memcpy(v.data_ptr(), r.data() + sizeof(int64_t) + i.nbytes(),
                      v.nbytes());
          at::Tensor part = at::sparse_coo_tensor(i, v, t.sizes());
          sum = sum.defined() ? sum + part : part;
        }
        t.copy_(sum.coalesce());
      },
      Turn::kSizesInside);
}

}  // namespace ringlab::torch_backend
