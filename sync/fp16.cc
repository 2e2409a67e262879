// fp16: DDP with fp16_compress_hook: each bucket cast to float16 (IEEE half),
// divided by the world size, summed in that type and widened back
// (half_compressor.h).
#include <memory>

#include "sync/compressor.h"
#include "sync/half_compressor.h"

namespace ringlab::sync {
namespace {

CompressorSync DescribeFP16() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "fp16";
  d.summary =
      "DDP with fp16_compress_hook: gradients averaged in float16 (IEEE half)";
  d.sends = "every step: the gradients in 16 bits (half allreduce's bytes)";
  d.pytorch = "DistributedDataParallel.register_comm_hook(fp16_compress_hook)";
  c.make = [](const OptionValues&, int, int) {
    return MakeHalfCompressor(comm::DataType::kFloat16);
  };
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeFP16);

}  // namespace ringlab::sync
