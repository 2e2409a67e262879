// The conformance suite's cases for announced calls (Communicator::Announce,
// conformance.h): calls announced ahead of running them, as a thread that
// hands them to a communication thread does, run with exact results; ranks
// that announce different calls are refused alike, naming both; a call made
// otherwise than announced fails. Where the front does not check calls over
// its own connections, announcing does nothing and the same must hold.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/call_agreement.h"
#include "comm/testing/conformance.h"
#include "comm/testing/multi_process.h"

namespace ringlab::comm::testing {
namespace {

void Check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Five calls of every kind announced before the first runs (each rank
// contributes rank + 1 everywhere), then run in order, three times over, so
// that announcements run ahead of the calls by several.
void AnnouncedAhead(Communicator& comm, const BackendTraits&) {
  const int world = comm.world_size(), rank = comm.rank();
  const size_t small = 8, large = size_t{1} << 20;
  const float sum = static_cast<float>(world * (world + 1) / 2);
  auto gathered = MakeBuffer(comm.memory(), std::vector<float>(world * small));
  for (int round = 0; round < 3; ++round) {
    auto a = MakeBuffer(comm.memory(), std::vector<float>(small, rank + 1.0f));
    auto b = MakeBuffer(comm.memory(), std::vector<float>(large, rank + 1.0f));
    const int root = round % world;
    comm.Announce(CallKind::kAllReduce, small, DataType::kFloat32);
    comm.Announce(CallKind::kBroadcast, large, DataType::kFloat32,
                  ReduceOp::kSum, root);
    comm.Announce(CallKind::kAllGather, small, DataType::kFloat32);
    comm.Announce(CallKind::kBarrier, 0, DataType::kFloat32);
    comm.Announce(CallKind::kAllReduce, large, DataType::kFloat32,
                  ReduceOp::kAvg);
    comm.AllReduce(a->data(), small, ReduceOp::kSum);
    comm.Broadcast(b->data(), large, root);
    comm.AllGather(a->data(), gathered->data(), small);
    comm.Barrier();
    comm.AllReduce(b->data(), large, ReduceOp::kAvg);
    for (float x : a->Download()) {
      Check(x == sum, "announced AllReduce: " + std::to_string(x) + ", want " +
                          std::to_string(sum));
    }
    for (float x : gathered->Download()) {
      Check(x == sum, "announced AllGather: " + std::to_string(x) + ", want " +
                          std::to_string(sum));
    }
    // Every rank holds root's root + 1 after the broadcast: so does the mean.
    const float want = root + 1.0f;
    for (float x : b->Download()) {
      Check(x == want,
            "announced Broadcast then AllReduce(avg): " + std::to_string(x) +
                ", want " + std::to_string(want));
    }
  }
}

// Rank 1 announces, and makes, an allreduce of one float more.
ConformanceCase MismatchedAnnouncement(const char* size, size_t count) {
  return CountMismatchCase(
      std::string("mismatched_announced_count_") + size, count,
      [](Communicator& comm, size_t mine) {
        auto buffer = MakeBuffer(comm.memory(), std::vector<float>(mine, 1.0f));
        comm.Announce(CallKind::kAllReduce, mine, DataType::kFloat32);
        comm.AllReduce(buffer->data(), mine, ReduceOp::kSum);
      });
}

// Every rank announces an allreduce of 8 floats and makes one of 9: the
// call fails on every rank, saying so, where announcing reaches the peers,
// and runs where it does nothing; either way the communicator stays usable
// (a barrier follows).
void CalledOtherwise(Communicator& comm, const BackendTraits&) {
  auto buffer = MakeBuffer(comm.memory(), std::vector<float>(9, 1.0f));
  comm.Announce(CallKind::kAllReduce, 8, DataType::kFloat32);
  std::string error;
  try {
    comm.AllReduce(buffer->data(), 9, ReduceOp::kSum);
  } catch (const CommError& e) {
    error = e.what();
  }
  RankPrint("[called otherwise] " + (error.empty() ? "ran" : error));
  if (!error.empty()) {
    Check(error.find("announced otherwise") != std::string::npos,
          "the error does not say the call was announced otherwise: " + error);
    comm.Barrier();
    return;
  }
  const float sum = static_cast<float>(comm.world_size());
  for (float x : buffer->Download()) {
    Check(x == sum, "AllReduce after a no-op announcement: " +
                        std::to_string(x) + ", want " + std::to_string(sum));
  }
}

}  // namespace

std::vector<ConformanceCase> AnnouncedCases() {
  return {
      {"announced_ahead", 1, AnnouncedAhead, {}},
      {"called_otherwise_than_announced", 1, CalledOtherwise, {}},
  };
}

std::vector<ConformanceCase> AnnouncedMismatchCases() {
  return {MismatchedAnnouncement("small", 8),
          MismatchedAnnouncement("large", size_t{1} << 20)};
}

}  // namespace ringlab::comm::testing
