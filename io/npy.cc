#include "io/npy.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "io/atomic_file.h"
#include "io/regular_file.h"

namespace ringlab::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// Real headers are a few hundred bytes; a bound keeps a corrupt length field
// from asking for gigabytes.
constexpr size_t kMaxHeaderLen = 1 << 20;

[[noreturn]] void Fail(const std::string& what, const std::string& problem) {
  throw NpyError(what + ": " + problem);
}

// A tiny parser for the Python dict literal in the header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(const std::string& what, const std::string& text)
      : what_(what), s_(text) {}

  void Parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    Expect('{');
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = ParseString();
      Expect(':');
      if (key == "descr") {
        *descr = ParseString();
        have_descr = true;
      } else if (key == "fortran_order") {
        *fortran = ParseBool();
        have_fortran = true;
      } else if (key == "shape") {
        *shape = ParseTuple();
        have_shape = true;
      } else {
        Fail(what_, "unexpected key '" + key + "' in header");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
      } else if (Peek() != '}') {
        Bad("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (i_ != s_.size()) Bad("trailing characters after the header dict");
    if (!have_descr || !have_fortran || !have_shape) {
      Fail(what_,
           "header lacks one of 'descr', 'fortran_order', 'shape': " + s_);
    }
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' ||
                              s_[i_] == '\t' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  [[noreturn]] void Bad(const std::string& msg) {
    Fail(what_, "malformed header (" + msg + " at offset " +
                    std::to_string(i_) + "): " + Printable());
  }
  std::string Printable() const {
    std::string out;
    for (char c : s_.substr(0, 200)) {
      out += (c >= 32 && c < 127) ? c : '?';
    }
    return out;
  }
  void Expect(char c) {
    SkipSpace();
    if (Peek() != c) Bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string ParseString() {
    SkipSpace();
    const char q = Peek();
    if (q != '\'' && q != '"') Bad("expected a quoted string");
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string::npos) Bad("unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool ParseBool() {
    SkipSpace();
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    Bad("expected True or False");
  }
  int64_t ParseInt() {
    SkipSpace();
    if (!(Peek() >= '0' && Peek() <= '9'))
      Bad("expected a non-negative integer");
    int64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      const int d = Peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) {
        Bad("dimension too large");
      }
      v = v * 10 + d;
      ++i_;
    }
    // Python 2 era files may write 3L.
    if (Peek() == 'L') ++i_;
    return v;
  }
  std::vector<int64_t> ParseTuple() {
    Expect('(');
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Peek() == ')') {
        ++i_;
        break;
      }
      if (dims.size() >= 32) Bad("more than 32 dimensions");
      dims.push_back(ParseInt());
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
      } else if (Peek() != ')') {
        Bad("expected ',' or ')' in shape");
      }
    }
    return dims;
  }

  const std::string& what_;
  const std::string& s_;
  size_t i_ = 0;
};

size_t ItemSize(NpyDtype dtype) { return dtype == NpyDtype::kInt64 ? 8 : 4; }

NpyHeader ParseNpyPrefix(const std::string& what, const std::string& bytes,
                         uint64_t file_size);

// Opened for reading without blocking and refused unless a regular file.
void OpenOrFail(const RegularFile& file, const std::string& path) {
  if (file.refusal() == RegularFile::Refusal::kDirectory) {
    Fail(path, "is a directory, not a .npy file");
  }
  if (file.refusal() != RegularFile::Refusal::kNone) Fail(path, file.Why());
}

std::string ReadOrFail(const RegularFile& file, const std::string& path,
                       uint64_t n) {
  std::string bytes, error;
  if (!file.ReadAt(0, n, &bytes, &error)) Fail(path, "read error: " + error);
  return bytes;
}

// The header only: a bounded read, whatever the file's size.
NpyHeader ReadHeaderOf(const RegularFile& file, const std::string& path) {
  return ParseNpyPrefix(
      path,
      ReadOrFail(
          file, path,
          std::min<uint64_t>(file.size(), kMagicLen + 2 + 4 + kMaxHeaderLen)),
      file.size());
}

