"""monta.Plan.from_env on every variable the admission webhook injects, malformed ones too."""

import dataclasses
import logging
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import monta  # noqa: E402
from monta import plan as plan_mod  # noqa: E402

# What DecisionEnv (server/admission/admission_handler.cc) injects, in its formats.
INJECTED = {
    "MONTA_STRATEGY": "tp_dedup_pipelined",
    "MONTA_NUM_CHUNKS": "4",
    "MONTA_PREDICTED_ALLTOALL_SECONDS": "0.00123457",
    "MONTA_PREDICTED_STEP_ALLTOALL_SECONDS": "1.97531",
    "MONTA_SPEEDUP_OVER_FLAT": "3.2",
    "MONTA_EVIDENCE_SOURCE": "profile",
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
        self.assertIn(INJECTED["MONTA_DECISION_ID"], str(plan))
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

    def test_resolve_prefers_env_then_planner_then_flat(self):
        self.assertEqual(monta.Plan.resolve(environ=INJECTED).origin, "env")
        with self.assertLogs("monta", logging.WARNING) as logs:
            # Nothing listens there: flat, and the warning says why.
            plan = monta.Plan.resolve("127.0.0.1:1", {"name": "j"}, environ={}, timeout_s=2)
        self.assertEqual(plan.strategy, "flat")
        self.assertIn("planner 127.0.0.1:1", logs.output[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
