"""monta.Plan: from_env on every variable the admission webhook injects, malformed ones too;
strategy names in every constructor; and the installed package itself: its stubs, no
top-level `proto` package, no import cycle.

Runs against the installed package (python/tests/run_installed.sh installs it into a fresh
venv); the source tree's python/ is not on sys.path.
"""

import ast
import dataclasses
import glob
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import unittest.mock

import monta
from monta import plan as plan_mod

HERE = os.path.dirname(os.path.abspath(__file__))

# What DecisionEnv (server/admission/admission_handler.cc) injects, in its formats.
INJECTED = {
    "MONTA_STRATEGY": "tp_dedup_pipelined",
    "MONTA_NUM_CHUNKS": "4",
    "MONTA_PREDICTED_ALLTOALL_SECONDS": "0.00123457",
    "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS": "1.97531",
    "MONTA_SPEEDUP_OVER_FLAT": "3.2",
    "MONTA_EVIDENCE_SOURCE": "profile",
    "MONTA_EXPERT_LAYOUT": "tensor_parallel",
    "MONTA_DECISION_ID": "0f8e5a2c-1b3d-4c5e-9f60-718293a4b5c6",
}


class FromEnvTest(unittest.TestCase):
    def test_reads_every_injected_variable(self):
        plan = monta.Plan.from_env(INJECTED)
        self.assertEqual(plan.strategy, "tp_dedup_pipelined")
        self.assertEqual(plan.num_chunks, 4)
        self.assertAlmostEqual(plan.predicted_alltoall_seconds_per_layer, 0.00123457)
        self.assertAlmostEqual(plan.predicted_step_alltoall_seconds, 1.97531)
        self.assertAlmostEqual(plan.speedup_over_flat, 3.2)
        self.assertEqual(plan.evidence_source, "profile")
        self.assertEqual(plan.decision_id, INJECTED["MONTA_DECISION_ID"])
        self.assertEqual(plan.origin, "env")
        self.assertEqual(plan.expert_layout, monta.TENSOR_PARALLEL)
        self.assertIn(INJECTED["MONTA_DECISION_ID"], str(plan))
        self.assertIn("experts tensor_parallel", str(plan))
        self.assertEqual(set(plan_mod.INJECTED), set(INJECTED))

    def test_every_strategy_name_and_enum_name(self):
        for name in monta.STRATEGIES:
            for text in (name, name.upper(), "STRATEGY_KIND_" + name.upper()):
                env = dict(INJECTED, MONTA_STRATEGY=text)
                self.assertEqual(monta.Plan.from_env(env).strategy, name, text)

    def test_unchunked_strategies_run_with_one_chunk(self):
        for name in ("flat", "tp_dedup", "hierarchical"):
            with self.assertLogs("monta", logging.WARNING):
                plan = monta.Plan.from_env(dict(INJECTED, MONTA_STRATEGY=name))
            self.assertEqual(plan.num_chunks, 1)
        self.assertEqual(
            monta.Plan.from_env(dict(INJECTED, MONTA_STRATEGY="expert_overlap")).num_chunks, 4)

    def test_optional_variables(self):
        minimal = monta.Plan.from_env({"MONTA_STRATEGY": "flat"})
        self.assertEqual((minimal.num_chunks, minimal.decision_id), (1, ""))
        self.assertIsNone(minimal.speedup_over_flat)

    def test_no_plan_is_flat_with_a_warning(self):
        with self.assertLogs("monta", logging.WARNING) as logs:
            plan = monta.Plan.from_env({"PATH": "/bin"})
        self.assertEqual((plan.strategy, plan.origin), ("flat", "default"))
        self.assertIn("MONTA_STRATEGY not set", logs.output[0])
        with self.assertRaisesRegex(monta.PlanError, "MONTA_STRATEGY: not set"):
            monta.Plan.from_env({}, default_flat=False)

    def test_partial_patch_is_refused(self):
        env = dict(INJECTED)
        del env["MONTA_STRATEGY"]
        with self.assertRaisesRegex(monta.PlanError, "MONTA_STRATEGY: missing, but"):
            monta.Plan.from_env(env)

    def test_malformed_values_name_the_variable(self):
        bad = {
            "MONTA_STRATEGY": ["", "fastest", "STRATEGY_KIND_UNSPECIFIED", "flat2"],
            "MONTA_NUM_CHUNKS": ["0", "-1", "", "two", "2.5", "1e3", "99999999999"],
            "MONTA_PREDICTED_ALLTOALL_SECONDS": ["", "abc", "-1", "nan", "inf"],
            "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS": ["x", "-0.5", "NaN"],
            "MONTA_SPEEDUP_OVER_FLAT": ["fast", "-2", "inf"],
            "MONTA_EVIDENCE_SOURCE": ["", "measured; rm -rf", "9lives", "a b"],
            "MONTA_EXPERT_LAYOUT": ["", "tp", "true", "EXPERT_LAYOUT_", "tensor parallel",
                                    "tensor_parallel,not_tensor_parallel", "x" * 10000],
            "MONTA_DECISION_ID": ["", "has space", "x" * 129, "id\n"],
            "MONTA_WORLD_SIZE": ["0", "four", ""],
            "MONTA_TENSOR_PARALLEL_SIZE": ["-2", "1.5"],
            "MONTA_EXPERT_PARALLEL_SIZE": ["0"],
            "MONTA_GPUS_PER_NODE": ["x"],
            "MONTA_MOE_SPEC": ["{", "[]", '{"job": 3}', '{"job": {"world_size": "4"}}',
                               '{"job": {"world_size": 0}}',
                               '{"job": {}, "placement": {"gpus_per_node": true}}'],
        }
        for var, values in bad.items():
            for value in values:
                with self.subTest(var=var, value=value):
                    with self.assertRaises(monta.PlanError) as caught:
                        monta.Plan.from_env(dict(INJECTED, **{var: value}))
                    self.assertIn(var, str(caught.exception))

    def test_expert_layout_spellings(self):
        for name in monta.EXPERT_LAYOUTS:
            for text in (name, name.upper(), "EXPERT_LAYOUT_" + name.upper(), f" {name}\n"):
                with self.subTest(text=text):
                    env = dict(INJECTED, MONTA_EXPERT_LAYOUT=text)
                    self.assertEqual(monta.Plan.from_env(env).expert_layout, name)
                    self.assertEqual(monta.Plan(expert_layout=text).expert_layout, name)
                    self.assertEqual(dataclasses.replace(monta.Plan(), expert_layout=text),
                                     monta.Plan(expert_layout=name))
        for bad in ("", "tp", "tensor-parallel", "EXPERT_LAYOUT_", True, 1, b"tensor_parallel"):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(monta.PlanError, r"^Plan\.expert_layout=.*expected"):
                    monta.Plan(expert_layout=bad)
        # An unbounded value is not echoed whole.
        with self.assertRaises(monta.PlanError) as caught:
            monta.Plan.from_env(dict(INJECTED, MONTA_EXPERT_LAYOUT="x" * 10000))
        self.assertLess(len(str(caught.exception)), 300)

    def test_a_plan_that_does_not_say_runs_the_default(self):
        """No MONTA_EXPERT_LAYOUT (an older webhook), "unspecified", no plan at all: the plan
        says nothing (None), a logged line says so, and the planner's documented default
        (docs/MODEL.md section 4: not_tensor_parallel) runs unless the groups or the call
        name the job's layout."""
        self.assertEqual(monta.DEFAULT_EXPERT_LAYOUT, monta.NOT_TENSOR_PARALLEL)
        env = dict(INJECTED)
        del env["MONTA_EXPERT_LAYOUT"]
        for label, make in (
                ("no variable", lambda: monta.Plan.from_env(env)),
                ("unspecified", lambda: monta.Plan.from_env(
                    dict(env, MONTA_EXPERT_LAYOUT="EXPERT_LAYOUT_UNSPECIFIED"))),
                ("no plan", lambda: monta.Plan.from_env({}))):
            with self.subTest(label):
                with self.assertLogs("monta", logging.WARNING) as logs:
                    plan = make()
                self.assertIsNone(plan.expert_layout)
                self.assertEqual(plan.expert_layout_or_default, monta.NOT_TENSOR_PARALLEL)
                self.assertIn("not_tensor_parallel", logs.output[-1])
        plan = monta.Plan.from_env(env)
        self.assertEqual(plan.expert_layout_for(monta.TENSOR_PARALLEL, "MoeGroups.expert_layout"),
                         monta.TENSOR_PARALLEL)  # the job's own layout, nothing to contradict
        del plan_mod._DEFAULT_LOGGED[:]
        with self.assertLogs("monta", logging.WARNING) as logs:
            self.assertEqual(plan.expert_layout_for(None, "x"), monta.NOT_TENSOR_PARALLEL)
            self.assertEqual(plan.expert_layout_for(None, "x"), monta.NOT_TENSOR_PARALLEL)
            logging.getLogger("monta").warning("end")
        said = [line for line in logs.output if "planner's default" in line]
        self.assertEqual(len(said), 1, logs.output)  # once per process
        self.assertIn("running not_tensor_parallel", said[0])

    def test_a_stated_layout_refuses_the_other(self):
        plan = monta.Plan.from_env(INJECTED)
        plan.check_expert_layout(monta.TENSOR_PARALLEL, "MoeGroups.expert_layout")
        plan.check_expert_layout(None, "MoeGroups.expert_layout")
        self.assertEqual(plan.expert_layout_for(None, "x"), monta.TENSOR_PARALLEL)
        with self.assertRaisesRegex(
                monta.PlanError, r"^MONTA_EXPERT_LAYOUT=tensor_parallel: .* but "
                r"MoeGroups.expert_layout runs experts not_tensor_parallel: re-plan with "
                r"job.experts_tensor_parallel=false"):
            plan.expert_layout_for(monta.NOT_TENSOR_PARALLEL, "MoeGroups.expert_layout")
        mine = monta.Plan(expert_layout="not_tensor_parallel")
        with self.assertRaisesRegex(monta.PlanError, r"^Plan.expert_layout=not_tensor_parallel"
                                                     r".*experts_tensor_parallel=true"):
            mine.check_expert_layout(monta.TENSOR_PARALLEL, "monta.dispatch(expert_layout)")

    def test_layout_variables(self):
        env = dict(INJECTED, MONTA_WORLD_SIZE="16", MONTA_TENSOR_PARALLEL_SIZE="8",
                   MONTA_MOE_SPEC='{"job": {"world_size": 16, "expert_parallel_size": 2}, '
                                  '"placement": {"gpus_per_node": 8}}')
        layout = monta.Plan.from_env(env).layout
        self.assertEqual((layout.world_size, layout.tensor_parallel_size,
                          layout.expert_parallel_size, layout.gpus_per_node), (16, 8, 2, 8))
        with self.assertRaisesRegex(monta.PlanError, "MONTA_WORLD_SIZE=8 contradicts "
                                                     "MONTA_MOE_SPEC"):
            monta.Plan.from_env(dict(env, MONTA_WORLD_SIZE="8"))
        plan = monta.Plan.from_env(env)
        plan.check_layout(16, 8, 2, 8)
        with self.assertRaisesRegex(monta.PlanError, r"MONTA_WORLD_SIZE=16: .* world_size 4"):
            plan.check_layout(4, 8, 2, 8)
        with self.assertRaisesRegex(monta.PlanError,
                                    r"MONTA_MOE_SPEC \(job.expert_parallel_size\)=2"):
            plan.check_layout(16, 8, 4, 8)

    def test_plan_fields_are_validated(self):
        with self.assertRaisesRegex(monta.PlanError, "Plan.num_chunks"):
            monta.Plan(strategy="tp_dedup_pipelined", num_chunks=0)
        with self.assertRaisesRegex(monta.PlanError, "Plan.strategy"):
            monta.Plan(strategy="nope")

    def test_every_constructor_normalises_the_strategy(self):
        for text in ("TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup ", "Tp_Dedup\n"):
            with self.subTest(text=text):
                plan = monta.Plan(strategy=text)
                self.assertEqual(plan.strategy, monta.TP_DEDUP)
                self.assertEqual(plan, monta.Plan(strategy="tp_dedup"))
                self.assertEqual(dataclasses.replace(monta.Plan(), strategy=text).strategy,
                                 monta.TP_DEDUP)
                self.assertEqual(plan.with_layout(world_size=4).strategy, monta.TP_DEDUP)
        piped = monta.Plan(strategy="STRATEGY_KIND_TP_DEDUP_PIPELINED", num_chunks=4)
        self.assertEqual((piped.strategy, piped.num_chunks, piped.chunks_for(8)),
                         (monta.TP_DEDUP_PIPELINED, 4, 4))
        for bad in ("", "  ", "tp-dedup", "STRATEGY_KIND_", "STRATEGY_KIND_UNSPECIFIED",
                    "tp_dedup,flat", None, 3, b"flat"):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(monta.PlanError, r"^Plan\.strategy="):
                    monta.Plan(strategy=bad)

    def test_num_chunks_only_for_chunked_strategies(self):
        for name in (monta.FLAT, monta.TP_DEDUP, monta.HIERARCHICAL):
            with self.subTest(strategy=name):
                with self.assertRaisesRegex(monta.PlanError,
                                            rf"^Plan\.num_chunks=8: .*{name} runs with "
                                            "num_chunks=1"):
                    monta.Plan(strategy=name, num_chunks=8)
                self.assertEqual(monta.Plan(strategy=name, num_chunks=1).num_chunks, 1)
        with self.assertRaisesRegex(monta.PlanError, "Plan.num_chunks"):
            dataclasses.replace(monta.Plan(strategy="expert_overlap", num_chunks=4),
                                strategy="flat")
        for name in monta.CHUNKED:
            self.assertEqual(monta.Plan(strategy=name.upper(), num_chunks=8).num_chunks, 8)
        with self.assertRaisesRegex(monta.PlanError, "Plan.num_chunks=True"):
            monta.Plan(strategy="expert_overlap", num_chunks=True)

    def test_chunks_for_uneven_capacity(self):
        plan = monta.Plan(strategy="tp_dedup_pipelined", num_chunks=4)
        self.assertEqual(plan.chunks_for(6), 3)
        self.assertEqual(plan.chunks_for(2), 2)
        self.assertEqual(monta.Plan(strategy="tp_dedup", num_chunks=1).chunks_for(6), 1)

    def test_candidate_by_strategy(self):
        flat = monta.Plan(predicted_forward_seconds_per_layer=0.8, origin="planner")
        piped = monta.Plan(strategy="tp_dedup_pipelined", num_chunks=4,
                           predicted_forward_seconds_per_layer=0.3, origin="planner")
        plan = dataclasses.replace(piped, candidates=(piped, flat))
        self.assertIs(plan.candidate("flat"), flat)
        self.assertIs(plan.candidate("STRATEGY_KIND_TP_DEDUP_PIPELINED"), piped)
        self.assertIsNone(plan.candidate("hierarchical"))  # not offered
        self.assertIsNone(monta.Plan().candidate("flat"))  # no planner reply
        with self.assertRaisesRegex(monta.PlanError, r"Plan.candidate\(strategy\)='nope'"):
            plan.candidate("nope")
        # The candidates are what the planner said, not part of what the plan is.
        self.assertEqual(plan, piped)

    def test_plan_from_reply_carries_the_expert_layout(self):
        pb = monta.rpc.stubs().strategy_pb2
        request = pb.StrategyRequest(job=pb.MoeJob(world_size=4, tensor_parallel_size=2,
                                                   expert_parallel_size=2))
        chosen = pb.Candidate(kind=3, chunks_effective=4, feasible=True,
                              forward_seconds_per_layer=0.2, backward_seconds_per_layer=0.3)
        flat = pb.Candidate(kind=1, chunks_effective=1, feasible=True,
                            forward_seconds_per_layer=0.4, backward_seconds_per_layer=0.5)
        # ExpertLayout lives in common.proto (moved there by issue 18's verify contract).
        from monta._proto import common_pb2 as cpb
        for value, layout in ((cpb.EXPERT_LAYOUT_TENSOR_PARALLEL, monta.TENSOR_PARALLEL),
                              (cpb.EXPERT_LAYOUT_NOT_TENSOR_PARALLEL, monta.NOT_TENSOR_PARALLEL)):
            reply = pb.StrategyReply(chosen=chosen, candidates=[chosen, flat],
                                     expert_layout=value)
            plan = plan_mod.plan_from_reply("planner:1", request, reply)
            self.assertEqual((plan.strategy, plan.num_chunks, plan.expert_layout),
                             (monta.TP_DEDUP_PIPELINED, 4, layout))
            self.assertEqual([c.expert_layout for c in plan.candidates], [layout] * 2)
            other = [x for x in monta.EXPERT_LAYOUTS if x != layout][0]
            with self.assertRaisesRegex(monta.PlanError,
                                        rf"^StrategyReply.expert_layout={layout}: "):
                plan.check_expert_layout(other, "MoeGroups.expert_layout")
        # A planner older than the field says nothing: not a layout, a logged line.
        with self.assertLogs("monta", logging.WARNING) as logs:
            plan = plan_mod.plan_from_reply("planner:1", request,
                                            pb.StrategyReply(chosen=chosen, candidates=[chosen]))
        self.assertIsNone(plan.expert_layout)
        self.assertIn("did not say which expert layout", logs.output[0])
        with self.assertRaisesRegex(monta.PlanError, "expert_layout=7: an expert layout this "
                                                     "monta does not know"):
            plan_mod.plan_from_reply("planner:1", request,
                                     pb.StrategyReply(chosen=chosen, expert_layout=7))

    def test_plan_from_reply_carries_the_rank_order(self):
        pb = monta.rpc.stubs().strategy_pb2
        request = pb.StrategyRequest(
            job=pb.MoeJob(world_size=8, tensor_parallel_size=1, expert_parallel_size=4),
            placement=pb.Placement(node_names=["a0", "b0", "a1", "b1"]))
        chosen = pb.Candidate(kind=1, chunks_effective=1, feasible=True,
                              forward_seconds_per_layer=0.2, backward_seconds_per_layer=0.3)
        advice = pb.RankOrderAdvice(nodes=["a0", "a1", "b0", "b1"], ranks_per_node=2,
                                    given_dispatch_seconds=2.7, advised_dispatch_seconds=0.4)
        reply = pb.StrategyReply(chosen=chosen, candidates=[chosen], rank_order=advice,
                                 expert_layout=2)  # EXPERT_LAYOUT_NOT_TENSOR_PARALLEL
        plan = plan_mod.plan_from_reply("planner:1", request, reply)
        self.assertEqual(plan.rank_order, ("a0", "a1", "b0", "b1"))
        self.assertEqual(plan.node_order(), [0, 2, 1, 3])
        self.assertEqual((plan.predicted_given_dispatch_seconds,
                          plan.predicted_advised_dispatch_seconds), (2.7, 0.4))
        # No advice (no fabric, or a profile placement): None, and the launcher's order.
        plain = plan_mod.plan_from_reply("planner:1", request,
                                         pb.StrategyReply(chosen=chosen, candidates=[chosen]))
        self.assertIsNone(plain.node_order())
        with self.assertRaisesRegex(monta.PlanError, "not the given nodes"):
            monta.advised_node_order(["a0", "b0"], ["a0", "x"])

    def test_resolve_prefers_env_then_planner_then_flat(self):
        self.assertEqual(monta.Plan.resolve(environ=INJECTED).origin, "env")
        with self.assertLogs("monta", logging.WARNING) as logs:
            # Nothing listens there: flat, and the warning says why.
            plan = monta.Plan.resolve("127.0.0.1:1", {"name": "j"}, environ={}, timeout_s=2)
        self.assertEqual(plan.strategy, "flat")
        self.assertIn("planner 127.0.0.1:1", logs.output[0])


