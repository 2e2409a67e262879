// Point-to-point messages between the ranks of a torch process group
// (send, recv, recv from any source), through the group's own store, the
// one init_process_group made: a ringlab communicator's collectives need
// every rank, and a pair's exchange must not take a channel's turn, which
// every rank shares. Each message is a key of its own, "<from>><to>/<tag>/
// <n>", n counting that pair's messages under that tag, so that messages of
// a pair and tag arrive in the order they were sent (MPI's and gloo's
// non-overtaking rule) and tags are matched as gloo matches them; the
// receiver deletes the key once read. The store is a relay, not a transport
// built for bulk data: every message crosses to the store's server and back,
// so large tensors move at a fraction of a direct connection's rate
// (docs/pytorch-backend.md has the figures).
#ifndef RINGLAB_TORCH_BACKEND_MAILBOX_H_
#define RINGLAB_TORCH_BACKEND_MAILBOX_H_

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "torch_backend/torch_store.h"

namespace ringlab::torch_backend {

class Mailbox {
 public:
  // `store` outlives the mailbox; `timeout` bounds every receive.
  Mailbox(TorchStore& store, int rank, int size,
          std::chrono::milliseconds timeout);

  // Leaves `message` for rank `to` under `tag`, without waiting for it to
  // be read. Throws comm::StoreError when the store fails.
  void Send(int to, int tag, const std::string& message);
  // The next message to this rank from `from` under `tag`, or from whichever
  // rank's next message under `tag` is there first when `from` is kAnyRank;
  // `*source` is its sender. Waits up to the timeout: then a RuntimeError
  // carrying "Timed out", as torch's own. Receives run one at a time.
  std::string Receive(int from, int tag, int* source);

  static constexpr int kAnyRank = -1;

 private:
  std::string Key(int from, int to, int tag, int64_t n) const;

  TorchStore& store_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  // Apart: a receive holds its lock while it waits, which a send to the
  // same rank (its message may be what the peer waits for) must not.
  std::mutex sending_;
  std::map<std::pair<int, int>, int64_t> sent_;  // by (to, tag)
  std::mutex receiving_;
  std::map<std::pair<int, int>, int64_t> received_;  // by (from, tag)
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_MAILBOX_H_
