"""Optional CUDA + NCCL repository.

Creates @local_cuda with:
  //:defs.bzl   HAS_CUDA = True/False
  //:cuda       cc_library with CUDA runtime + NCCL headers and libraries (only when found)
"""

def _cuda_configure_impl(repository_ctx):
    cuda_home = repository_ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    root = repository_ctx.path(cuda_home)
    has_cuda = (root.get_child("include").get_child("cuda_runtime.h").exists and
                root.get_child("include").get_child("nccl.h").exists and
                root.get_child("lib64").get_child("libnccl.so").exists)
    repository_ctx.file("WORKSPACE", "workspace(name = \"local_cuda\")\n")
    repository_ctx.file("defs.bzl", "HAS_CUDA = %s\nCUDA_HOME = \"%s\"\n" % (has_cuda, cuda_home))
    if not has_cuda:
        repository_ctx.file("BUILD", "# CUDA/NCCL not found under %s: GPU targets are not built.\n" % cuda_home)
        return
    repository_ctx.symlink(root.get_child("include"), "include")
    repository_ctx.symlink(root.get_child("lib64"), "lib64")
    repository_ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp", "include/*.hpp",
                 "include/cccl/**", "include/nccl_device/**"], allow_empty = True),
    includes = ["include", "include/cccl"],
    linkopts = [
        "-L%s/lib64",
        "-Wl,-rpath,%s/lib64",
        "-lcudart",
        "-lnccl",
        "-ldl",
    ],
)
""" % (cuda_home, cuda_home))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME"],
    local = True,
)
