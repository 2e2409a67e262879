#include "torch_backend/mailbox.h"

#include <c10/util/Exception.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "comm/store/store.h"

namespace ringlab::torch_backend {
namespace {

using Clock = std::chrono::steady_clock;

struct MessageHeader {
  int64_t tag = 0;
  int64_t bytes = 0;
};

// Waits until `fd` has bytes or the deadline passes (false).
bool WaitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    pollfd ready{fd, POLLIN, 0};
    const int n = poll(&ready, 1,
                       static_cast<int>(std::min<int64_t>(
                           comm::MillisecondsLeft(deadline), 1 << 30)));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // the read reports it
  }
}

}  // namespace

Mailbox::Mailbox(const comm::RankContext& context, const std::string& purpose,
                 std::chrono::milliseconds join_timeout,
                 std::chrono::milliseconds timeout)
    : rank_(context.rank),
      timeout_(timeout),
      links_(comm::ConnectPeers(context, purpose, "ringlab", join_timeout,
                                timeout)) {}

Mailbox::~Mailbox() { comm::ClosePeers(&links_); }

int Mailbox::FdOf(int rank) const {
  for (const comm::PeerLink& link : links_) {
    if (link.rank == rank) return link.fd;
  }
  TORCH_CHECK(false, "ringlab: no connection to rank ", rank);
}

void Mailbox::Send(int to, int tag, const std::string& header, const void* data,
                   size_t bytes) {
  const MessageHeader head{tag, static_cast<int64_t>(header.size() + bytes)};
  const int fd = FdOf(to);
  const std::pair<const void*, size_t> parts[] = {
      {&head, sizeof(head)}, {header.data(), header.size()}, {data, bytes}};
  for (const auto& [at, size] : parts) {
    const char* p = static_cast<const char*>(at);
    for (size_t left = size; left > 0;) {
      const ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      TORCH_CHECK(k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK),
                  "ringlab: Timed out after ", comm::SecondsText(timeout_),
                  " in send to rank ", to, " (tag ", tag,
                  "): it read nothing meanwhile");
      TORCH_CHECK(k >= 0, "ringlab: rank ", to,
                  " closed its connection during send (Connection closed by "
                  "peer: ",
                  std::strerror(errno), ")");
      p += k;
      left -= static_cast<size_t>(k);
    }
  }
}

std::string Mailbox::ReadMessage(int from, int wanted, int* tag, Sink* sink,
                                 Clock::time_point deadline) {
  const int fd = FdOf(from);
  auto read = [&](char* into, size_t size) {
    while (size > 0) {
      TORCH_CHECK(WaitReadable(fd, deadline), "ringlab: Timed out after ",
                  comm::SecondsText(timeout_), " in recv from rank ", from);
      const ssize_t k = recv(fd, into, size, 0);
      if (k < 0 && errno == EINTR) continue;
      TORCH_CHECK(k > 0, "ringlab: rank ", from,
                  " closed its connection during recv (Connection closed by "
                  "peer",
                  k < 0 ? std::string(": ") + std::strerror(errno) : "",
                  "): it failed or exited");
      into += k;
      size -= static_cast<size_t>(k);
    }
  };
  MessageHeader head;
  read(reinterpret_cast<char*>(&head), sizeof(head));
  *tag = static_cast<int>(head.tag);
  const bool fits =
      sink != nullptr && head.tag == wanted &&
      static_cast<size_t>(head.bytes) == sink->opening + sink->bytes;
  std::string message(fits ? sink->opening : static_cast<size_t>(head.bytes),
                      '\0');
  read(message.data(), message.size());
  if (fits) {
    read(static_cast<char*>(sink->data), sink->bytes);
    sink->filled = true;
  }
  return message;
}

bool Mailbox::TakeKept(int from, int tag, std::string* message, int* source) {
  for (auto& [key, queue] : kept_) {
    if (key.second != tag || queue.empty()) continue;
    if (from != kAnyRank && key.first != from) continue;
    *message = std::move(queue.front());
    queue.pop_front();
    *source = key.first;
    return true;
  }
  return false;
}

std::string Mailbox::Receive(int from, int tag, int* source, Sink* sink) {
  std::string message;
  if (TakeKept(from, tag, &message, source)) return message;
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    // The first of the candidate senders with bytes waiting.
    std::vector<pollfd> ready;
    for (const comm::PeerLink& link : links_) {
      if (from == kAnyRank || link.rank == from) {
        ready.push_back({link.fd, POLLIN, 0});
      }
    }
    const int n = poll(ready.data(), ready.size(),
                       static_cast<int>(std::min<int64_t>(
                           comm::MillisecondsLeft(deadline), 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n != 0, "ringlab: Timed out after ",
                comm::SecondsText(timeout_), " in recv from ",
                from == kAnyRank ? std::string("any rank")
                                 : "rank " + std::to_string(from),
                " (tag ", tag, ")");
    for (size_t i = 0; i < ready.size(); ++i) {
      if (n > 0 && ready[i].revents == 0) continue;
      int sender = -1;
      for (const comm::PeerLink& link : links_) {
        if (link.fd == ready[i].fd) sender = link.rank;
      }
      int got = 0;
      message = ReadMessage(sender, tag, &got, sink, deadline);
      if (got == tag) {
        *source = sender;
        return message;
      }
      kept_[{sender, got}].push_back(std::move(message));
      break;
    }
  }
}

}  // namespace ringlab::torch_backend
