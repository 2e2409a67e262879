#include "comm/dtype/dtype.h"

namespace ringlab::comm {

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

size_t DataTypeSize(DataType type) {
  return type == DataType::kFloat32 ? 4 : 2;
}

}  // namespace ringlab::comm
