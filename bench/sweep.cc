#include "bench/sweep.h"

#include <algorithm>

namespace ringlab::bench {

int64_t IterationsFor(int64_t bytes, int64_t cap) {
  const int64_t even = (int64_t{256} << 20) / std::max<int64_t>(bytes, 1) / 4;
  return std::max<int64_t>(1, std::min(std::max<int64_t>(even, 5), cap));
}

std::vector<int64_t> SweepSizes(int64_t min_bytes, int64_t max_bytes,
                                int64_t factor) {
  std::vector<int64_t> sizes;
  for (int64_t b = std::max<int64_t>(min_bytes, 4); b <= max_bytes;
       b *= factor) {
    sizes.push_back(b);
  }
  return sizes;
}

}  // namespace ringlab::bench
