#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "comm/ipc_ring/kernels.h"

namespace ringlab::comm {
namespace {

__host__ __device__ inline size_t CeilDiv(size_t a, size_t b) {
  return (a + b - 1) / b;
}
__host__ __device__ inline size_t RoundUp(size_t a, size_t multiple) {
  return CeilDiv(a, multiple) * multiple;
}
// Elements in a 16-byte pack.
__host__ __device__ inline size_t PackLength(size_t element_bytes) {
  return 16 / element_bytes;
}
__host__ __device__ inline size_t Min(size_t a, size_t b) {
  return a < b ? a : b;
}

// Segment i is [i*seg, (i+1)*seg) clipped to count, seg a multiple of a
// pack (`pack` elements); its chunks and their per-block slices likewise, so
// every range is 16-byte aligned relative to the buffer's start.
__host__ __device__ inline IpcRingRange Slice(size_t count, int world_size,
                                              int chunks, int segment,
                                              int chunk, int block,
                                              size_t pack) {
  const size_t seg = RoundUp(CeilDiv(count, world_size), pack);
  const size_t chunk_len = RoundUp(CeilDiv(seg, chunks), pack);
  const size_t slice = RoundUp(CeilDiv(chunk_len, kIpcRingBlocks), pack);
  const size_t seg_begin = Min(count, segment * seg);
  const size_t seg_end = Min(count, seg_begin + seg);
  const size_t chunk_begin = Min(seg_end, seg_begin + chunk * chunk_len);
  const size_t chunk_end = Min(seg_end, chunk_begin + chunk_len);
  const size_t begin = Min(chunk_end, chunk_begin + block * slice);
  return {begin, Min(chunk_end, begin + slice)};
}

__host__ __device__ inline uint64_t Units(const IpcRingLaunch& launch) {
  switch (launch.kind) {
    case IpcRingKind::kRing:
      return 2 + 2 * uint64_t(launch.world_size - 1) * launch.chunks;
    case IpcRingKind::kOneShot:
    case IpcRingKind::kBroadcast:
    case IpcRingKind::kBarrier:
    case IpcRingKind::kAllGather:
      return 2;
  }
  return 0;
}

__host__ __device__ inline IpcRingDescriptor Describe(const IpcRingLaunch& l) {
  IpcRingDescriptor d;
  d.word[0] = static_cast<uint64_t>(l.kind) | (uint64_t(l.average) << 4) |
              (static_cast<uint64_t>(l.type) << 5) |
              (uint64_t(l.root & 0xff) << 8) | (l.base << 32);
  d.word[1] = l.kind == IpcRingKind::kAllGather ? l.stride : l.count;
  return d;
}

__device__ inline uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}

__device__ inline void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v)
               : "memory");
}

