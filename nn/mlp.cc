#include "nn/mlp.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace ringlab::nn {

MlpLayout::MlpLayout(std::vector<int> widths) : widths_(std::move(widths)) {
  if (widths_.size() < 2) {
    throw std::invalid_argument(
        "MlpLayout: need at least 2 widths (inputs and classes), got " +
        std::to_string(widths_.size()));
  }
  for (size_t i = 0; i < widths_.size(); ++i) {
    if (widths_[i] <= 0) {
      throw std::invalid_argument("MlpLayout: width " + std::to_string(i) +
                                  " is " + std::to_string(widths_[i]) +
                                  ", must be positive");
    }
  }
  size_t offset = 0;
  for (int layer = 0; layer + 1 < static_cast<int>(widths_.size()); ++layer) {
    const int64_t in = widths_[layer], out = widths_[layer + 1];
    const std::string prefix = "fc" + std::to_string(layer + 1);
    TensorSlot w{
        prefix + ".weight", {out, in}, offset, static_cast<size_t>(out * in)};
    offset += w.size;
    TensorSlot b{prefix + ".bias", {out}, offset, static_cast<size_t>(out)};
    offset += b.size;
    tensors_.push_back(std::move(w));
    tensors_.push_back(std::move(b));
  }
  num_params_ = offset;
}

MlpLayout MlpLayout::Parse(const std::string& text) {
  std::vector<int> widths;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    std::string item = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    // Tolerate spaces around numbers ("10, 5, 2").
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty()) {
      throw std::invalid_argument("MlpLayout::Parse: empty width in \"" + text +
                                  "\" (expected e.g. \"10,5,2\")");
    }
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || v <= 0 || v > (1L << 30)) {
      throw std::invalid_argument("MlpLayout::Parse: bad width \"" + item +
                                  "\" in \"" + text +
                                  "\" (expected positive integers, e.g. "
                                  "\"10,5,2\")");
    }
    widths.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (widths.size() < 2) {
    throw std::invalid_argument("MlpLayout::Parse: \"" + text +
                                "\" has fewer than 2 widths (expected e.g. "
                                "\"10,5,2\")");
  }
  return MlpLayout(std::move(widths));
}

std::string MlpLayout::ToString() const {
  std::ostringstream out;
  for (size_t i = 0; i < widths_.size(); ++i) {
    if (i) out << ',';
    out << widths_[i];
  }
  return out.str();
}

const char* DeviceName(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "unknown";
}

namespace {

// Function-local statics: registrars in other translation units run during
// static initialisation, in an unspecified order relative to this file.
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::map<Device, MlpFactory>& Registry() {
  static auto* registry = new std::map<Device, MlpFactory>();
  return *registry;
}

}  // namespace

bool RegisterMlpBackend(Device device, MlpFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[device] = std::move(factory);
  return true;
}

bool HasMlpBackend(Device device) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().count(device) != 0;
}

std::unique_ptr<Mlp> CreateMlp(Device device, const MlpLayout& layout) {
  MlpFactory factory;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(device);
    if (it != Registry().end()) factory = it->second;
  }
  if (!factory) {
    if (device == Device::kCuda) {
      throw std::runtime_error(
          "CUDA backend not built into this binary (link //nn:cuda_mlp; it "
          "needs a CUDA toolkit at build time)");
    }
    throw std::runtime_error(std::string("no MLP backend registered for ") +
                             DeviceName(device) +
                             " (link //nn:mlp, which registers the CPU one)");
  }
  return factory(layout);
}

void ValidateSgdOptions(const SgdOptions& o) {
  if (!(o.lr >= 0.0f) || !(o.momentum >= 0.0f) || !(o.weight_decay >= 0.0f)) {
    throw std::invalid_argument(
        "SGD: lr, momentum and weight_decay must be >= 0");
  }
  if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f)) {
    throw std::invalid_argument(
        "SGD: Nesterov momentum requires a momentum and zero dampening");
  }
}

}  // namespace ringlab::nn
