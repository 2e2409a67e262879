// none: the ranks train independently, nothing exchanged (a baseline).
#include <memory>

#include "sync/synchronizer.h"

namespace ringlab::sync {
namespace {

class NoSynchronizer : public Synchronizer {
 public:
  void AfterBackward(ModelBuffers&, int64_t) override {}
  void AfterStep(ModelBuffers&, int64_t) override {}
};

SyncDescription DescribeNone() {
  SyncDescription d;
  d.name = "none";
  d.summary = "the ranks train independently (a baseline)";
  d.sends = "nothing";
  d.pytorch = "none (no DDP)";
  d.create = [](const SyncContext&) -> std::unique_ptr<Synchronizer> {
    return std::make_unique<NoSynchronizer>();
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeNone);

}  // namespace ringlab::sync
