#!/usr/bin/env python3
"""tools/check_sizes.py's scan on the C++ it must not be fooled by: constructor
initialiser lists with brace initialisers, lambdas and initialisers at
namespace scope, braces in strings, characters, comments and raw strings,
digit separators, operators, templates, TEST bodies, preprocessor lines."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_sizes  # noqa: E402

SOURCE = r'''#include <x>
#define BODY(x) { do { x; } while (0) }
namespace a {
struct S {
  S(int x) : x_{x}, y_(2) {
    int z{3};
  }
  int f() const { return 1; }
  int x_, y_;
};
auto lam = [](int q) {
  return q;
};
const char* s = "}{";
constexpr long kBig = 1'000'000;
int g(int a = 3) {
  char c = '{';
  // }
  /* { */
  return R"x(})x"[0];
}
TEST_F(Fix, Name) {
}
Foo::Foo(int a) : x_{a} {
}
bool operator==(const A&, const A&) {
  return true;
}
template <typename T>
T Max(T a) {
  return a;
}
int h() noexcept -> int {
  if (true) {
    return 1;
  }
  return 0;
}
}  // namespace a
'''


class ScanTest(unittest.TestCase):
    def test_functions_and_their_lines(self):
        self.assertEqual(check_sizes.functions(SOURCE), [
            ("S", 5, 7),
            ("f", 8, 8),
            ("g", 16, 21),
            ("TEST_F(Fix, Name)", 22, 23),
            ("Foo::Foo", 24, 25),
            ("operator==", 26, 28),
            ("Max", 29, 32),
            ("h", 33, 38),
        ])

    def test_blanking_keeps_offsets_and_lines(self):
        blank = check_sizes.blank_noncode(SOURCE)
        self.assertEqual(len(blank), len(SOURCE))
        self.assertEqual(blank.count("\n"), SOURCE.count("\n"))
        self.assertEqual(blank.count("{"), blank.count("}"))

    def test_limits(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "pkg"))
            body = "int f() {\n" + "  x();\n" * 100 + "}\n"
            with open(os.path.join(d, "pkg", "long.cc"), "w") as f:
                f.write(body)
            with open(os.path.join(d, "pkg", "long_test.cc"), "w") as f:
                f.write("\n" * 700)
            problems = check_sizes.check([os.path.join(d, "pkg")], 100, 600)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn("long.cc:1: f is 102 lines (limit 100)", problems[0])
            problems = check_sizes.check([os.path.join(d, "pkg")], 200, 50)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn("long.cc: 102 lines (limit 50)", problems[0])


if __name__ == "__main__":
    unittest.main()
