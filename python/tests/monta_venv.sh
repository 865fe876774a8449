#!/usr/bin/env bash
# Sourced by the Python tests (run_installed.sh, admission_to_step_test.sh) from the runfiles
# root: `monta_venv` installs python/ (monta) into a fresh venv in the test's temp dir, the
# way a user does (pip install --no-build-isolation, offline), sets MONTA_PYTHON to that
# venv's interpreter and moves to an empty directory, so that the source tree's
# python/monta cannot be imported: the tests run against the installed copy.
#
# The venv sees Debian's site packages (python3-torch, python3-grpcio, python3-numpy,
# setuptools, pip); it is made --without-pip and installs with Debian's pip
# (`python -m pip`), which installs into the venv and saves ensurepip's ~5 s.

monta_venv() {
  local runfiles="$PWD" tmp="${TEST_TMPDIR:-$(mktemp -d)}"
  if ! /usr/bin/python3 -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("torch", "grpc", "setuptools", "pip", "wheel")))'
  then
    echo "monta_venv: /usr/bin/python3 lacks torch, grpc, setuptools, pip or wheel: run" \
      "./scripts/setup.sh" >&2
    return 1
  fi
  # A copy of the package's sources and the contract (pip builds in the source tree).
  local src="$tmp/monta-src"
  rm -rf "$src" "$tmp/monta-venv"
  mkdir -p "$src/python" "$src/proto/monta/v1"
  cp -L python/pyproject.toml python/setup.py python/README.md "$src/python/"
  cp -rL python/monta "$src/python/"
  cp -L proto/monta/v1/*.proto "$src/proto/monta/v1/"
  /usr/bin/python3 -m venv --system-site-packages --without-pip "$tmp/monta-venv"
  MONTA_PYTHON="$tmp/monta-venv/bin/python"
  if ! PIP_CONFIG_FILE=/dev/null "$MONTA_PYTHON" -m pip install --no-build-isolation \
    --no-index --no-deps --no-cache-dir --disable-pip-version-check -q "$src/python" \
    >"$tmp/monta-pip.log" 2>&1; then
    cat "$tmp/monta-pip.log" >&2
    echo "monta_venv: pip install of python/ failed" >&2
    return 1
  fi
  mkdir -p "$tmp/monta-work"
  cd "$tmp/monta-work"
  unset PYTHONPATH
  local origin
  origin=$("$MONTA_PYTHON" -c 'import importlib.util as u; print(u.find_spec("monta").origin)')
  case "$origin" in
    "$tmp/monta-venv/"*) ;;
    *) echo "monta_venv: monta resolves to $origin, not the venv's copy" >&2; return 1 ;;
  esac
  export MONTA_PYTHON MONTA_RUNFILES="$runfiles" PYTHONDONTWRITEBYTECODE=1
  export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
}
