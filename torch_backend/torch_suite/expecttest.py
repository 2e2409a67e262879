"""The few names of the `expecttest` package that torch's test utilities import
(torch.testing._internal.common_utils): Debian ships torch without it. Nothing
here accepts or rewrites expected output; a test that asks to fails."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802
        self.assertEqual(expect, actual)
