#!/usr/bin/env python3
"""tools/check_sizes.py's scan on the C++ it must not be fooled by: constructor
initialiser lists with brace initialisers, lambdas and initialisers at
namespace scope, braces in strings, characters, comments and raw strings,
digit separators, operators, templates, TEST bodies, preprocessor lines; and
on Python: methods, nested and decorated functions, a planted long function,
a long file and one that does not parse."""
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


PYTHON = '''"""A module."""
import functools


@functools.lru_cache
def cached(x):
    return x


class Thing:
    def method(self):
        def inner():
            return 1
        return inner()

    async def later(self):
        return 2


text = "def not_a_function(): pass"
'''


class PythonTest(unittest.TestCase):
    def test_functions_and_their_lines(self):
        self.assertEqual(check_sizes.python_functions(PYTHON), [
            ("cached", 5, 7),
            ("Thing.method", 11, 14),
            ("Thing.method.inner", 12, 13),
            ("Thing.later", 16, 17),
        ])

    def test_a_planted_long_function_file_and_syntax_error_fail(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "pkg"))
            body = "import os\n\n\ndef long_one():\n" + "    os.getcwd()\n" * 100 + "\n"
            with open(os.path.join(d, "pkg", "long.py"), "w") as f:
                f.write(body)
            with open(os.path.join(d, "pkg", "short.py"), "w") as f:
                f.write("def short():\n" + "    pass\n" * 99)  # 100 lines: at the limit
            with open(os.path.join(d, "pkg", "long_test.py"), "w") as f:
                f.write("x = 1\n" * 700)
            problems = check_sizes.check([os.path.join(d, "pkg")], 100, 600)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn("long.py:4: long_one is 101 lines (limit 100)", problems[0])
            problems = check_sizes.check([os.path.join(d, "pkg")], 200, 50)
            self.assertEqual(len(problems), 2, problems)
            self.assertIn("long.py: 105 lines (limit 50)", problems[0])
            self.assertIn("short.py: 100 lines (limit 50)", problems[1])
            with open(os.path.join(d, "pkg", "broken.py"), "w") as f:
                f.write("def broken(:\n")
            problems = check_sizes.check([os.path.join(d, "pkg")], 100, 600)
            self.assertEqual(len(problems), 2, problems)
            self.assertIn("broken.py:1: does not parse", problems[0])

    def test_main_fails_on_a_long_python_function(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "tool.py"), "w") as f:
                f.write("def f():\n" + "    pass\n" * 120)
            self.assertEqual(check_sizes.main([d]), 1)
            self.assertEqual(check_sizes.main(["--max_function_lines=200", d]), 0)


if __name__ == "__main__":
    unittest.main()
