// The rows of allreduce_bench (its top comment says how it measures): one
// allreduce row per backend and message size, the memory-bandwidth floor
// beside them, and the nccl-tests-style tables rank 0 prints at the end.
// Every rank runs the same rows in the same order; each row's result (the
// max over ranks) is kept on every rank for the tables.
#ifndef RINGLAB_BENCH_ALLREDUCE_ROWS_H_
#define RINGLAB_BENCH_ALLREDUCE_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "comm/communicator.h"

namespace ringlab::bench {

struct RowOptions {
  int warmup_iters = 5;      // untimed ops before each timed loop
  int64_t max_iters = 1000;  // most ops in one timed loop (IterationsFor's cap)
  int samples = 20;          // ops timed one by one after a barrier
  // The element type reduced (a row of `bytes` holds bytes / its size);
  // the floor reduces it with the same kernels (comm/dtype).
  comm::DataType dtype = comm::DataType::kFloat32;
};

// Row `row` ("allreduce/<backend>" or "allreduce_registered/<backend>", then
// RowSuffix(options.dtype)) at
// `bytes`: `comm` runs the op on a buffer of its memory kind (`allocated`,
// when not null, is memory from its Allocate); `timer`, a host-memory
// backend, exchanges the times. Counters: time_us, p50_us, p90_us,
// algbw_GBps, busbw_GBps, wrong.
void AllReduceRow(benchmark::State& state, comm::Communicator* comm,
                  comm::Communicator* timer, const std::string& row,
                  int64_t bytes, float* allocated, const RowOptions& options);

// The floor at `bytes` for options.dtype, every rank at once
// ("floor_registered" or "floor_private", then RowSuffix): the data movement an
// allreduce of registered (or private) buffers cannot avoid, done with
// shm_ring's own kernels.
void FloorRow(benchmark::State& state, comm::Communicator* timer, int64_t bytes,
              bool registered, const RowOptions& options);

// Across emulated hosts (--hosts, --link): the link's nominal rate (0 when
// unlimited) and one TCP stream's throughput between two hosts, measured in
// the same run (comm/cluster/link_probe.h), in bits per second.
struct LinkFloor {
  double rate_bits = 0;
  double tcp_bits = 0;
  // What xlink divides busbw by: the nominal rate, else the measured one.
  double ReferenceBytesPerSecond() const {
    return (rate_bits > 0 ? rate_bits : tcp_bits) / 8;
  }
};

// Prints the tables of the rows run so far of type dtype, `rows` in this
// order, then the
// floors; world is the number of ranks, dtype the rows' type. With `link`,
// each row gets xlink =
// busbw / the link's rate (a flat ring's bottleneck edge crosses a link, so
// 1 is its ceiling; a hierarchical one may pass it), and the link's floor.
void PrintTables(const std::vector<std::string>& rows, int world,
                 comm::DataType dtype, const LinkFloor* link = nullptr);
// What the rows and floors of a type other than float32 carry after their
// name ("/float16"; "" for float32, whose rows keep their plain names).
std::string RowSuffix(comm::DataType dtype);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_ALLREDUCE_ROWS_H_
