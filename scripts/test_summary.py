#!/usr/bin/env python3
"""Counts every test case of a `bazel test` run, skipped ones with their reasons.

  scripts/test_summary.py BAZEL_TEST_OUTPUT [TESTLOGS_DIR]

Reads the target status lines ("//pkg:target   PASSED in 1.2s") from the saved output of
`bazel test`, then each target's own record under TESTLOGS_DIR (default bazel-testlogs):
  - GoogleTest targets: every <testcase> of test.xml, passed, failed or skipped
    (GTEST_SKIP, with its message);
  - Python unittest targets (run with verbosity=2): "Ran N tests", each "... skipped 'why'"
    and each "... FAIL" / "... ERROR" line;
  - any other target (sh_test): one case; a "MONTA_TEST_SKIPPED: <reason>" line in its
    log (tests/deploy/lib.sh's skip) makes it a skipped case.
A target that did not pass (FAILED, TIMEOUT, NO STATUS, ...) counts its failed cases, at
least one. Prints "SKIPPED //target Case: reason" for each skipped case and, last,
"passed failed skipped" as three numbers for scripts/test.sh to add its checks to.
"""

import html
import os
import re
import sys
import xml.etree.ElementTree as ET

_STATUS = re.compile(
    r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE|"
    r"FAILED TO BUILD)\b")
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_PY_CASE = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (?:skipped '(.*)'|(FAIL|ERROR))$", re.M)
_PY_CASE_DOC = re.compile(r"^(\w+) \(([\w.]+)\)\n.*? \.\.\. (?:skipped '(.*)'|(FAIL|ERROR))$",
                          re.M)
_MARKER = "MONTA_TEST_SKIPPED: "


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def gtest_cases(xml_text):
    """[(name, outcome, reason)] of a GoogleTest XML report, None when it is not one."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return None
    cases = []
    for case in root.iter("testcase"):
        if "result" not in case.attrib:  # Bazel's own one-case report of a non-gtest test
            return None
        name = f"{case.get('classname', '')}.{case.get('name', '')}"
        failure = case.find("failure")
        skipped = case.find("skipped")
        if failure is not None or case.find("error") is not None:
            cases.append((name, "failed", ""))
        elif case.get("result") == "skipped" or skipped is not None:
            message = skipped.get("message", "") if skipped is not None else ""
            # gtest puts "file:line\nreason"; keep the reason.
            reason = html.unescape(message).strip().split("\n")[-1].strip()
            cases.append((name, "skipped", reason or "GTEST_SKIP without a message"))
        elif case.get("status") == "notrun":
            continue  # DISABLED_ tests: gtest reports them as not run
        else:
            cases.append((name, "passed", ""))
    return cases


def unittest_cases(log):
    """[(name, outcome, reason)] of a verbose Python unittest log, None when there is none."""
    runs = [int(n) for n in _RAN.findall(log)]
    if not runs:
        return None
    cases, named = [], 0
    for pattern in (_PY_CASE, _PY_CASE_DOC):
        for m in pattern.finditer(log):
            # 3.11 prints "test_x (module.Class.test_x)", older ones "(module.Class)".
            name = m.group(2) if m.group(2).endswith("." + m.group(1)) else \
                f"{m.group(2)}.{m.group(1)}"
            if m.group(3) is not None:
                cases.append((name, "skipped", m.group(3)))
            else:
                cases.append((name, "failed", ""))
            named += 1
    cases += [("", "passed", "")] * max(0, sum(runs) - named)
    return cases


def target_cases(target, status, logs_dir):
    base = os.path.join(logs_dir, target[2:].replace(":", "/"))
    log = _read(os.path.join(base, "test.log")) or ""
    xml_text = _read(os.path.join(base, "test.xml"))
    cases = gtest_cases(xml_text) if xml_text else None
    if cases is None:
        cases = unittest_cases(log)
    if cases is None:
        markers = [line[len(_MARKER):].strip() for line in log.splitlines()
                   if line.startswith(_MARKER)]
        if markers and status == "PASSED":
            cases = [("", "skipped", reason) for reason in markers]
        else:
            cases = [("", "passed", "") if status == "PASSED" else ("", "failed", status)]
    if status != "PASSED" and not any(outcome == "failed" for _, outcome, _ in cases):
        cases.append(("", "failed", status))  # a crash, a timeout: the target failed
    return cases


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    output = _read(argv[1])
    if output is None:
        print(f"test_summary: cannot read {argv[1]}", file=sys.stderr)
        return 2
    logs_dir = argv[2] if len(argv) == 3 else "bazel-testlogs"
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    seen = set()
    for line in output.splitlines():
        m = _STATUS.match(line)
        if not m or m.group(1) in seen:
            continue
        target, status = m.group(1), m.group(2)
        seen.add(target)
        for name, outcome, reason in target_cases(target, status, logs_dir):
            totals[outcome] += 1
            if outcome == "skipped":
                print(f"SKIPPED {target}{' ' + name if name else ''}: {reason}")
            elif outcome == "failed":
                print(f"FAILED {target}{' ' + name if name else ''}"
                      f"{': ' + reason if reason else ''}")
    print(totals["passed"], totals["failed"], totals["skipped"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