__device__ inline bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// The element types, as the kernels see them: their bits (what moves), and
// the exact widening to float32 and the rounding back (to nearest, ties to
// even) that reductions use.
struct Float32 {
  using Bits = float;
  __device__ static float Widen(float v) { return v; }
  __device__ static float Narrow(float v) { return v; }
};
struct Float16 {
  using Bits = unsigned short;
  __device__ static float Widen(unsigned short v) {
    return __half2float(__ushort_as_half(v));
  }
  __device__ static unsigned short Narrow(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};
struct BFloat16 {
  using Bits = unsigned short;
  __device__ static float Widen(unsigned short v) {
    return __bfloat162float(__ushort_as_bfloat16(v));
  }
  __device__ static unsigned short Narrow(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// 16 bytes of elements, moved as one load or store.
template <typename Bits>
union Pack {
  static constexpr int kLength = 16 / sizeof(Bits);
  uint4 raw;
  Bits v[kLength];
};

template <typename T>
__device__ inline T Load(const T* p, bool remote) {
  return remote ? __ldcv(p) : *p;
}

struct Ctx {
  const IpcRingPeers& peers;
  const IpcRingLaunch& p;
  uint64_t* my_progress;  // this block's counter on this rank
  uint64_t units_done;    // what this block last published
  IpcRingDescriptor mine;
};

__device__ inline uint64_t* DescriptorOf(uint64_t* progress) {
  return progress + kIpcRingBlocks + 2 * blockIdx.x;
}

// Records the first failure this rank sees in this launch (the block that
// wins the claim word in device memory: atomics on host-mapped memory are
// not atomic on every machine), then poisons this block's counter so that
// peers waiting on it give up at once. `theirs`: a mismatched peer's
// descriptor.
__device__ void Fail(Ctx& c, int code, int peer, int phase, int step,
                     uint64_t theirs0 = 0, uint64_t theirs1 = 0) {
  IpcRingStatus* s = c.p.status;
  auto* claim = reinterpret_cast<unsigned long long*>(
      c.peers.progress[c.p.rank] + kIpcRingClaimWord);
  const unsigned long long mark = c.p.base + 1;  // unique per launch
  if (atomicMax(claim, mark) < mark) {
    s->peer = peer;
    s->phase = phase;
    s->step = step;
    s->theirs[0] = theirs0;
    s->theirs[1] = theirs1;
    __threadfence_system();
    s->code = code;
  }
  StoreReleaseSys(c.my_progress, kIpcRingPoison | (c.p.base + c.units_done));
}

// Block-wide: returns false (in every thread) if the wait failed. With
// `check`, the peer's descriptor must equal ours: only for waits that the
// peer cannot pass before this rank's exit barrier (so that the descriptor
// read is still the one of this collective).
__device__ bool WaitFor(Ctx& c, int peer, uint64_t target, int phase, int step,
                        bool check = false) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    const uint64_t* flag = c.peers.progress[peer] + blockIdx.x;
    const uint64_t start = GlobalTimer();
    int result = kIpcRingOk;
    for (uint32_t spins = 1;; ++spins) {
      const uint64_t v = LoadAcquireSys(flag);
      if (v & kIpcRingPoison) {
        result = kIpcRingPoisoned;
        break;
      }
      if (v >= c.p.base + target) break;
      if ((spins & 255) == 0) {
        // Another block of this rank failed, or the host gave up.
        if (c.p.status->abort) {
          result = kIpcRingAborted;
          break;
        }
        if (c.p.status->code != kIpcRingOk) {
          result = c.p.status->code;
          break;
        }
        if (static_cast<int64_t>(GlobalTimer() - start) > c.p.timeout_ns) {
          result = kIpcRingTimeout;
          break;
        }
        __nanosleep(200);
      }
    }
    __threadfence();
    uint64_t t0 = 0, t1 = 0;
    if (result == kIpcRingOk && check) {
      const volatile uint64_t* theirs = DescriptorOf(c.peers.progress[peer]);
      t0 = theirs[0];
      t1 = theirs[1];
      if (t0 != c.mine.word[0] || t1 != c.mine.word[1]) {
        result = kIpcRingMismatch;
      }
    }
    if (result != kIpcRingOk) Fail(c, result, peer, phase, step, t0, t1);
    ok = result == kIpcRingOk;
  }
  __syncthreads();
  const bool passed = ok;
  __syncthreads();  // `ok` is reused by the next wait
  return passed;
}

// Publishes that this block has finished `units` of the launch. The barrier
// orders every thread's writes before thread 0's; its one system-scope fence
// and release store then make them all visible to the peers (one fence per
// publish, not one per thread).
__device__ void Publish(Ctx& c, uint64_t units) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    StoreReleaseSys(c.my_progress, c.p.base + units);
  }
  c.units_done = units;
}

// Every peer has its input in place (its first unit) and is in this very
// collective (its descriptor equals ours). Safe to read the descriptors
// here: no peer can start its next collective before this rank publishes
// its last unit of this one.
__device__ bool WaitForEveryPeersEntry(Ctx& c) {
  for (int q = 0; q < c.p.world_size; ++q) {
    if (q != c.p.rank && !WaitFor(c, q, 1, kIpcRingEntry, 0, true)) {
      return false;
    }
  }
  return true;
}

// The part of [begin, end) that 16-byte packs cover, from begin: all of it
// but a ragged tail when both buffers are 16-byte aligned at begin, else
// nothing (the caller's buffer need only be aligned to its type).
template <typename Bits>
__device__ inline size_t PackedEnd(const Bits* a, const Bits* b, size_t begin,
                                   size_t end) {
  constexpr size_t kLength = Pack<Bits>::kLength;
  if (!Aligned16(a + begin) || !Aligned16(b + begin)) return begin;
  return begin + (end - begin) / kLength * kLength;
}

// dst[i] = src[i] over [begin, end); src may be a peer's buffer (uncached).
template <typename Bits>
__device__ void Copy(Bits* dst, const Bits* src, size_t begin, size_t end,
                     bool remote) {
  constexpr size_t kLength = Pack<Bits>::kLength;
  const size_t packed_end = PackedEnd(dst, src, begin, end);
  for (size_t i = begin + kLength * threadIdx.x; i < packed_end;
       i += kLength * blockDim.x) {
    *reinterpret_cast<uint4*>(dst + i) =
        Load(reinterpret_cast<const uint4*>(src + i), remote);
  }
  for (size_t i = packed_end + threadIdx.x; i < end; i += blockDim.x) {
    dst[i] = Load(src + i, remote);
  }
}

