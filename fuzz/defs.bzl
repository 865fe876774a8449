"""monta_fuzz_target: one libFuzzer target and the test that replays its corpus.

Under --config=fuzz (.bazelrc: clang-14, the libraries compiled with
-fsanitize=fuzzer-no-link,address) `name` links libFuzzer's main
(-fsanitize=fuzzer) and is what scripts/fuzz.sh runs. In every other build it
links replay_main.cc instead, which runs LLVMFuzzerTestOneInput once per file it
is given, so the GCC build compiles every harness and `name + "_replay_test"`
replays the committed corpus (fuzz/corpus/<name>/) in the ordinary suite.
"""

def monta_fuzz_target(name, srcs, deps):
    native.cc_library(
        name = name + "_harness",
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_harness"] + select({
            "//fuzz:fuzzing": [],
            "//conditions:default": ["//fuzz:replay_main"],
        }),
        linkopts = select({
            "//fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.cc_test(
        name = name + "_replay_test",
        size = "small",
        args = ["fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [
            ":" + name + "_harness",
            "//fuzz:replay_main",
        ],
    )
