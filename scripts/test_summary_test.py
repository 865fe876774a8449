#!/usr/bin/python3
"""scripts/test_summary.py counts every case, a skipped one inside a passing target too."""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_summary  # noqa: E402

GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="0" disabled="1" errors="0" name="AllTests">
  <testsuite name="Clock" tests="3" failures="0" disabled="1" skipped="1" errors="0">
    <testcase name="Steps" status="run" result="completed" classname="Clock" />
    <testcase name="NeedsFaketime" status="run" result="skipped" classname="Clock">
      <skipped message="tests/clock_test.cc:12&#x0A;libfaketime is not installed"><![CDATA[
]]></skipped>
    </testcase>
    <testcase name="DISABLED_Slow" status="notrun" result="suppressed" classname="Clock" />
  </testsuite>
</testsuites>
"""

GTEST_FAILED_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="1" name="AllTests">
  <testsuite name="S" tests="2" failures="1">
    <testcase name="A" status="run" result="completed" classname="S" />
    <testcase name="B" status="run" result="completed" classname="S">
      <failure message="x.cc:3 Expected equality" type=""/>
    </testcase>
  </testsuite>
</testsuites>
"""

# What Bazel writes for a test that writes no XML of its own (an sh_test).
BAZEL_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="python/plan_test" tests="1" failures="0" errors="0">
<testcase name="python/plan_test" status="run" duration="3" time="3"></testcase>
</testsuite></testsuites>
"""

UNITTEST_LOG = """test_a (plan_test.PlanTest.test_a) ... ok
test_b (plan_test.PlanTest.test_b) ... skipped 'needs a GPU'
test_c (plan_test.PlanTest.test_c)
The plan's K. ... ok
test_d (plan_test.PlanTest.test_d) ... FAIL

----------------------------------------------------------------------
Ran 4 tests in 0.010s

FAILED (failures=1, skipped=1)
"""


class TestSummaryTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def put(self, target, log="", xml=None):
        base = os.path.join(self.dir, target[2:].replace(":", "/"))
        os.makedirs(base, exist_ok=True)
        with open(os.path.join(base, "test.log"), "w") as f:
            f.write(log)
        if xml is not None:
            with open(os.path.join(base, "test.xml"), "w") as f:
                f.write(xml)

    def summarize(self, status_lines):
        output = os.path.join(self.dir, "bazel-output.txt")
        with open(output, "w") as f:
            f.write("INFO: Analyzed 3 targets\n" + "\n".join(status_lines) + "\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(test_summary.main(["test_summary.py", output, self.dir]), 0)
        lines = out.getvalue().splitlines()
        return lines[:-1], tuple(int(n) for n in lines[-1].split())

    def test_a_skipped_gtest_case_inside_a_passing_target_is_skipped(self):
        self.put("//tests:clock_test", xml=GTEST_XML)
        listed, totals = self.summarize(["//tests:clock_test    PASSED in 1.0s"])
        self.assertEqual(totals, (1, 0, 1))
        self.assertEqual(listed, ["SKIPPED //tests:clock_test Clock.NeedsFaketime: "
                                  "libfaketime is not installed"])

    def test_unittest_cases_are_counted_one_by_one(self):
        self.put("//python:plan_test", log=UNITTEST_LOG, xml=BAZEL_XML)
        listed, totals = self.summarize(["//python:plan_test   FAILED in 3.0s"])
        self.assertEqual(totals, (2, 1, 1))
        self.assertIn("SKIPPED //python:plan_test plan_test.PlanTest.test_b: needs a GPU", listed)
        self.assertIn("FAILED //python:plan_test plan_test.PlanTest.test_d", listed)

    def test_marker_skips_a_shell_test_and_cached_lines_count(self):
        self.put("//tests/deploy:kubeconform_test",
                 log="MONTA_TEST_SKIPPED: kubeconform is not installed\n", xml=BAZEL_XML)
        self.put("//tests:help_test", log="ok\n", xml=BAZEL_XML)
        listed, totals = self.summarize([
            "//tests/deploy:kubeconform_test  (cached) PASSED in 0.1s",
            "//tests:help_test                PASSED in 0.2s"])
        self.assertEqual(totals, (1, 0, 1))
        self.assertEqual(listed, ["SKIPPED //tests/deploy:kubeconform_test: "
                                  "kubeconform is not installed"])

    def test_failures_timeouts_and_missing_logs_fail(self):
        self.put("//a:gtest", xml=GTEST_FAILED_XML)
        listed, totals = self.summarize([
            "//a:gtest   FAILED in 1s",
            "//b:slow    TIMEOUT in 300s",
            "//c:gone    NO STATUS"])
        self.assertEqual(totals, (1, 3, 0))
        self.assertIn("FAILED //a:gtest S.B", listed)
        self.assertIn("FAILED //b:slow: TIMEOUT", listed)


if __name__ == "__main__":
    unittest.main(verbosity=2)