// One element of a ring step: left + mine in float32 (divided by scale when
// `divide`), rounded to the type once.
template <typename E>
__device__ inline typename E::Bits Add(typename E::Bits left,
                                       typename E::Bits mine, bool divide,
                                       float scale) {
  float v = E::Widen(left) + E::Widen(mine);
  if (divide) v /= scale;
  return E::Narrow(v);
}

// mine[i] = left[i] + mine[i] (divided by scale when scale != 1), also
// written to out when out is not null. mine and left are registered buffers
// (16-byte aligned); out is the caller's.
template <typename E>
__device__ void Reduce(typename E::Bits* mine, const typename E::Bits* left,
                       typename E::Bits* out, size_t begin, size_t end,
                       float scale) {
  using Bits = typename E::Bits;
  constexpr size_t kLength = Pack<Bits>::kLength;
  const bool divide = scale != 1.0f;
  const size_t packed_end =
      PackedEnd<Bits>(mine, out == nullptr ? mine : out, begin, end);
  for (size_t i = begin + kLength * threadIdx.x; i < packed_end;
       i += kLength * blockDim.x) {
    Pack<Bits> a, b;
    a.raw = __ldcv(reinterpret_cast<const uint4*>(left + i));
    b.raw = *reinterpret_cast<const uint4*>(mine + i);
#pragma unroll
    for (size_t j = 0; j < kLength; ++j) {
      b.v[j] = Add<E>(a.v[j], b.v[j], divide, scale);
    }
    *reinterpret_cast<uint4*>(mine + i) = b.raw;
    if (out) *reinterpret_cast<uint4*>(out + i) = b.raw;
  }
  for (size_t i = packed_end + threadIdx.x; i < end; i += blockDim.x) {
    const Bits v = Add<E>(__ldcv(left + i), mine[i], divide, scale);
    mine[i] = v;
    if (out) out[i] = v;
  }
}

__device__ inline int Mod(int a, int n) { return ((a % n) + n) % n; }

template <typename Bits>
__device__ inline Bits* DataOf(const Ctx& c, int rank) {
  return static_cast<Bits*>(c.peers.data[rank]);
}

// The ring of shm_ring. Units: 1 (input in place), then one per (step, chunk)
// for the N-1 reduce-scatter and N-1 all-gather steps, then 1 (exit barrier).
// In reduce-scatter step s, rank r adds segment (r-1-s) mod N from its left
// neighbour into its own buffer; after it, rank r holds segment r+1 fully
// reduced. In all-gather step s it copies segment (r-s) mod N from the left.
template <typename E>
__device__ void RingAllReduce(Ctx& c) {
  using Bits = typename E::Bits;
  constexpr size_t kPack = Pack<Bits>::kLength;
  const IpcRingLaunch& p = c.p;
  const int n = p.world_size, r = p.rank, left = Mod(r - 1, n), b = blockIdx.x;
  Bits* mine = DataOf<Bits>(c, r);
  const Bits* lbuf = DataOf<Bits>(c, left);
  const Bits* in = static_cast<const Bits*>(p.in);
  Bits* out = static_cast<Bits*>(p.out);
  const int chunks = p.chunks;

  for (int seg = 0; seg < n; ++seg) {
    for (int k = 0; k < chunks; ++k) {
      IpcRingRange rg = Slice(p.count, n, chunks, seg, k, b, kPack);
      Copy(mine, in, rg.begin, rg.end, false);
    }
  }
  Publish(c, 1);
  if (!WaitForEveryPeersEntry(c)) return;

  const float scale = p.average ? static_cast<float>(n) : 1.0f;
  for (int step = 0; step < 2 * (n - 1); ++step) {
    const bool rs = step < n - 1;
    const int s = rs ? step : step - (n - 1);
    const int seg = rs ? Mod(r - 1 - s, n) : Mod(r - s, n);
    const bool last_rs = rs && s == n - 2;
    for (int k = 0; k < chunks; ++k) {
      // The left neighbour has done this chunk of the previous step (or,
      // for step 0, has its input in place).
      const uint64_t need =
          step == 0 ? 1 : 1 + uint64_t(step - 1) * chunks + k + 1;
      if (!WaitFor(c, left, need,
                   rs ? kIpcRingReduceScatter : kIpcRingAllGather, s)) {
        return;
      }
      IpcRingRange rg = Slice(p.count, n, chunks, seg, k, b, kPack);
      if (rs) {
        Reduce<E>(mine, lbuf, last_rs ? out : nullptr, rg.begin, rg.end,
                  last_rs ? scale : 1.0f);
      } else {
        Copy(mine, lbuf, rg.begin, rg.end, true);
        __syncthreads();
        Copy(out, static_cast<const Bits*>(mine), rg.begin, rg.end, false);
      }
      Publish(c, 1 + uint64_t(step) * chunks + k + 1);
    }
  }

  const uint64_t total = Units(p);
  Publish(c, total);
  for (int q = 0; q < n; ++q) {
    if (q != r && !WaitFor(c, q, total, kIpcRingExitBarrier, 0)) return;
  }
}

