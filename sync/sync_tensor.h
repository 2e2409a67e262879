// A part of a synchroniser's state that a resumed run needs besides the
// model's parameters (DiLoCo's outer parameters and momentum, PowerSGD's
// errors and Q matrices): checkpoints write and read it by name.
#ifndef RINGLAB_SYNC_SYNC_TENSOR_H_
#define RINGLAB_SYNC_SYNC_TENSOR_H_

#include <string>
#include <vector>

namespace ringlab::sync {

struct SyncTensor {
  std::string name;
  std::vector<float>* values;  // its size is fixed when the state is made
};

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_SYNC_TENSOR_H_
