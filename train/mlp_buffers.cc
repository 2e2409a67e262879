#include "train/mlp_buffers.h"

#include <string>
#include <utility>
#include <vector>

namespace ringlab::train {

sync::ParamLayout SyncLayoutOf(const nn::MlpLayout& layout) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const nn::TensorSlot& t : layout.tensors()) {
    shapes.emplace_back(t.name, t.shape);
  }
  return sync::ParamLayout(shapes);
}

comm::MemoryKind MlpBuffers::memory() const {
  return model_.device() == nn::Device::kCuda ? comm::MemoryKind::kDevice
                                              : comm::MemoryKind::kHost;
}

}  // namespace ringlab::train
