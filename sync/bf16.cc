// bf16: DDP with bf16_compress_hook: each bucket cast to bfloat16, divided by
// the world size, summed in that type and widened back (half_compressor.h).
#include <memory>

#include "sync/compressor.h"
#include "sync/half_compressor.h"

namespace ringlab::sync {
namespace {

CompressorSync DescribeBF16() {
  CompressorSync c;
  SyncDescription& d = c.sync;
  d.name = "bf16";
  d.summary = "DDP with bf16_compress_hook: gradients averaged in bfloat16";
  d.sends = "every step: the gradients in 16 bits (half allreduce's bytes)";
  d.pytorch = "DistributedDataParallel.register_comm_hook(bf16_compress_hook)";
  c.make = [](const OptionValues&, int, int) {
    return MakeHalfCompressor(comm::DataType::kBFloat16);
  };
  return c;
}

}  // namespace

RINGLAB_REGISTER_COMPRESSOR(DescribeBF16);

}  // namespace ringlab::sync
