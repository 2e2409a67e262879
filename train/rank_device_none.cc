#include <stdexcept>

#include "train/rank_device.h"

namespace ringlab::train {

int SelectRankDevice(int, int) {
  throw std::invalid_argument(
      "--device=cuda: this binary was built without CUDA");
}

void CheckDevicesFromLauncher(int) {
  throw std::invalid_argument(
      "--device=cuda: this binary was built without CUDA");
}

}  // namespace ringlab::train
