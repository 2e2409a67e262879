#include "nn/params_io.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "io/npy.h"

namespace ringlab::nn {

void SaveParams(const std::string& dir, const MlpLayout& layout,
                const float* params) {
  for (const TensorSlot& t : layout.tensors()) {
    io::WriteNpyFloat32(dir + "/" + t.name + ".npy", t.shape,
                        params + t.offset);
  }
}

namespace {

void CheckShape(const std::string& path, const TensorSlot& t,
                const MlpLayout& layout, const std::vector<int64_t>& shape) {
  if (shape != t.shape) {
    throw io::NpyError(path + ": shape mismatch for " + t.name + " of layout " +
                       layout.ToString() + ": expected " +
                       io::ShapeToString(t.shape) + ", found " +
                       io::ShapeToString(shape));
  }
}

}  // namespace

void CheckParamsDir(const std::string& dir, const MlpLayout& layout) {
  for (const TensorSlot& t : layout.tensors()) {
    const std::string path = dir + "/" + t.name + ".npy";
    const io::NpyHeader header = io::ReadNpyHeader(path);
    if (header.dtype != io::NpyDtype::kFloat32) {
      throw io::NpyError(path + ": dtype is " + io::NpyDtypeName(header.dtype) +
                         ", expected float32");
    }
    CheckShape(path, t, layout, header.shape);
  }
}

void LoadParams(const std::string& dir, const MlpLayout& layout,
                float* params) {
  // Read everything first so a bad file leaves params untouched.
  std::vector<std::vector<float>> all;
  for (const TensorSlot& t : layout.tensors()) {
    const std::string path = dir + "/" + t.name + ".npy";
    std::vector<int64_t> shape;
    all.push_back(io::ReadNpyFloat32(path, &shape));
    CheckShape(path, t, layout, shape);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const TensorSlot& t = layout.tensors()[i];
    std::memcpy(params + t.offset, all[i].data(), t.size * sizeof(float));
  }
}

}  // namespace ringlab::nn