// Small messages: every rank reads every buffer and adds them in rank order
// 0..N-1 in float32, rounding once, so all ranks compute bitwise the same
// result. Units: 1 (input in place), 2 (done reading, exit barrier).
template <typename E>
__device__ void OneShotAllReduce(Ctx& c) {
  using Bits = typename E::Bits;
  const IpcRingLaunch& p = c.p;
  const int n = p.world_size, r = p.rank;
  const IpcRingRange rg =
      Slice(p.count, 1, 1, 0, 0, blockIdx.x, Pack<Bits>::kLength);
  Bits* mine = DataOf<Bits>(c, r);
  Bits* out = static_cast<Bits*>(p.out);
  Copy(mine, static_cast<const Bits*>(p.in), rg.begin, rg.end, false);
  Publish(c, 1);
  if (!WaitForEveryPeersEntry(c)) return;
  const float scale = static_cast<float>(n);
  for (size_t i = rg.begin + threadIdx.x; i < rg.end; i += blockDim.x) {
    float sum = 0.0f;
    for (int q = 0; q < n; ++q) {
      const float v =
          E::Widen(q == r ? mine[i] : __ldcv(DataOf<Bits>(c, q) + i));
      sum = q == 0 ? v : sum + v;
    }
    out[i] = E::Narrow(p.average ? sum / scale : sum);
  }
  Publish(c, 2);
  for (int q = 0; q < n; ++q) {
    if (q != r && !WaitFor(c, q, 2, kIpcRingExitBarrier, 0)) return;
  }
}

// Every rank reads the root's buffer directly (one hop over NVLink/PCIe).
// Units as the one-shot. Every rank, the root too, checks every peer's
// descriptor: ranks that disagree on the root would otherwise each copy from
// a root of their own and return without noticing.
template <typename Bits>
__device__ void Broadcast(Ctx& c) {
  const IpcRingLaunch& p = c.p;
  const int n = p.world_size, r = p.rank;
  const IpcRingRange rg =
      Slice(p.count, 1, 1, 0, 0, blockIdx.x, Pack<Bits>::kLength);
  if (r == p.root) {
    Copy(DataOf<Bits>(c, r), static_cast<const Bits*>(p.in), rg.begin, rg.end,
         false);
  }
  Publish(c, 1);
  if (!WaitForEveryPeersEntry(c)) return;
  if (r != p.root) {
    Copy(static_cast<Bits*>(p.out),
         static_cast<const Bits*>(DataOf<Bits>(c, p.root)), rg.begin, rg.end,
         true);
  }
  Publish(c, 2);
  for (int q = 0; q < n; ++q) {
    if (q != r && !WaitFor(c, q, 2, kIpcRingExitBarrier, 0)) return;
  }
}

// Every rank posts its piece in its registered buffer, then copies every
// peer's (one hop each) to out + q * stride, its own from its input unless
// that is in place. Units as the one-shot.
template <typename Bits>
__device__ void AllGather(Ctx& c) {
  const IpcRingLaunch& p = c.p;
  const int n = p.world_size, r = p.rank;
  const IpcRingRange rg =
      Slice(p.count, 1, 1, 0, 0, blockIdx.x, Pack<Bits>::kLength);
  const Bits* in = static_cast<const Bits*>(p.in);
  Copy(DataOf<Bits>(c, r), in, rg.begin, rg.end, false);
  Publish(c, 1);
  if (!WaitForEveryPeersEntry(c)) return;
  for (int q = 0; q < n; ++q) {
    Bits* dst = static_cast<Bits*>(p.out) + q * p.stride;
    if (q != r) {
      Copy(dst, static_cast<const Bits*>(DataOf<Bits>(c, q)), rg.begin, rg.end,
           true);
    } else if (dst != in) {
      Copy(dst, in, rg.begin, rg.end, false);
    }
  }
  Publish(c, 2);
  for (int q = 0; q < n; ++q) {
    if (q != r && !WaitFor(c, q, 2, kIpcRingExitBarrier, 0)) return;
  }
}

