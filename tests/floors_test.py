"""scripts/check_floors.py: src/ has no include running up a floor, and the
check catches one that does (run by CTest: python3 floors_test.py)."""
import os
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_floors  # noqa: E402


class Floors(unittest.TestCase):
    def test_src_points_down(self):
        self.assertEqual(check_floors.violations(os.path.join(ROOT, "src")), [])

    def test_an_upward_include_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            for floor, text in (("kv", '#include "kv/a.h"\n#include "base/b.h"\n'
                                       '#include "engine/request.h"\n#include <vector>\n'),
                                ("engine", '#include "kv/a.h"\n'), ("extra", "")):
                os.mkdir(os.path.join(d, floor))
                with open(os.path.join(d, floor, "x.h"), "w") as f:
                    f.write(text)
            self.assertEqual(check_floors.violations(d), [
                os.path.join(d, "extra") + ": a directory that is no floor (add it to FLOORS and docs/ARCHITECTURE.md)",
                os.path.join(d, "kv", "x.h") + ':3: kv includes engine, a floor above it: #include "engine/request.h"',
            ])

if __name__ == "__main__":
    unittest.main()
