// Run under mpirun by mpi_test.sh: exact-sum AllReduce, Broadcast and Barrier
// through the "mpi" backend, then that null data and mismatched calls (count,
// op, root) throw on every rank. Exits non-zero with a message on any mismatch.
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace {

using ringlab::comm::ReduceOp;

// Small integers: every sum is exact, so results are checked with 0 ulp.
float Input(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 61) - 30);
}

void Run() {
  auto rv = ringlab::comm::Rendezvous::FromEnv(std::chrono::seconds(30));
  ringlab::comm::CommOptions options;
  options.timeout = std::chrono::seconds(30);
  auto comm = ringlab::comm::CreateCommunicator("mpi", rv->context(), options);
  const int world = comm->world_size(), rank = comm->rank();
  if (rank != rv->context().rank || world != rv->context().world_size) {
    throw std::runtime_error("rank/world differ from mpirun's variables");
  }
  for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{1021},
                       size_t{65537}, size_t{(16 << 20) / 4}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = Input(rank, i);
      comm->AllReduce(x.data(), count, op);
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < world; ++r) sum += Input(r, i);
        float want = op == ReduceOp::kAvg ? sum / world : sum;
        if (std::memcmp(&want, &x[i], 4) != 0) {
          throw std::runtime_error("AllReduce count " + std::to_string(count) +
                                   " element " + std::to_string(i));
        }
      }
    }
    for (int root = 0; root < world; ++root) {
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = Input(rank, i);
      comm->Broadcast(x.data(), count, root);
      for (size_t i = 0; i < count; ++i) {
        if (x[i] != Input(root, i)) throw std::runtime_error("Broadcast");
      }
    }
    comm->Barrier();
  }
  // Null data is refused before anything is sent (on every rank alike here).
  bool threw = false;
  try {
    comm->AllReduce(nullptr, 5, ReduceOp::kSum);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  if (!threw) throw std::runtime_error("AllReduce(nullptr, 5) accepted");
  // Mismatched calls throw on every rank, before any data moves, so the ranks
  // stay in step and the communicator stays usable.
  struct Mismatch {
    const char* what;
    size_t count;  // rank 1's; the others use 8
    ReduceOp op;   // rank 1's; the others sum
    bool broadcast_root;
  };
  for (const Mismatch& m : {Mismatch{"count", 9, ReduceOp::kSum, false},
                            Mismatch{"op", 8, ReduceOp::kAvg, false},
                            Mismatch{"root", 8, ReduceOp::kSum, true}}) {
    std::vector<float> x(16, 1.0f);
    bool odd = rank == 1;
    std::string error;
    try {
      if (m.broadcast_root) {
        comm->Broadcast(x.data(), 8, odd ? 1 : 0);
      } else {
        comm->AllReduce(x.data(), odd ? m.count : 8,
                        odd ? m.op : ReduceOp::kSum);
      }
    } catch (const ringlab::comm::CommError& e) {
      error = e.what();
    }
    if (error.find("mismatched") == std::string::npos ||
        error.find(m.what) == std::string::npos) {
      throw std::runtime_error(std::string("mismatched ") + m.what +
                               " not reported: '" + error + "'");
    }
    if (x[0] != 1.0f) throw std::runtime_error("data moved despite mismatch");
  }
  comm->Barrier();
  std::printf("mpi_test: rank %d of %d OK\n", rank, world);
}

}  // namespace

int main() {
  try {
    Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_test: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
