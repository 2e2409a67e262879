// Each registered gradient compressor's encode and decode over one step's
// gradients of the Fashion-MNIST MLP (784,1024,1024,10: 1,863,690 floats in
// DDP's buckets), beside a floor for its core operation: top-k's
// std::nth_element over the same magnitudes, and one pass of memory
// bandwidth (a copy of the gradients) for the one-pass codecs. Counters give
// the bytes each rank sends per step through the collective the compressor
// needs, their share of the dense allreduce's, and what they take on a
// 1 Gbit/s link (2 ranks; the dense allreduce: 59.6 ms).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/benchmark_flags.h"
#include "comm/communicator.h"
#include "sync/compressor.h"
#include "sync/ddp.h"
#include "sync/param_layout.h"
#include "sync/synchronizer.h"
#include "torch_compat/generator.h"

namespace ringlab::bench {
namespace {

constexpr int kWorld = 2;
constexpr double kLinkBytesPerSecond = 1e9 / 8;

struct Step {
  sync::ParamLayout layout{{{"fc1.weight", {1024, 784}},
                            {"fc1.bias", {1024}},
                            {"fc2.weight", {1024, 1024}},
                            {"fc2.bias", {1024}},
                            {"fc3.weight", {10, 1024}},
                            {"fc3.bias", {10}}}};
  std::vector<sync::Bucket> buckets;
  std::vector<float> grads;

  Step() : grads(layout.num_params()) {
    buckets = sync::DdpBuckets(layout, sync::ParseSyncOptions("allreduce", {}));
    torch_compat::TorchGenerator generator(0);
    for (float& g : grads) g = generator.Uniform(-0.01f, 0.01f);
  }
};

const Step& TheStep() {
  static const Step* step = new Step();
  return *step;
}

// Bytes one rank sends per step for the compressor's collective.
double SentBytes(const sync::Compressor& c) {
  double sent = 0;
  const size_t word = comm::DataTypeSize(c.wire_type());
  for (const sync::Bucket& b : TheStep().buckets) {
    const double wire =
        static_cast<double>(c.WireCount(b.end - b.begin) * word);
    sent += c.collective() == sync::Compressor::Collective::kAllReduce
                ? wire * 2 * (kWorld - 1) / kWorld
                : wire * (kWorld - 1);
  }
  return sent;
}

void SetCounters(benchmark::State& state, const sync::Compressor& c) {
  const Step& step = TheStep();
  const double dense = 4.0 * step.grads.size() * 2 * (kWorld - 1) / kWorld;
  const double sent = SentBytes(c);
  state.counters["sent_MB"] = sent / 1e6;
  state.counters["of_dense"] = sent / dense;
  state.counters["ms_at_1gbit"] = 1e3 * sent / kLinkBytesPerSecond;
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const Step& step = TheStep();
  auto c =
      sync::MakeCompressor(name, sync::ParseSyncOptions(name, {}), 0, kWorld);
  std::vector<char> wire(c->WireCount(step.grads.size()) *
                         comm::DataTypeSize(c->wire_type()));
  for (auto _ : state) {
    for (const sync::Bucket& b : step.buckets) {
      c->Encode(step.grads.data() + b.begin, b.end - b.begin, kWorld,
                wire.data());
    }
    benchmark::ClobberMemory();
  }
  SetCounters(state, *c);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const Step& step = TheStep();
  auto c =
      sync::MakeCompressor(name, sync::ParseSyncOptions(name, {}), 0, kWorld);
  // One wire per bucket, encoded once (a random compressor's decode reads
  // what its encode chose: each bucket decoded after its own encode).
  std::vector<float> out(step.grads.size());
  std::vector<char> wire(c->WireCount(step.grads.size()) *
                         comm::DataTypeSize(c->wire_type()));
  for (auto _ : state) {
    for (const sync::Bucket& b : step.buckets) {
      state.PauseTiming();
      c->Encode(step.grads.data() + b.begin, b.end - b.begin, kWorld,
                wire.data());
      state.ResumeTiming();
      c->Decode(wire.data(), b.end - b.begin, kWorld, out.data() + b.begin);
    }
    benchmark::ClobberMemory();
  }
  SetCounters(state, *c);
}

// top-k's floor: the k-th largest magnitude of each bucket (k = 1%, topk's
// default), on a copy, as std::nth_element finds it.
void BM_FloorNthElement(benchmark::State& state) {
  const Step& step = TheStep();
  std::vector<float> magnitudes(step.grads.size());
  for (auto _ : state) {
    for (const sync::Bucket& b : step.buckets) {
      const size_t n = b.end - b.begin;
      for (size_t i = 0; i < n; ++i) {
        magnitudes[i] = std::fabs(step.grads[b.begin + i]);
      }
      const size_t k = static_cast<size_t>(std::ceil(0.01 * n));
      std::nth_element(magnitudes.begin(), magnitudes.begin() + k,
                       magnitudes.begin() + n, std::greater<float>());
    }
    benchmark::DoNotOptimize(magnitudes.data());
  }
}

// The one-pass codecs' floor: each bucket copied once.
void BM_FloorCopy(benchmark::State& state) {
  const Step& step = TheStep();
  std::vector<float> copy(step.grads.size());
  for (auto _ : state) {
    for (const sync::Bucket& b : step.buckets) {
      std::memcpy(copy.data() + b.begin, step.grads.data() + b.begin,
                  (b.end - b.begin) * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
}

void RegisterAll() {
  for (const std::string& name : sync::CompressorNames()) {
    benchmark::RegisterBenchmark(("BM_Encode/" + name).c_str(), BM_Encode, name)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_Decode/" + name).c_str(), BM_Decode, name)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_Floor/nth_element", BM_FloorNthElement)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_Floor/copy", BM_FloorCopy)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace ringlab::bench

int main(int argc, char** argv) {
  ringlab::bench::ParseBenchmarkFlagsOrExit(
      argc, argv,
      "each gradient compressor's encode and decode over one step of the "
      "Fashion-MNIST MLP, beside the floors of its core operation");
  ringlab::bench::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
