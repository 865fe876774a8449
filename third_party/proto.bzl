"""Protobuf + gRPC C++ code generation with Debian's protoc and grpc_cpp_plugin."""

def monta_proto_library(name, srcs, deps = [], grpc = True):
    """Generates <src>.pb.{h,cc} (and .grpc.pb.{h,cc}) and wraps them in cc_library `name`.

    srcs are relative to the package; imports resolve from the repository root
    (import "proto/monta/v1/foo.proto").
    """
    outs_h = []
    outs_cc = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs_h.append(base + ".pb.h")
        outs_cc.append(base + ".pb.cc")
        if grpc:
            outs_h.append(base + ".grpc.pb.h")
            outs_cc.append(base + ".grpc.pb.cc")
    plugin_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs_h + outs_cc,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) " + plugin_flags +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs)
    native.cc_library(
        name = name,
        srcs = outs_cc,
        hdrs = outs_h,
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
    )
