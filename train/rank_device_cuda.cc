#include <stdexcept>
#include <string>

#include "cuda/device.h"
#include "cuda/error.h"
#include "train/rank_device.h"

namespace ringlab::train {

int SelectRankDevice(int requested, int local_rank) {
  try {
    return cuda::SelectRankDevice(requested, local_rank);
  } catch (const cuda::CudaError& e) {
    throw std::invalid_argument(std::string("--device=cuda: ") + e.what());
  }
}

void CheckDevicesFromLauncher(int requested) {
  std::string why;
  const int count = cuda::DeviceCountInChild(&why);
  if (count == 0) {
    throw std::invalid_argument("--device=cuda: no usable device (" + why +
                                ")");
  }
  if (requested >= count) {
    throw std::invalid_argument("--device=cuda:" + std::to_string(requested) +
                                ": this machine has " + std::to_string(count) +
                                " device(s)");
  }
}

}  // namespace ringlab::train
