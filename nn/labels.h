// What every Mlp backend accepts as class labels: integers in [0, classes),
// checked on the host before any backend computes with them (out of range,
// the CPU backend would read outside its logits and the CUDA one would fault).
#ifndef RINGLAB_NN_LABELS_H_
#define RINGLAB_NN_LABELS_H_

#include <cstdint>

namespace ringlab::nn {

// Throws std::invalid_argument naming the first label outside [0, classes).
void CheckLabels(const int64_t* labels, int batch, int classes);

}  // namespace ringlab::nn

#endif  // RINGLAB_NN_LABELS_H_
