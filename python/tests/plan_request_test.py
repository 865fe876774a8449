"""monta.Plan.request against a planner's replicas (issue 20 item 6): a real monta-planner
on loopback (plaintext, --insecure) behind a dead address, given as a list and as a comma
string; every replica down; a job the planner refuses (not retried); the move rules
(monta.rpc.next_target: the leader a follower names when listed, else the next).

  python3 plan_request_test.py PATH/TO/monta-planner   (run_installed.sh does this; a
  relative path is under the runfiles root, $MONTA_RUNFILES)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import monta
from monta import rpc
from monta.errors import PlanError

PLANNER = None  # the binary, from argv
JOB = {"name": "replicas", "hidden_size": 64, "num_experts": 4, "top_k": 2,
       "capacity_factor": 1.0, "micro_batch_size": 2, "sequence_length": 32,
       "bytes_per_element": 4, "moe_layers": 2, "world_size": 4, "tensor_parallel_size": 2,
       "expert_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 2}
PLACEMENT = {"profile": "cpu-gloo", "nodes": 2, "gpus_per_node": 2}


def dead_address() -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class PlanRequestReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="plan-request-", dir=os.environ.get("TEST_TMPDIR"))
        port_file = os.path.join(cls.workdir, "ports.json")
        cls.log_path = os.path.join(cls.workdir, "planner.log")
        cls.log = open(cls.log_path, "w")
        cls.planner = subprocess.Popen(
            [PLANNER, "--listen=127.0.0.1:0", "--insecure", "--metrics_listen=",
             "--bench_on_register=false", "--bench_interval_seconds=0",
             f"--db={os.path.join(cls.workdir, 'monta.db')}", f"--port_file={port_file}"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        ports = None
        while ports is None:
            if cls.planner.poll() is not None:
                raise RuntimeError(f"planner exited {cls.planner.returncode}: "
                                   f"{open(cls.log_path).read()}")
            if time.monotonic() > deadline:
                raise TimeoutError("the planner's port file never appeared")
            try:
                with open(port_file) as f:
                    ports = json.load(f)
            except (OSError, ValueError):
                time.sleep(0.05)
        cls.live = f"127.0.0.1:{ports['grpc']}"

    @classmethod
    def tearDownClass(cls):
        cls.planner.terminate()
        try:
            cls.planner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cls.planner.kill()
            cls.planner.wait()
        cls.log.close()

    def test_a_dead_first_replica_is_passed_over(self):
        direct = monta.Plan.request(self.live, JOB, PLACEMENT)
        dead = dead_address()
        for planner in ([dead, self.live], f"{dead}, {self.live}"):
            plan = monta.Plan.request(planner, JOB, PLACEMENT, timeout_s=10)
            self.assertEqual((plan.strategy, plan.num_chunks),
                             (direct.strategy, direct.num_chunks), planner)
            self.assertEqual(plan.origin, "planner")

    def test_every_replica_down_names_each(self):
        first, second = dead_address(), dead_address()
        with self.assertRaises(PlanError) as caught:
            monta.Plan.request([first, second], JOB, PLACEMENT, timeout_s=5)
        message = str(caught.exception)
        self.assertIn("UNAVAILABLE at every replica tried", message)
        self.assertIn(first, message)
        self.assertIn(second, message)
        # Plan.resolve falls back to flat, saying why.
        with self.assertLogs("monta", level="WARNING"):
            flat = monta.Plan.resolve([first, second], JOB, PLACEMENT, environ={},
                                      timeout_s=5)
        self.assertEqual(flat.strategy, "flat")

    def test_a_refused_job_is_not_asked_again(self):
        bad = dict(JOB, world_size=0)
        with self.assertRaises(PlanError) as caught:
            monta.Plan.request([dead_address(), self.live], bad, PLACEMENT)
        self.assertIn("INVALID_ARGUMENT", str(caught.exception))
        self.assertIn(self.live, str(caught.exception))

    def test_targets_and_moves(self):
        self.assertEqual(rpc.endpoints(" a:1, b:2,,c:3 "), ["a:1", "b:2", "c:3"])
        self.assertEqual(rpc.endpoints(("a:1",)), ["a:1"])
        for bad in ("", " , ", [], ["a:1", "b 2:3"]):
            with self.assertRaises(PlanError):
                rpc.endpoints(bad)
        self.assertEqual(rpc.leader_named("not the leader (leader: c:3)"), "c:3")
        self.assertEqual(rpc.leader_named("not the leader (leader: unknown)"), "")
        self.assertEqual(rpc.leader_named("failed to connect to all addresses"), "")
        targets = ["a:1", "b:2", "c:3"]
        self.assertEqual(rpc.next_target(targets, 0, "connect failed"), 1)
        self.assertEqual(rpc.next_target(targets, 0, "not the leader (leader: c:3)"), 2)
        self.assertEqual(rpc.next_target(targets, 2, "Socket closed"), 0)
        # A leader the list does not name is never dialled.
        self.assertEqual(rpc.next_target(targets, 1, "not the leader (leader: x:9)"), 2)
        self.assertEqual(rpc.attempts(targets), 4)
        self.assertEqual(rpc.attempts(["dns:///planner:7400"]), 1 + rpc.DNS_ATTEMPTS)


if __name__ == "__main__":
    PLANNER = os.path.join(os.environ.get("MONTA_RUNFILES", "."), sys.argv.pop(1))
    unittest.main()