// Two rounds: entry (with the descriptor check, safe only before this
// rank's last unit), then the barrier proper.
__device__ void Barrier(Ctx& c) {
  Publish(c, 1);
  if (!WaitForEveryPeersEntry(c)) return;
  Publish(c, 2);
  for (int q = 0; q < c.p.world_size; ++q) {
    if (q != c.p.rank && !WaitFor(c, q, 2, kIpcRingExitBarrier, 0)) return;
  }
}

template <typename E>
__global__ void __launch_bounds__(kIpcRingThreads)
    IpcRingKernel(IpcRingPeers peers, IpcRingLaunch launch) {
  using Bits = typename E::Bits;
  Ctx c{peers, launch, peers.progress[launch.rank] + blockIdx.x, 0,
        Describe(launch)};
  // Published (with the data) by the first Publish's release.
  if (threadIdx.x == 0) {
    uint64_t* d = DescriptorOf(peers.progress[launch.rank]);
    d[0] = c.mine.word[0];
    d[1] = c.mine.word[1];
  }
  switch (launch.kind) {
    case IpcRingKind::kRing:
      RingAllReduce<E>(c);
      break;
    case IpcRingKind::kOneShot:
      OneShotAllReduce<E>(c);
      break;
    case IpcRingKind::kBroadcast:
      Broadcast<Bits>(c);
      break;
    case IpcRingKind::kBarrier:
      Barrier(c);
      break;
    case IpcRingKind::kAllGather:
      AllGather<Bits>(c);
      break;
  }
}

}  // namespace

uint64_t IpcRingUnits(const IpcRingLaunch& launch) { return Units(launch); }

IpcRingDescriptor IpcRingDescribe(const IpcRingLaunch& launch) {
  return Describe(launch);
}

std::string IpcRingDescriptorText(const IpcRingDescriptor& d) {
  const auto kind = static_cast<IpcRingKind>(d.word[0] & 15);
  const auto type = static_cast<DataType>((d.word[0] >> 5) & 3);
  const std::string count =
      "count=" + std::to_string(d.word[1]) +
      (type == DataType::kFloat32
           ? ""
           : std::string(", dtype=") + DataTypeName(type));
  const std::string op = (d.word[0] >> 4) & 1 ? "op=avg" : "op=sum";
  switch (kind) {
    case IpcRingKind::kRing:
      return "AllReduce(" + count + ", " + op + "; ring)";
    case IpcRingKind::kOneShot:
      return "AllReduce(" + count + ", " + op + "; one-shot)";
    case IpcRingKind::kBroadcast:
      return "Broadcast(" + count +
             ", root=" + std::to_string((d.word[0] >> 8) & 0xff) + ")";
    case IpcRingKind::kBarrier:
      return "Barrier";
    case IpcRingKind::kAllGather:
      return "AllGather(" + count + ")";
  }
  return "an unknown call";
}

int IpcRingChunks(size_t count, int world_size, size_t chunk_bytes,
                  size_t element_bytes) {
  const size_t seg_bytes =
      RoundUp(CeilDiv(count, world_size), PackLength(element_bytes)) *
      element_bytes;
  const size_t chunks = CeilDiv(seg_bytes, chunk_bytes == 0 ? 1 : chunk_bytes);
  return static_cast<int>(chunks < 1 ? 1 : (chunks > 64 ? 64 : chunks));
}

IpcRingRange IpcRingSlice(size_t count, int world_size, int chunks, int segment,
                          int chunk, int block, size_t element_bytes) {
  return Slice(count, world_size, chunks, segment, chunk, block,
               PackLength(element_bytes));
}

cudaError_t LaunchIpcRing(const IpcRingPeers& peers,
                          const IpcRingLaunch& launch, cudaStream_t stream) {
  (void)cudaGetLastError();  // an older, non-sticky error is not this launch's
  const int threads =
      launch.kind == IpcRingKind::kBarrier ? 32 : kIpcRingThreads;
  switch (launch.type) {
    case DataType::kFloat32:
      IpcRingKernel<Float32>
          <<<kIpcRingBlocks, threads, 0, stream>>>(peers, launch);
      break;
    case DataType::kFloat16:
      IpcRingKernel<Float16>
          <<<kIpcRingBlocks, threads, 0, stream>>>(peers, launch);
      break;
    case DataType::kBFloat16:
      IpcRingKernel<BFloat16>
          <<<kIpcRingBlocks, threads, 0, stream>>>(peers, launch);
      break;
  }
  return cudaGetLastError();
}

}  // namespace ringlab::comm
