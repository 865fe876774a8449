#!/bin/sh
echo "bazel coverage is not supported offline; use gcovr" >&2
exit 1
