"""python/monta's chunk rule against common/schedule's golden vectors.

The model prices, and the agent runs, the chunks of common/schedule (C++); monta runs its own
copy in Python. common/schedule/testdata/golden_chunks.tsv holds the rule's answers for
>= 1,000 cases (capacity rows C, chunks K, TP size t), generated from the C++ library and
checked against it by //common/schedule:golden_chunks_test. Here every case must come out the
same from monta.plan's rows_per_tp_rank / effective_chunks / chunk_rows, and
monta.alltoall's dedup schedules and experts_overlapped must cut their rows with exactly those
functions (and no division of their own), so a change to either side's rule fails one of
the two tests.

Runs against the installed package (python/tests/run_installed.sh); the file comes from the
runfiles ($MONTA_RUNFILES).
"""

import ast
import inspect
import os
import textwrap
import unittest

from monta import alltoall
from monta.plan import chunk_rows, effective_chunks, rows_per_tp_rank

GOLDEN = os.path.join(os.environ.get("MONTA_RUNFILES", "."),
                      "common/schedule/testdata/golden_chunks.tsv")
COLUMNS = ["rows", "chunks", "tp", "padded_rows", "rows_per_tp_rank", "effective_chunks",
           "chunk_rows"]


def decode(runs):
    """'3*3,1' -> [3, 3, 3, 1]."""
    out = []
    for run in runs.split(","):
        value, _, times = run.partition("*")
        out += [int(value)] * int(times or 1)
    return out


def golden_cases():
    with open(GOLDEN, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if not line.startswith("#")]
    assert lines[0].split("\t") == COLUMNS, f"{GOLDEN}: unexpected columns {lines[0]!r}"
    return [dict(zip(COLUMNS, line.split("\t"))) for line in lines[1:] if line]


class GoldenChunksTest(unittest.TestCase):
    def test_every_case_matches_the_library(self):
        cases = golden_cases()
        self.assertGreaterEqual(len(cases), 1000)
        mismatches = []
        for c in cases:
            rows, k, t = int(c["rows"]), int(c["chunks"]), int(c["tp"])
            n = rows_per_tp_rank(rows, t)
            bounds = chunk_rows(n, k)
            got = {
                "padded_rows": n * t,
                "rows_per_tp_rank": n,
                "effective_chunks": effective_chunks(n, k),
                "chunk_rows": [r for _, r in bounds],
            }
            want = {
                "padded_rows": int(c["padded_rows"]),
                "rows_per_tp_rank": int(c["rows_per_tp_rank"]),
                "effective_chunks": int(c["effective_chunks"]),
                "chunk_rows": decode(c["chunk_rows"]),
            }
            # The chunks are contiguous from row 0: monta narrows the input at these firsts.
            firsts = [s for s, _ in bounds]
            expected_firsts = [sum(want["chunk_rows"][:i]) for i in range(len(want["chunk_rows"]))]
            if got != want or firsts != expected_firsts:
                mismatches.append((c, got, firsts))
        self.assertFalse(mismatches, f"{len(mismatches)} of {len(cases)} cases differ from "
                                     f"{GOLDEN}; the first: {mismatches[:1]}")

    def test_the_schedules_cut_with_these_functions(self):
        # monta.alltoall's tp_dedup / tp_dedup_pipelined (the drop, then the chunked gathering
        # half) and expert_overlap (experts_overlapped) take their rows per TP rank and their
        # chunks from monta.plan (what the test above checks), not from a copy of the rule.
        for function, helpers in ((alltoall._start_dedup, {"rows_per_tp_rank"}),
                                  (alltoall._drop_rows, {"rows_per_tp_rank"}),
                                  (alltoall._start_gathered, {"chunk_rows"}),
                                  (alltoall.experts_overlapped, {"rows_per_tp_rank",
                                                                 "chunk_rows"})):
            with self.subTest(function=function.__name__):
                tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
                called = {n.func.id for n in ast.walk(tree)
                          if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                self.assertLessEqual(helpers, called)
                # No arithmetic of its own on the chunk sizes: no floor or ceil division.
                divisions = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and
                             isinstance(n.op, (ast.FloorDiv, ast.Div))]
                self.assertEqual(divisions, [], ast.dump(divisions[0]) if divisions else "")
        self.assertIs(alltoall.chunk_rows, chunk_rows)
        self.assertIs(alltoall.rows_per_tp_rank, rows_per_tp_rank)

if __name__ == "__main__":
    unittest.main()
