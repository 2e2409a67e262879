#include "sync/param_layout.h"

#include <set>
#include <stdexcept>

namespace ringlab::sync {

ParamLayout::ParamLayout(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
  std::set<std::string> seen;
  for (const auto& [name, shape] : shapes) {
    if (name.empty() || !seen.insert(name).second) {
      throw std::invalid_argument("parameter layout: name '" + name +
                                  "' is empty or repeated");
    }
    size_t size = 1;
    for (const int64_t dim : shape) {
      if (dim < 0) {
        throw std::invalid_argument("parameter layout: " + name +
                                    " has a negative dimension");
      }
      size *= static_cast<size_t>(dim);
    }
    tensors_.push_back({name, shape, num_params_, size});
    num_params_ += size;
  }
}

std::string ParamLayout::ToString() const {
  std::string text;
  for (const TensorSlot& t : tensors_) {
    if (!text.empty()) text += ", ";
    text += t.name + " [";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      text += (i ? ", " : "") + std::to_string(t.shape[i]);
    }
    text += "]";
  }
  return text;
}

}  // namespace ringlab::sync
