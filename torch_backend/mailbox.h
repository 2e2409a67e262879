// Point-to-point messages between the ranks of a torch process group (send,
// recv, recv from any source), over a TCP connection between every pair of
// ranks (comm/peer_links.h, proven to hold the job's secret): a ringlab
// communicator's collectives need every rank, and a pair's exchange must not
// take a channel's turn, which every rank shares. A message is its tag, its
// length and its bytes, written whole by one sending thread; so a pair's
// messages arrive in the order they were sent (MPI's and gloo's
// non-overtaking rule). A receive takes the next message of its tag from
// its source, keeping the ones of other tags it reads meanwhile for the
// receives that want them, as gloo matches tags.
#ifndef RINGLAB_TORCH_BACKEND_MAILBOX_H_
#define RINGLAB_TORCH_BACKEND_MAILBOX_H_

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/peer_links.h"

namespace ringlab::torch_backend {

class Mailbox {
 public:
  // Joins the ranks of `context` by `join_timeout`, in a set of links
  // named `purpose` (one per mailbox of a group); `timeout` bounds every
  // send and receive. Throws comm::CommError when they do not all join.
  Mailbox(const comm::RankContext& context, const std::string& purpose,
          std::chrono::milliseconds join_timeout,
          std::chrono::milliseconds timeout);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Writes `header` then `data` to rank `to` under `tag`, as one message;
  // returns once the kernel holds them. One thread at a time. A
  // RuntimeError saying "Timed out" when the peer reads nothing for the
  // timeout, or naming the rank when its connection is gone.
  void Send(int to, int tag, const std::string& header, const void* data,
            size_t bytes);
  // The next message to this rank from `from` under `tag`, or from
  // whichever rank's message under `tag` comes first when `from` is
  // kAnyRank; `*source` is its sender. One thread at a time. Errors as
  // Send's.
  // Where a receive wants a message's bytes after its first `opening`: read
  // there directly (no copy) when the message is of the receive's tag and
  // of opening + bytes bytes; `filled` says whether it was.
  struct Sink {
    size_t opening = 0;
    void* data = nullptr;
    size_t bytes = 0;
    bool filled = false;
  };
  // With a sink: the message's opening only, where the sink was filled.
  std::string Receive(int from, int tag, int* source, Sink* sink = nullptr);

  static constexpr int kAnyRank = -1;

 private:
  // Reads the next whole message from `from`: its tag into *tag; into
  // `sink` past its opening where it is of tag `wanted` and fits it.
  std::string ReadMessage(int from, int wanted, int* tag, Sink* sink,
                          std::chrono::steady_clock::time_point deadline);
  // A kept message of `tag` from `from` (any rank: kAnyRank) into *message.
  bool TakeKept(int from, int tag, std::string* message, int* source);
  int FdOf(int rank) const;

  const int rank_;
  const std::chrono::milliseconds timeout_;
  std::vector<comm::PeerLink> links_;  // every other rank, in rank order
  std::map<std::pair<int, int>, std::deque<std::string>> kept_;  // (from, tag)
};

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_MAILBOX_H_
