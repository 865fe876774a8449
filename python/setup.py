"""monta's one build step beyond setuptools' own: the gRPC stubs (see pyproject.toml).

protoc with grpc_python_plugin compiles every proto/monta/v1/*.proto into the build tree's
monta/_proto/ (`planner_pb2`, `planner_pb2_grpc`, ... and `.pyi` type stubs). The files are
generated as the package `proto.monta.v1` (the name the .proto files import each other by)
and rewritten to import each other relatively, so that nothing is a top-level `proto`
package next to other projects' (proto-plus, a user's own stubs).

The proto tree is found at $MONTA_PROTO_ROOT, else at this directory's parent (the
repository root); protoc at $MONTA_PROTOC or on PATH; the plugin at
$MONTA_GRPC_PYTHON_PLUGIN, on PATH, or /usr/bin/grpc_python_plugin.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join("proto", "monta", "v1")
PACKAGE = "proto.monta.v1"  # what protoc names the generated modules
# `from proto.monta.v1 import x_pb2 as ...` -> `from . import x_pb2 as ...`
_IMPORT = re.compile(r"^(\s*)from proto\.monta\.v1 import ", re.M)
# The module name protobuf's builder gives the message classes (their __module__).
_MODULE = re.compile(r"'proto\.monta\.v1\.(\w+)'")
_LEFT = re.compile(r"^\s*(?:from|import)\s+proto(?:\.|\s|$)", re.M)


class StubError(RuntimeError):
    """The stubs cannot be generated; the message says what is missing."""


def _proto_root():
    root = os.environ.get("MONTA_PROTO_ROOT") or os.path.dirname(HERE)
    protos = sorted(glob.glob(os.path.join(root, PROTO_DIR, "*.proto")))
    if not protos:
        raise StubError(
            f"monta build: no {PROTO_DIR}/*.proto under {root}: build from a Monta checkout "
            "(pip install --no-build-isolation ./python at the repository root) or set "
            "MONTA_PROTO_ROOT to the directory that holds proto/")
    return root, [os.path.relpath(p, root) for p in protos]


def _tool(variable, name, fallback=None):
    path = os.environ.get(variable) or shutil.which(name) or fallback
    if not path or not os.access(path, os.X_OK):
        raise StubError(f"monta build: {name} not found (set {variable}, or install Debian's "
                        "protobuf-compiler and protobuf-compiler-grpc: scripts/setup.sh)")
    return path


def _rewrite(text, source):
    text = _IMPORT.sub(r"\1from . import ", text)
    text = _MODULE.sub(r"'monta._proto.\1'", text)
    left = _LEFT.search(text)
    if left:
        raise StubError(f"monta build: {source} still imports the top-level proto package "
                        f"after the rewrite: {left.group(0).strip()!r}")
    return text


def generate_stubs(out_dir):
    """protoc over every proto/monta/v1/*.proto into out_dir (replaced whole)."""
    root, protos = _proto_root()
    protoc = _tool("MONTA_PROTOC", "protoc")
    plugin = _tool("MONTA_GRPC_PYTHON_PLUGIN", "grpc_python_plugin",
                   "/usr/bin/grpc_python_plugin")
    with tempfile.TemporaryDirectory(prefix="monta-stubs-") as tmp:
        cmd = [protoc, f"-I{root}", f"--python_out={tmp}", f"--pyi_out={tmp}",
               f"--grpc_python_out={tmp}", f"--plugin=protoc-gen-grpc_python={plugin}"]
        done = subprocess.run(cmd + [os.path.join(root, p) for p in protos],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StubError(f"monta build: protoc failed on {PROTO_DIR}: "
                            f"{done.stderr.strip()[:2000]}")
        generated = os.path.join(tmp, PROTO_DIR)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        names = sorted(os.listdir(generated))
        for name in names:
            with open(os.path.join(generated, name), encoding="utf-8") as f:
                text = _rewrite(f.read(), name)
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
    with open(os.path.join(out_dir, "__init__.py"), "w", encoding="utf-8") as f:
        f.write(f'"""The gRPC stubs of {", ".join(os.path.basename(p) for p in protos)}, '
                'generated when the package was built\n(setup.py); the contract is '
                'proto/monta/v1 in the Monta repository."""\n')
    return names


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into the build tree (the source tree for an editable
    install). The package's build directory starts empty, so no module deleted from the
    sources lingers in a wheel."""

    def run(self):
        editable = getattr(self, "editable_mode", False)
        if not editable:
            shutil.rmtree(os.path.join(self.build_lib, "monta"), ignore_errors=True)
        super().run()
        target = HERE if editable else self.build_lib
        try:
            names = generate_stubs(os.path.join(target, "monta", "_proto"))
        except StubError as e:
            raise SystemExit(str(e)) from None
        self.announce(f"monta: generated {len(names)} stub files into monta/_proto", level=2)


if __name__ == "__main__":  # pip's build backend runs this file as __main__; tests import it
    setup(cmdclass={"build_py": BuildPyWithStubs})
