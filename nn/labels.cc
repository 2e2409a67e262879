#include "nn/labels.h"

#include <stdexcept>
#include <string>

namespace ringlab::nn {

void CheckLabels(const int64_t* labels, int batch, int classes) {
  for (int j = 0; j < batch; ++j) {
    if (labels[j] < 0 || labels[j] >= classes) {
      throw std::invalid_argument("label " + std::to_string(labels[j]) +
                                  " at batch index " + std::to_string(j) +
                                  " is outside [0, " + std::to_string(classes) +
                                  ")");
    }
  }
}

}  // namespace ringlab::nn
