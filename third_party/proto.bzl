"""Protobuf + gRPC C++ code generation with Debian's protoc and grpc_cpp_plugin."""

def monta_proto_library(name, srcs, deps = [], grpc = True, visibility = None):
    """Generates <src>.pb.{h,cc} (and .grpc.pb.{h,cc}) and wraps them in cc_libraries.

    `name` holds the messages only (protobuf, no gRPC), so code below the gRPC
    handlers can use the messages without the service headers. With grpc = True,
    `<name minus _proto>_grpc_proto` (e.g. planner_grpc_proto) adds the service
    stubs and depends on `name`; only handlers and clients depend on it.

    srcs are relative to the package; imports resolve from the repository root
    (import "proto/monta/v1/foo.proto"), also in an external repository that loads
    this macro (@etcd_protos, third_party/etcd_configure.bzl: import
    "etcd/api/mvccpb/kv.proto"). deps name other monta_proto_library message targets.
    """
    msg_h = []
    msg_cc = []
    grpc_h = []
    grpc_cc = []
    for src in srcs:
        base = src[:-len(".proto")]
        msg_h.append(base + ".pb.h")
        msg_cc.append(base + ".pb.cc")
        if grpc:
            grpc_h.append(base + ".grpc.pb.h")
            grpc_cc.append(base + ".grpc.pb.cc")
    # In the main repository the execution root is the repository root; an external
    # repository's sources and outputs sit under external/<name>/.
    repo = native.repository_name()
    root = "" if repo == "@" else "/external/" + repo[1:]
    include = "." if repo == "@" else root[1:]
    plugin_flags = ("--grpc_out=$(GENDIR)%s --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " % root) if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = msg_h + grpc_h + msg_cc + grpc_cc,
        cmd = ("/usr/bin/protoc -I%s --cpp_out=$(GENDIR)%s " % (include, root)) + plugin_flags +
              " ".join(["$(location %s)" % s for s in srcs]),
        visibility = ["//visibility:private"],
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = msg_cc,
        hdrs = msg_h,
        deps = deps + [Label("//third_party:protobuf")],
        visibility = visibility,
    )
    if grpc:
        stem = name[:-len("_proto")] if name.endswith("_proto") else name
        native.cc_library(
            name = stem + "_grpc_proto",
            srcs = grpc_cc,
            hdrs = grpc_h,
            deps = [
                ":" + name,
                Label("//third_party:grpc"),
                Label("//third_party:protobuf"),
            ],
            visibility = visibility,
        )
