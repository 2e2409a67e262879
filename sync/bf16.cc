// bf16: DDP with bf16_compress_hook: each bucket cast to bfloat16, divided by
// the world size, summed in that type and widened back (half_compressor.h).
#include <memory>

#include "sync/ddp.h"
#include "sync/half_compressor.h"

namespace ringlab::sync {
namespace {

SyncDescription DescribeBF16() {
  SyncDescription d;
  d.name = "bf16";
  d.summary = "DDP with bf16_compress_hook: gradients averaged in bfloat16";
  d.sends = "every step: the gradients in 16 bits (half allreduce's bytes)";
  d.pytorch = "DistributedDataParallel.register_comm_hook(bf16_compress_hook)";
  d.options = DdpOptions();
  d.create = [](const SyncContext& c) {
    return CreateCompressorSync(c,
                                MakeHalfCompressor(comm::DataType::kBFloat16),
                                /*error_feedback=*/false);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeBF16);

}  // namespace ringlab::sync
