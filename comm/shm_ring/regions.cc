#include "comm/shm_ring/regions.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "comm/shm_ring/segment.h"
#include "comm/store/prefix_store.h"

namespace ringlab::comm {
namespace {

constexpr size_t kPage = 4096;

struct RegionHeader {
  shm::SegmentHeader segment;
  uint64_t count;
};
static_assert(sizeof(RegionHeader) <= kPage, "one page of header");

size_t SlotBytes(size_t count) {
  return std::max(kPage, (count * sizeof(float) + kPage - 1) / kPage * kPage);
}

}  // namespace

ShmRegions::ShmRegions(Store* store, const RankContext& context,
                       std::chrono::milliseconds timeout)
    : store_(store),
      context_(context),
      rank_(context.rank),
      world_(context.world_size),
      timeout_(timeout) {}

ShmRegions::~ShmRegions() {
  for (const Region& r : regions_) munmap(r.base, r.map_bytes);
}

float* ShmRegions::Allocate(size_t count) {
  PrefixStore store("region/" + std::to_string(regions_.size()), store_);
  shm::SegmentJoin join(store, context_, timeout_, "a registered region");
  Region region;
  region.slot_bytes = SlotBytes(count);
  const size_t bytes = kPage + world_ * region.slot_bytes;
  shm::Mapping mapping;
  try {
    if (rank_ == 0) {
      mapping = join.Create(bytes, [&](char* base) {
        reinterpret_cast<RegionHeader*>(base)->count = count;
      });
    } else {
      mapping = join.Open([&](const char* base, size_t mapped) {
        const auto* header = reinterpret_cast<const RegionHeader*>(base);
        if (header->count != count) {
          throw CommError(
              "shm_ring: mismatched Allocate: rank 0 allocated count=" +
              std::to_string(header->count) + ", rank " +
              std::to_string(rank_) + " count=" + std::to_string(count));
        }
        if (mapped != bytes) {
          throw CommError("shm_ring: a registered region has the wrong size");
        }
      });
    }
    // Rank 0 says when every rank holds it: only then is it everyone's.
    join.Finish([] { return std::string("ok"); });
  } catch (const CommError& e) {
    join.Report(e.what());
    if (mapping.base != nullptr) munmap(mapping.base, mapping.bytes);
    throw;
  }
  region.base = mapping.base;
  region.map_bytes = mapping.bytes;
  regions_.push_back(region);
  return reinterpret_cast<float*>(region.base + kPage +
                                  rank_ * region.slot_bytes);
}

bool ShmRegions::Find(const void* data, size_t bytes,
                      std::vector<char*>* peers) const {
  const char* p = static_cast<const char*>(data);
  for (const Region& r : regions_) {
    const char* mine = r.base + kPage + rank_ * r.slot_bytes;
    if (p < mine || p + bytes > mine + r.slot_bytes) continue;
    const size_t offset = static_cast<size_t>(p - mine);
    peers->resize(world_);
    for (int q = 0; q < world_; ++q) {
      (*peers)[q] = r.base + kPage + q * r.slot_bytes + offset;
    }
    return true;
  }
  return false;
}

}  // namespace ringlab::comm
