// NumPy .npy files: the exchange format between ringlab and the PyTorch side
// (data sets, exported reference values, checkpoints as one file per state_dict
// tensor: nn/params_io.h). Only what ringlab needs: little-endian float32
// ('<f4') and int64
// ('<i8'), C order, format versions 1.0 (written) and 1.0/2.0/3.0 (read). Every
// malformed file is reported as one NpyError naming the file and the problem;
// writes go to a temporary file that is renamed into place, so an existing
// file is never left half-written.
#ifndef RINGLAB_IO_NPY_H_
#define RINGLAB_IO_NPY_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringlab::io {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NpyDtype { kFloat32, kInt64 };
const char* NpyDtypeName(NpyDtype dtype);  // "float32" / "int64"

// What a header says.
struct NpyHeader {
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // bytes from the start of the file
  int64_t num_elements = 1;
};

// Parses the header of an in-memory file (exposed for tests); what names the
// file in error messages. Checks the magic, version, header length, dict
// syntax, dtype, fortran_order, shape (non-negative, no overflow) and that the
// data that follows has exactly the size the shape implies.
NpyHeader ParseNpy(const std::string& what, const std::string& bytes);

// A file's header, reading nothing past it: the data's size is checked
// against the file's (a truncated or padded file is refused), its values are
// not read. For a launcher's cheap checks.
NpyHeader ReadNpyHeader(const std::string& path);

// "(3, 4)" — the shape as NumPy prints it.
std::string ShapeToString(const std::vector<int64_t>& shape);

// Read a whole file. The shape is returned through *shape (may be null).
// Throws NpyError if the file is unreadable, malformed or of another dtype.
std::vector<float> ReadNpyFloat32(const std::string& path,
                                  std::vector<int64_t>* shape);
std::vector<int64_t> ReadNpyInt64(const std::string& path,
                                  std::vector<int64_t>* shape);

// Atomic writes (temporary file + rename). data holds the product of shape.
void WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                     const float* data);
void WriteNpyInt64(const std::string& path, const std::vector<int64_t>& shape,
                   const int64_t* data);

// Data-set helpers: a float32 matrix [n, f] and an int64 vector [n]. Throw
// NpyError when the rank differs (or, for expected_cols >= 0, the width).
std::vector<float> ReadFloatMatrix(const std::string& path, int64_t* rows,
                                   int64_t* cols, int64_t expected_cols = -1);
std::vector<int64_t> ReadInt64Vector(const std::string& path);

}  // namespace ringlab::io

#endif  // RINGLAB_IO_NPY_H_
