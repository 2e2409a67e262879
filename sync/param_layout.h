// What a synchroniser knows of a model: its parameters as named tensors with
// shapes, in registration order (as a torch state_dict lists them), packed one
// after another in one flat buffer, the gradients in a second buffer of the
// same layout. Nothing else of the model: the trainer's MLP and a PyTorch
// module are both described this way.
#ifndef RINGLAB_SYNC_PARAM_LAYOUT_H_
#define RINGLAB_SYNC_PARAM_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ringlab::sync {

// One named tensor inside the flat buffer.
struct TensorSlot {
  std::string name;            // state_dict name: "fc1.weight", …
  std::vector<int64_t> shape;  // torch's: {out, in} for a Linear's weight
  size_t offset = 0;           // in floats, from the start of the buffer
  size_t size = 0;             // number of floats (the shape's product)
};

class ParamLayout {
 public:
  ParamLayout() = default;
  // The tensors packed in this order from offset 0. Throws
  // std::invalid_argument for an empty name, a repeated one or a negative
  // dimension.
  explicit ParamLayout(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes);

  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  size_t num_params() const { return num_params_; }
  // "fc1.weight [5, 10], fc1.bias [5]": how a mismatch is reported.
  std::string ToString() const;

 private:
  std::vector<TensorSlot> tensors_;
  size_t num_params_ = 0;
};

}  // namespace ringlab::sync

#endif  // RINGLAB_SYNC_PARAM_LAYOUT_H_