def import_graph(package_dir):
    """{module: {modules of the same package it imports}} over every .py file under
    package_dir, imports inside functions included (a lazy import is still an arrow)."""
    top = os.path.basename(package_dir)
    root = os.path.dirname(package_dir)
    names = {}
    for path in glob.glob(os.path.join(package_dir, "**", "*.py"), recursive=True):
        parts = os.path.relpath(path, root)[:-len(".py")].split(os.sep)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        names[".".join(parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in names.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        here = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from a.b import c`: the module a.b.c, else (c is a name in it) a.b.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base
                           for a in node.names]
            else:
                continue
            edges.update(t for t in targets
                         if t in names and (t == top or t.startswith(top + ".")))
        graph[name] = edges
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


class PackageTest(unittest.TestCase):
    """The installed package: built stubs, no top-level proto, no import cycle."""

    def test_the_installed_package_is_under_test(self):
        installed = os.path.dirname(os.path.abspath(monta.__file__))
        source = os.path.join(os.path.dirname(HERE), "monta")
        self.assertNotEqual(os.path.realpath(installed), os.path.realpath(source),
                            "monta was imported from the source tree, not the installed copy")
        self.assertTrue(os.path.isfile(os.path.join(installed, "_proto", "planner_pb2_grpc.py")),
                        f"{installed} has no generated stubs")
        stubs = monta.rpc.stubs()
        self.assertEqual(stubs.strategy_pb2.MoeJob.__module__, "monta._proto.strategy_pb2")
        self.assertTrue(hasattr(stubs.planner_pb2_grpc, "PlannerStub"))

    def test_no_import_cycle(self):
        graph = import_graph(os.path.dirname(os.path.abspath(monta.__file__)))
        self.assertIn("monta.plan", graph["monta.groups"])  # the walk sees the imports
        self.assertIn("monta.rpc", graph["monta.plan"])
        self.assertIn("monta._proto.strategy_pb2", graph["monta._proto.planner_pb2"])
        self.assertIsNone(find_cycle(graph), find_cycle(graph))

    def test_the_cycle_finder_finds_a_lazy_cycle(self):
        with tempfile.TemporaryDirectory() as tmp:
            pkg = os.path.join(tmp, "pkg")
            os.makedirs(pkg)
            files = {"__init__.py": "from pkg.a import f\n",
                     "a.py": "from pkg import b\ndef f():\n    return b.g()\n",
                     "b.py": "def g():\n    from . import a  # lazy\n    return a\n"}
            for name, text in files.items():
                with open(os.path.join(pkg, name), "w") as f:
                    f.write(text)
            self.assertEqual(find_cycle(import_graph(pkg)), ["pkg.a", "pkg.b", "pkg.a"])

    def test_another_package_named_proto_still_imports(self):
        """A project's own top-level `proto` package (proto-plus, a user's stubs) works
        before and after `import monta` and after monta imports its stubs."""
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "proto"))
            with open(os.path.join(tmp, "proto", "__init__.py"), "w") as f:
                f.write("VALUE = 42\n")
            with open(os.path.join(tmp, "proto", "sub.py"), "w") as f:
                f.write("VALUE = 43\n")
            check = textwrap.dedent("""
                import os, sys
                import proto, proto.sub
                import monta
                assert monta.rpc.stubs().planner_pb2 is not None
                try:  # a Plan.request's stub import; nothing listens on port 1
                    monta.Plan.request("127.0.0.1:1", {"name": "j"}, timeout_s=2)
                except monta.PlanError:
                    pass
                import proto.sub as again
                assert sys.modules["proto"] is proto, "proto was replaced"
                assert again is proto.sub and (proto.VALUE, again.VALUE) == (42, 43)
                assert os.path.dirname(proto.__file__) == os.path.join(sys.argv[1], "proto")
                assert not [m for m in sys.modules if m.startswith("proto.monta")]
                """)
            first_proto = check
            first_monta = check.replace("import proto, proto.sub\nimport monta\n",
                                        "import monta\n").replace(
                "import proto.sub as again\n", "import proto, proto.sub\n"
                "import proto.sub as again\n")
            self.assertNotEqual(first_monta, first_proto)
            for label, script in (("proto first", first_proto), ("monta first", first_monta)):
                with self.subTest(label):
                    env = dict(os.environ, PYTHONPATH=tmp)
                    done = subprocess.run([sys.executable, "-c", script, tmp], env=env,
                                          capture_output=True, text=True, timeout=120)
                    self.assertEqual(done.returncode, 0, done.stderr[-3000:])


class BuildStepTest(unittest.TestCase):
    """python/setup.py's stub generation, as pip's build runs it."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        path = os.path.join(os.path.dirname(HERE), "setup.py")
        spec = importlib.util.spec_from_file_location("monta_setup", path)
        cls.setup = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.setup)

    def generate(self, **env):
        with tempfile.TemporaryDirectory() as tmp:
            with unittest.mock.patch.dict(os.environ, env):
                names = self.setup.generate_stubs(os.path.join(tmp, "_proto"))
            texts = {n: open(os.path.join(tmp, "_proto", n)).read() for n in names}
        return texts

    def test_generates_every_proto_with_relative_imports(self):
        texts = self.generate()
        protos = glob.glob(os.path.join(os.path.dirname(os.path.dirname(HERE)), "proto",
                                        "monta", "v1", "*.proto"))
        self.assertTrue(protos)
        for proto in protos:
            stem = os.path.basename(proto)[:-len(".proto")]
            for suffix in ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi"):
                self.assertIn(stem + suffix, texts)
        self.assertIn("from . import strategy_pb2 as", texts["planner_pb2.py"])
        self.assertIn("'monta._proto.planner_pb2'", texts["planner_pb2.py"])
        for name, text in texts.items():
            self.assertNotRegex(text, r"(?m)^\s*(from|import) proto\b", name)

    def test_missing_tools_and_protos_are_clear_errors(self):
        with tempfile.TemporaryDirectory() as empty:
            with self.assertRaisesRegex(self.setup.StubError,
                                        r"no proto/monta/v1/\*\.proto under .*MONTA_PROTO_ROOT"):
                self.generate(MONTA_PROTO_ROOT=empty)
        with self.assertRaisesRegex(self.setup.StubError, r"protoc not found .*MONTA_PROTOC"):
            self.generate(MONTA_PROTOC="/nonexistent/protoc")
        with self.assertRaisesRegex(self.setup.StubError, "grpc_python_plugin not found"):
            self.generate(MONTA_GRPC_PYTHON_PLUGIN="/nonexistent/plugin")
        with self.assertRaisesRegex(self.setup.StubError, "still imports the top-level proto"):
            self.setup._rewrite("import proto.monta.v1.x_pb2\n", "x_pb2.py")


if __name__ == "__main__":
    unittest.main(verbosity=2)
