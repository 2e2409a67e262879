#include "comm/dtype/dtype.h"

#include <cstring>

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

bool DataTypeNamed(const char* name, DataType* type) {
  for (DataType t : kAllDataTypes) {
    if (std::strcmp(name, DataTypeName(t)) == 0) {
      *type = t;
      return true;
    }
  }
  return false;
}

size_t DataTypeSize(DataType type) {
  return type == DataType::kFloat32 ? 4 : 2;
}

}  // namespace ringlab::comm
