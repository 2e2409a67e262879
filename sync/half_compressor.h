// fp16_compress_hook and bf16_compress_hook's recipe as a compressor: each
// gradient rounded to the 16-bit type (nearest even), divided by the world
// size in the type (float32 division, rounded again: torch's h.div_(W)),
// summed over the ranks by the communicator in the type (rounded after each
// partial sum of its algorithm), widened back exactly. For 2 ranks the sum is
// correctly rounded and so bit for bit torch's over gloo.
#ifndef RINGLAB_SYNC_HALF_COMPRESSOR_H_
#define RINGLAB_SYNC_HALF_COMPRESSOR_H_

#include <memory>

#include "comm/dtype/dtype.h"
#include "sync/compressor.h"

namespace ringlab::sync {

// type: kFloat16 or kBFloat16 (std::invalid_argument otherwise).
std::unique_ptr<Compressor> MakeHalfCompressor(comm::DataType type);

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_HALF_COMPRESSOR_H_
