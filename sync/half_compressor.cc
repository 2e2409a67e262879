#include "sync/half_compressor.h"

#include <memory>
#include <stdexcept>

#include "comm/dtype/kernels.h"

namespace ringlab::sync {
namespace {

class HalfCompressor : public Compressor {
 public:
  explicit HalfCompressor(comm::DataType type)
      : type_(type), kernels_(comm::dtype::KernelsFor(type)) {}
  Collective collective() const override { return Collective::kAllReduce; }
  bool elementwise() const override { return true; }
  comm::DataType wire_type() const override { return type_; }
  size_t WireCount(size_t count) const override { return count; }
  void Encode(const float* grads, size_t count, int world_size,
              void* wire) override {
    kernels_.narrow(wire, grads, count);
    kernels_.scale(wire, static_cast<float>(world_size), count);
  }
  void Decode(const void* wire, size_t count, int, float* grads) override {
    kernels_.widen(grads, wire, count);
  }

 private:
  const comm::DataType type_;
  const comm::dtype::ElementKernels& kernels_;
};

}  // namespace

std::unique_ptr<Compressor> MakeHalfCompressor(comm::DataType type) {
  if (type == comm::DataType::kFloat32) {
    throw std::invalid_argument("a half compressor needs a 16-bit type");
  }
  return std::make_unique<HalfCompressor>(type);
}

}  // namespace ringlab::sync