// The whole file, once its header has said how large it must be (ParseNpy-
// Prefix refuses a file of another size): nothing unbounded is read.
std::string ReadWholeFile(const std::string& path) {
  const RegularFile file(path);
  OpenOrFail(file, path);
  ReadHeaderOf(file, path);
  return ReadOrFail(file, path, file.size());
}

template <typename T>
std::vector<T> ReadTyped(const std::string& path, NpyDtype want,
                         std::vector<int64_t>* shape) {
  const std::string bytes = ReadWholeFile(path);
  const NpyHeader h = ParseNpy(path, bytes);
  if (h.dtype != want) {
    Fail(path, std::string("dtype is ") + NpyDtypeName(h.dtype) +
                   ", expected " + NpyDtypeName(want));
  }
  std::vector<T> out(static_cast<size_t>(h.num_elements));
  if (!out.empty()) {
    std::memcpy(out.data(), bytes.data() + h.data_offset,
                out.size() * sizeof(T));
  }
  if (shape) *shape = h.shape;
  return out;
}

std::string MakeHeader(const char* descr, const std::vector<int64_t>& shape) {
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  // Pad with spaces and a final newline so the data starts 64-byte aligned,
  // as NumPy does.
  size_t prefix = kMagicLen + 2 + 2;
  size_t total = prefix + dict.size() + 1;
  bool v2 = false;
  if (total - prefix > 65535) {
    v2 = true;
    prefix = kMagicLen + 2 + 4;
    total = prefix + dict.size() + 1;
  }
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(v2 ? 2 : 1);
  out += static_cast<char>(0);
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>((len >> 8) & 0xFF);
  if (v2) {
    out += static_cast<char>((len >> 16) & 0xFF);
    out += static_cast<char>((len >> 24) & 0xFF);
  }
  return out + dict;
}

int64_t CheckedCount(const std::string& path,
                     const std::vector<int64_t>& shape) {
  // The reader's limit: what this writes must read back.
  if (shape.size() > 32) Fail(path, "more than 32 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      Fail(path, "negative dimension in shape " + ShapeToString(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) {
      Fail(path, "shape " + ShapeToString(shape) + " is too large");
    }
    n *= d;
  }
  return n;
}

void WriteAtomic(const std::string& path, const std::string& header,
                 const void* data, size_t nbytes) {
  try {
    WriteFileAtomically(path, header, data, nbytes);
  } catch (const std::runtime_error& e) {
    throw NpyError(e.what());
  }
}

}  // namespace

const char* NpyDtypeName(NpyDtype dtype) {
  return dtype == NpyDtype::kInt64 ? "int64" : "float32";
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

namespace {

// The header at the start of `bytes` (the whole file, or at least its
// header), checked against the file's size.
NpyHeader ParseNpyPrefix(const std::string& what, const std::string& bytes,
                         uint64_t file_size) {
  if (bytes.size() < kMagicLen + 2 ||
      bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    Fail(what, "not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  size_t len_bytes;
  if (major == 1 && minor == 0) {
    len_bytes = 2;
  } else if ((major == 2 || major == 3) && minor == 0) {
    len_bytes = 4;
  } else {
    Fail(what, "unsupported .npy format version " + std::to_string(major) +
                   "." + std::to_string(minor));
  }
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (bytes.size() < prefix) Fail(what, "truncated header");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(
                      static_cast<unsigned char>(bytes[kMagicLen + 2 + i]))
                  << (8 * i);
  }
  if (header_len > kMaxHeaderLen) {
    Fail(what, "header length " + std::to_string(header_len) +
                   " exceeds the limit of " + std::to_string(kMaxHeaderLen));
  }
  if (bytes.size() < prefix + header_len) {
    Fail(what, "truncated header (header length " + std::to_string(header_len) +
                   ", file has " + std::to_string(bytes.size()) + " bytes)");
  }
  const std::string text = bytes.substr(prefix, header_len);
  for (char c : text) {
    if (c == '\0') Fail(what, "malformed header (NUL byte)");
  }
  std::string descr;
  bool fortran = false;
  NpyHeader h;
  HeaderParser(what, text).Parse(&descr, &fortran, &h.shape);
  if (descr == "<f4" || descr == "=f4") {
    h.dtype = NpyDtype::kFloat32;
  } else if (descr == "<i8" || descr == "=i8") {
    h.dtype = NpyDtype::kInt64;
  } else {
    Fail(what, "unsupported dtype '" + descr +
                   "' (only little-endian float32 '<f4' and int64 '<i8')");
  }
  if (fortran) Fail(what, "fortran_order=True is not supported (C order only)");
  h.num_elements = CheckedCount(what, h.shape);
  h.data_offset = prefix + header_len;
  const uint64_t want =
      static_cast<uint64_t>(h.num_elements) * ItemSize(h.dtype);
  if (file_size < h.data_offset) Fail(what, "truncated header");
  const uint64_t have = file_size - h.data_offset;
  if (have < want) {
    Fail(what, "truncated data: shape " + ShapeToString(h.shape) + " needs " +
                   std::to_string(want) + " bytes, file has " +
                   std::to_string(have));
  }
  if (have > want) {
    Fail(what, std::to_string(have - want) +
                   " bytes of trailing garbage after the data of shape " +
                   ShapeToString(h.shape));
  }
  return h;
}

}  // namespace

NpyHeader ParseNpy(const std::string& what, const std::string& bytes) {
  return ParseNpyPrefix(what, bytes, bytes.size());
}

NpyHeader ReadNpyHeader(const std::string& path) {
  const RegularFile file(path);
  OpenOrFail(file, path);
  return ReadHeaderOf(file, path);
}

std::vector<float> ReadNpyFloat32(const std::string& path,
                                  std::vector<int64_t>* shape) {
  return ReadTyped<float>(path, NpyDtype::kFloat32, shape);
}

std::vector<int64_t> ReadNpyInt64(const std::string& path,
                                  std::vector<int64_t>* shape) {
  return ReadTyped<int64_t>(path, NpyDtype::kInt64, shape);
}

void WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                     const float* data) {
  const int64_t n = CheckedCount(path, shape);
  WriteAtomic(path, MakeHeader("<f4", shape), data,
              static_cast<size_t>(n) * sizeof(float));
}

void WriteNpyInt64(const std::string& path, const std::vector<int64_t>& shape,
                   const int64_t* data) {
  const int64_t n = CheckedCount(path, shape);
  WriteAtomic(path, MakeHeader("<i8", shape), data,
              static_cast<size_t>(n) * sizeof(int64_t));
}

std::vector<float> ReadFloatMatrix(const std::string& path, int64_t* rows,
                                   int64_t* cols, int64_t expected_cols) {
  std::vector<int64_t> shape;
  std::vector<float> data = ReadNpyFloat32(path, &shape);
  if (shape.size() != 2) {
    Fail(path, "expected a matrix [n, features], found shape " +
                   ShapeToString(shape));
  }
  if (expected_cols >= 0 && shape[1] != expected_cols) {
    Fail(path, "expected " + std::to_string(expected_cols) +
                   " features per row, found shape " + ShapeToString(shape));
  }
  if (rows) *rows = shape[0];
  if (cols) *cols = shape[1];
  return data;
}

std::vector<int64_t> ReadInt64Vector(const std::string& path) {
  std::vector<int64_t> shape;
  std::vector<int64_t> data = ReadNpyInt64(path, &shape);
  if (shape.size() != 1) {
    Fail(path, "expected a vector [n], found shape " + ShapeToString(shape));
  }
  return data;
}

}  // namespace ringlab::io
