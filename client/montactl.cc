// montactl: the command line for a Monta planner.
//
//   montactl [--planner ADDR[,ADDR...]] [--output table|json] COMMAND [ARGS]
//
// Commands: health, nodes, node NAME, topology NODE, topology --fabric,
// profiles, plan, bench, task ID, verify, curves NODE, forget.
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/fabric_render.h"
#include "client/plan_render.h"
#include "client/table.h"
#include "client/task_render.h"
#include "client/topology_render.h"
#include "client/verify_render.h"
#include "common/bandwidth/collective_proto.h"
#include "common/flags.h"
#include "common/grpc_security_flags.h"
#include "common/job_file.h"
#include "common/proto_json.h"
#include "common/proto_names.h"
#include "common/replicas/endpoints.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:7400",
          "planner gRPC address (host:port), or a planner's replicas "
          "comma-separated: a call answered UNAVAILABLE (down, or a follower "
          "refusing a leader-only call) is made again on the leader the "
          "follower named when listed, else the next replica; a "
          "dns:///NAME:PORT target resolving to several replicas is called "
          "round robin");
ABSL_FLAG(std::string, output, "table", "output format: table or json");
ABSL_FLAG(double, timeout_seconds, 10, "RPC deadline");
ABSL_FLAG(bool, all, false, "nodes: include gone (deregistered) nodes");
ABSL_FLAG(bool, fabric, false,
          "topology: the fabric tree (blocks, racks, nodes, each uplink's "
          "declared and measured rate) instead of one node; bench: measure "
          "the fabric's levels now (a round of the periodic schedule)");
ABSL_FLAG(std::string, job, "", "plan: job file (YAML or JSON; see examples/)");
ABSL_FLAG(std::string, profile, "",
          "plan: hardware profile of the placement (see `profiles`)");
ABSL_FLAG(
    std::string, nodes, "",
    "plan: number of nodes of --profile; bench: comma-separated node names");
ABSL_FLAG(std::string, node_names, "",
          "plan: registered nodes in rank order, comma-separated");
ABSL_FLAG(int, gpus_per_node, 0,
          "plan: ranks per node (0 = the profile's or the nodes')");
ABSL_FLAG(int, ranks_per_node, 0,
          "bench: ranks per node (0 = GPUs, or 2 on CPU nodes)");
ABSL_FLAG(bool, wait, true, "bench: wait for the result (not with --fabric)");
ABSL_FLAG(uint64_t, min_bytes, 0,
          "bench: smallest message size per rank (0 = the planner's)");
ABSL_FLAG(uint64_t, max_bytes, 0,
          "bench: largest message size per rank (0 = the planner's)");
ABSL_FLAG(bool, dry_run, false,
          "bench --fabric: list the level tasks a round would run, run none");
ABSL_FLAG(double, bench_timeout_seconds, 120, "bench: task deadline");
ABSL_FLAG(std::string, chunks, "",
          "verify: K values to run for tp_dedup_pipelined, comma-separated "
          "(default 1,2,4,8,16,32 up to the plan's chunk bound, "
          "docs/MODEL.md §5; named values run as asked; the chosen K is "
          "always added)");
ABSL_FLAG(int, iterations, 0, "verify: timed runs per candidate (0 = 7)");
ABSL_FLAG(std::string, svg, "",
          "verify: also write time against K per strategy to this SVG file");
ABSL_FLAG(bool, skip_calibration, false,
          "verify: do not fit the model's calibration from this run");
ABSL_FLAG(std::string, scope, "layer",
          "verify: what each candidate runs: layer (one MoE layer's dispatch "
          "and combine, forward and backward, in the job's expert layout, "
          "against total_seconds_per_layer) or op (one dispatch op)");
ABSL_FLAG(bool, calibrate_on_loopback, false,
          "verify: calibrate even when the nodes' benchmark traffic never "
          "crosses a link (loopback, or agents sharing one host)");
ABSL_FLAG(double, verify_timeout_seconds, 600, "verify: run deadline");
ABSL_FLAG(std::string, task, "", "forget: drop every curve of this task");
ABSL_FLAG(std::string, node, "",
          "forget: drop every curve that involves this node");

namespace {

using monta::client::ShortDuration;
using monta::client::Table;

// The planner's replicas montactl may call, one channel each (made on first
// use), and which one it calls now (common/replicas).
class Planners {
 public:
  Planners(monta::replicas::Endpoints endpoints,
           std::shared_ptr<grpc::ChannelCredentials> credentials)
      : endpoints_(std::move(endpoints)),
        credentials_(std::move(credentials)) {}

  // `pinned`: pick_first even for a "dns:" name, so that a listing's pages
  // stay on one address behind it (page tokens are one replica's).
  std::shared_ptr<grpc::Channel> Channel(const std::string& endpoint,
                                         bool pinned = false) {
    std::shared_ptr<grpc::Channel>& channel =
        (pinned ? pinned_channels_ : channels_)[endpoint];
    if (channel == nullptr) {
      // A large cluster's fabric tree or node list is more than gRPC's
      // default 4 MiB a reply.
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(256 << 20);
      if (!pinned) monta::replicas::UseRoundRobinForDns(endpoint, &args);
      channel = grpc::CreateCustomChannel(endpoint, credentials_, args);
    }
    return channel;
  }

  // `rpc` on the replica called now; after UNAVAILABLE again on the leader
  // a follower named (when listed), else the next replica.
  grpc::Status Call(
      const std::function<grpc::Status(std::shared_ptr<grpc::Channel>)>& rpc) {
    return monta::replicas::CallWithFailover(
        endpoints_,
        [&](const std::string& endpoint) { return rpc(Channel(endpoint)); });
  }

  // Every page of a listing on one replica (replicas::ListAllPages: when the
  // replica changes, `restart` drops what was kept and it starts over).
  // `page` gets a pinned channel and the page token; it sets the next token.
  grpc::Status ListAllPages(
      const std::function<grpc::Status(
          std::shared_ptr<grpc::Channel>, grpc::ClientContext*,
          const std::string& page_token, std::string* next_page_token)>& page,
      const std::function<void()>& restart);

  const monta::replicas::Endpoints& endpoints() const { return endpoints_; }

 private:
  monta::replicas::Endpoints endpoints_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> pinned_channels_;
};

std::unique_ptr<grpc::ClientContext> RpcContext();

grpc::Status Planners::ListAllPages(
    const std::function<grpc::Status(
        std::shared_ptr<grpc::Channel>, grpc::ClientContext*,
        const std::string& page_token, std::string* next_page_token)>& page,
    const std::function<void()>& restart) {
  return monta::replicas::ListAllPages(
      endpoints_,
      [&](const std::string& endpoint, const std::string& page_token,
          std::string* next_page_token, std::string* peer) {
        auto context = RpcContext();
        grpc::Status status = page(Channel(endpoint, /*pinned=*/true),
                                   context.get(), page_token, next_page_token);
        *peer = context->peer();
        return status;
      },
      restart);
}

struct Context {
  Planners* planners = nullptr;
  bool json = false;
};

// A Planner RPC through ctx's replicas: `rpc` gets a stub on the replica
// called now (and a fresh one on each retry).
grpc::Status CallPlanner(
    const Context& ctx,
    const std::function<grpc::Status(monta::v1::Planner::Stub&)>& rpc) {
  return ctx.planners->Call([&](std::shared_ptr<grpc::Channel> channel) {
    std::unique_ptr<monta::v1::Planner::Stub> stub =
        monta::v1::Planner::NewStub(channel);
    return rpc(*stub);
  });
}

std::unique_ptr<grpc::ClientContext> RpcContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_seconds))));
  return context;
}

int Fail(const std::string& what, const grpc::Status& status) {
  std::cerr << "montactl: " << what << ": " << status.error_message()
            << " (code " << status.error_code() << ")\n";
  return 1;
}

int PrintJson(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = monta::ToJson(message);
  if (!json.ok()) {
    std::cerr << "montactl: " << json.status().message() << "\n";
    return 1;
  }
  std::cout << *json << "\n";
  return 0;
}

// With several replicas: SERVING when any replica serves `service` (the
// planner is up when its leader is, its reads when any replica's are); else
// the last answer.
int Health(const Context& ctx, const std::vector<std::string>& args) {
  grpc::health::v1::HealthCheckRequest request;
  if (!args.empty()) request.set_service(args[0]);
  grpc::health::v1::HealthCheckResponse reply;
  bool answered = false;
  grpc::Status failed;
  for (const std::string& endpoint : ctx.planners->endpoints().all()) {
    auto stub =
        grpc::health::v1::Health::NewStub(ctx.planners->Channel(endpoint));
    grpc::health::v1::HealthCheckResponse answer;
    auto context = RpcContext();
    grpc::Status checked = stub->Check(context.get(), request, &answer);
    if (!checked.ok()) {
      failed = checked;
      continue;
    }
    answered = true;
    reply = answer;
    if (reply.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      break;
    }
  }
  if (!answered) return Fail("health check", failed);
  if (ctx.json) return PrintJson(reply);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                   reply.status())
            << "\n";
  return reply.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0
                                                                          : 1;
}

// The wire carries bytes per second; people read NIC rates in Gb/s.
double Gbps(const monta::v1::Nic& nic) {
  return nic.rate_bytes_per_second() * 8 / 1e9;
}

std::string NicSummary(const monta::v1::NodeTopology& topology) {
  if (topology.nics().empty()) return "none";
  std::map<double, int> by_rate;
  for (const auto& nic : topology.nics()) ++by_rate[Gbps(nic)];
  std::vector<std::string> parts;
  for (const auto& [rate, count] : by_rate) {
    parts.push_back(absl::StrFormat("%dx%gG", count, rate));
  }
  return absl::StrJoin(parts, ",");
}

std::string GpuSummary(const monta::v1::NodeTopology& topology) {
  if (topology.gpus().empty()) return "0";
  return absl::StrCat(topology.gpus_size(), "x ", topology.gpus(0).name());
}

std::string CurveSummary(const monta::v1::NodeInfo& node) {
  int intra = 0;
  int inter = 0;
  for (const auto& curve : node.curves()) {
    (curve.scope() == monta::v1::SCOPE_INTER_NODE ? inter : intra)++;
  }
  if (intra == 0 && inter == 0) return "none";
  return absl::StrCat(intra, " intra, ", inter, " inter");
}

int Nodes(const Context& ctx, const std::vector<std::string>& args) {
  monta::v1::ListNodesRequest request;
  request.set_include_gone(absl::GetFlag(FLAGS_all));
  // Every page, merged into one reply (JSON prints it whole), all from one
  // replica: when the replica changes the listing starts over there.
  monta::v1::ListNodesReply reply;
  grpc::Status status = ctx.planners->ListAllPages(
      [&](std::shared_ptr<grpc::Channel> channel, grpc::ClientContext* context,
          const std::string& page_token, std::string* next_page_token) {
        request.set_page_token(page_token);
        monta::v1::ListNodesReply page;
        grpc::Status called = monta::v1::Planner::NewStub(channel)->ListNodes(
            context, request, &page);
        if (!called.ok()) return called;
        if (!page.next_page_token().empty() &&
            page.next_page_token() == page_token) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "the planner repeated a page token");
        }
        for (auto& node : *page.mutable_nodes()) {
          *reply.add_nodes() = std::move(node);
        }
        *next_page_token = page.next_page_token();
        return grpc::Status::OK;
      },
      [&] { reply.clear_nodes(); });
  if (!status.ok()) return Fail("list nodes", status);
  if (ctx.json) return PrintJson(reply);
  Table table({"NAME", "STATE", "LEASE AGE", "GPUS", "NICS", "CPUS", "CURVES",
               "VERSION"});
  for (const auto& node : reply.nodes()) {
    table.AddRow({node.name(), monta::NodeStateName(node.state()),
                  ShortDuration(node.lease_age_seconds()),
                  GpuSummary(node.topology()), NicSummary(node.topology()),
                  absl::StrCat(node.topology().cpu_logical_count()),
                  CurveSummary(node), node.agent_version()});
  }
  std::cout << table.Render();
  if (reply.nodes().empty()) std::cout << "(no nodes registered)\n";
  return 0;
}

grpc::Status GetNode(const Context& ctx, const std::string& name,
                     monta::v1::NodeInfo* node) {
  monta::v1::GetNodeRequest request;
  request.set_name(name);
  return CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.GetNode(context.get(), request, node);
  });
}

// For `montactl COMMAND NAME`: reads node NAME into `node`. 0 on success, else
// the exit code (after saying why).
int FetchNamedNode(const Context& ctx, const std::vector<std::string>& args,
                   const char* usage, monta::v1::NodeInfo* node) {
  if (args.size() != 1) {
    std::cerr << "montactl: usage: montactl " << usage << "\n";
    return 2;
  }
  grpc::Status status = GetNode(ctx, args[0], node);
  if (!status.ok()) return Fail("get node", status);
  return 0;
}

int Node(const Context& ctx, const std::vector<std::string>& args) {
  monta::v1::NodeInfo reply;
  if (int rc = FetchNamedNode(ctx, args, "node NAME", &reply); rc != 0) {
    return rc;
  }
  // A node is a nested document: JSON is the readable form for both outputs.
  return PrintJson(reply);
}

// montactl topology --fabric: the whole tree.
int FabricTree(const Context& ctx) {
  monta::v1::FabricReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.GetFabric(context.get(), {}, &reply);
  });
  if (!status.ok()) return Fail("get fabric", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << monta::client::FabricText(reply);
  return 0;
}

int Topology(const Context& ctx, const std::vector<std::string>& args) {
  if (absl::GetFlag(FLAGS_fabric)) {
    if (!args.empty()) {
      std::cerr << "montactl: usage: montactl topology --fabric (no node)\n";
      return 2;
    }
    return FabricTree(ctx);
  }
  monta::v1::NodeInfo node;
  if (int rc = FetchNamedNode(ctx, args, "topology NODE", &node); rc != 0) {
    return rc;
  }
  if (ctx.json) return PrintJson(node.topology());
  const auto& t = node.topology();
  std::cout << "Node " << node.name() << " ("
            << monta::NodeStateName(node.state()) << ")";
  if (!t.profile_name().empty()) std::cout << ", profile " << t.profile_name();
  std::cout << "\nFabric: " << monta::client::FabricPositionText(node.fabric())
            << "\n\n";
  if (t.gpus().empty() && t.nics().empty()) {
    std::cout << "No GPUs and no RDMA NICs discovered.\n";
  } else {
    std::cout << monta::client::RenderTopoMatrix(t) << "\n";
  }
  if (!t.nics().empty()) std::cout << monta::client::RenderNicTable(t) << "\n";
  if (!t.cuda_status().empty())
    std::cout << "CUDA: " << t.cuda_status() << "\n";
  if (!t.nvml_status().empty())
    std::cout << "NVML: " << t.nvml_status() << "\n";
  if (!t.nic_status().empty()) std::cout << "NICs: " << t.nic_status() << "\n";
  if (!node.events().empty()) {
    std::cout << "\nEvents:\n";
    Table events({"TIME", "KIND", "MESSAGE"});
    for (const auto& e : node.events()) {
      events.AddRow({absl::FormatTime("%Y-%m-%d %H:%M:%S",
                                      absl::FromUnixSeconds(e.time().seconds()),
                                      absl::UTCTimeZone()),
                     monta::ShortName(e.change()), e.message()});
    }
    std::cout << events.Render();
  }
  return 0;
}

int Profiles(const Context& ctx, const std::vector<std::string>& args) {
  monta::v1::ListProfilesReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.ListProfiles(context.get(), {}, &reply);
  });
  if (!status.ok()) return Fail("list profiles", status);
  if (ctx.json) return PrintJson(reply);
  Table summary({"PROFILE", "VERSION", "GPUS/NODE", "NICS/NODE", "NIC RATE",
                 "NVLINK/DIR", "DESCRIPTION"});
  for (const auto& p : reply.profiles()) {
    summary.AddRow(
        {p.name(), p.version(), absl::StrCat(p.gpus_per_node()),
         absl::StrCat(p.nics_per_node()),
         absl::StrFormat("%g Gb/s", p.nic_bytes_per_second() * 8 / 1e9),
         absl::StrFormat("%g GB/s", p.nvlink_bytes_per_second() / 1e9),
         p.description()});
  }
  std::cout << summary.Render();
  for (const auto& p : reply.profiles()) {
    if (!args.empty() && p.name() != args[0]) continue;
    std::cout << "\n" << p.name() << " " << p.version() << "\n";
    Table constants({"  CONSTANT", "VALUE", "UNIT", "SOURCE"});
    for (const auto& c : p.constants()) {
      constants.AddRow({"  " + c.name(), absl::StrFormat("%g", c.value()),
                        c.unit(), c.source()});
    }
    std::cout << constants.Render();
  }
  return 0;
}

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

// The job file with the placement flags applied; nullopt after printing
// why (exit status 2).
std::optional<monta::v1::StrategyRequest> RequestFromFlags(
    const std::string& command) {
  const std::string job_path = absl::GetFlag(FLAGS_job);
  if (job_path.empty()) {
    std::cerr << "montactl: usage: montactl " << command
              << " --job FILE (--profile NAME --nodes N | "
                 "--node_names a,b,...) [--gpus_per_node G]\n";
    return std::nullopt;
  }
  absl::StatusOr<monta::v1::StrategyRequest> request =
      monta::LoadJobFile(job_path);
  if (!request.ok()) {
    std::cerr << "montactl: " << job_path << ": " << request.status().message()
              << "\n";
    return std::nullopt;
  }
  const std::string profile = absl::GetFlag(FLAGS_profile);
  const std::string node_names = absl::GetFlag(FLAGS_node_names);
  if (!profile.empty() && !node_names.empty()) {
    std::cerr
        << "montactl: give either --profile with --nodes, or --node_names\n";
    return std::nullopt;
  }
  auto* placement = request->mutable_placement();
  if (!profile.empty()) {
    int nodes = 0;
    if (!absl::SimpleAtoi(absl::GetFlag(FLAGS_nodes), &nodes) || nodes <= 0) {
      std::cerr << "montactl: --nodes: expected a positive node count with "
                   "--profile\n";
      return std::nullopt;
    }
    placement->clear_node_names();
    placement->set_profile(profile);
    placement->set_nodes(nodes);
  } else if (!node_names.empty()) {
    placement->clear_profile();
    placement->clear_nodes();
    placement->clear_node_names();
    for (const auto& n : SplitList(node_names)) placement->add_node_names(n);
  }
  if (absl::GetFlag(FLAGS_gpus_per_node) > 0) {
    placement->set_gpus_per_node(absl::GetFlag(FLAGS_gpus_per_node));
  }
  return *std::move(request);
}

int Plan(const Context& ctx, const std::vector<std::string>& args) {
  std::optional<monta::v1::StrategyRequest> request = RequestFromFlags("plan");
  if (!request) return 2;
  monta::v1::StrategyReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.GetStrategy(context.get(), *request, &reply);
  });
  if (!status.ok()) return Fail("plan", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << monta::client::PlanText(reply);
  return 0;
}

int Verify(const Context& ctx, const std::vector<std::string>& args) {
  std::optional<monta::v1::StrategyRequest> job = RequestFromFlags("verify");
  if (!job) return 2;
  monta::v1::VerifyRequest request;
  *request.mutable_request() = *std::move(job);
  for (const std::string& k : SplitList(absl::GetFlag(FLAGS_chunks))) {
    int chunks = 0;
    if (!absl::SimpleAtoi(k, &chunks) || chunks < 1) {
      std::cerr << "montactl: --chunks: expected positive integers, got \"" << k
                << "\"\n";
      return 2;
    }
    request.add_chunks(chunks);
  }
  const std::string scope = absl::GetFlag(FLAGS_scope);
  if (scope == "layer") {
    request.set_scope(monta::v1::VERIFY_SCOPE_LAYER);
  } else if (scope == "op") {
    request.set_scope(monta::v1::VERIFY_SCOPE_OP);
  } else {
    std::cerr << "montactl: --scope: expected layer or op\n";
    return 2;
  }
  request.set_iterations(absl::GetFlag(FLAGS_iterations));
  request.set_skip_calibration(absl::GetFlag(FLAGS_skip_calibration));
  request.set_calibrate_on_loopback(absl::GetFlag(FLAGS_calibrate_on_loopback));
  const double timeout = absl::GetFlag(FLAGS_verify_timeout_seconds);
  request.set_timeout_seconds(timeout);
  monta::v1::VerifyReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(timeout + 15)));
    return stub.Verify(&context, request, &reply);
  });
  if (!status.ok()) return Fail("verify", status);
  const std::string svg_path = absl::GetFlag(FLAGS_svg);
  if (!svg_path.empty()) {
    std::ofstream svg(svg_path);
    svg << monta::client::VerifySvg(reply);
    if (!svg.good()) {
      std::cerr << "montactl: --svg: cannot write " << svg_path << "\n";
      return 1;
    }
  }
  if (ctx.json) return PrintJson(reply);
  std::cout << monta::client::VerifyTable(reply);
  return 0;
}

// A RunBenchmarkRequest with the sweep flags: ranks per node, sizes, deadline.
monta::v1::RunBenchmarkRequest SweepRequest() {
  monta::v1::RunBenchmarkRequest request;
  request.set_ranks_per_node(absl::GetFlag(FLAGS_ranks_per_node));
  request.set_min_bytes(absl::GetFlag(FLAGS_min_bytes));
  request.set_max_bytes(absl::GetFlag(FLAGS_max_bytes));
  request.set_timeout_seconds(absl::GetFlag(FLAGS_bench_timeout_seconds));
  return request;
}

// bench --fabric: one round of level measurements (or, --dry_run, its plan).
int BenchFabric(const Context& ctx) {
  monta::v1::RunBenchmarkRequest request = SweepRequest();
  request.set_fabric_levels(true);
  request.set_dry_run(absl::GetFlag(FLAGS_dry_run));
  monta::v1::RunBenchmarkReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.RunBenchmark(context.get(), request, &reply);
  });
  if (!status.ok()) return Fail("bench --fabric", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << monta::client::LevelTasksText(reply, request.dry_run());
  return 0;
}

int Bench(const Context& ctx, const std::vector<std::string>& args) {
  if (absl::GetFlag(FLAGS_fabric)) {
    if (!args.empty() || !absl::GetFlag(FLAGS_nodes).empty()) {
      std::cerr << "montactl: bench --fabric chooses its nodes: no --nodes\n";
      return 2;
    }
    return BenchFabric(ctx);
  }
  std::vector<std::string> nodes = SplitList(absl::GetFlag(FLAGS_nodes));
  for (const auto& a : args) nodes.push_back(a);
  if (nodes.empty()) {
    std::cerr
        << "montactl: usage: montactl bench --nodes a,b [--ranks_per_node N]\n";
    return 2;
  }
  monta::v1::RunBenchmarkRequest request = SweepRequest();
  for (const auto& n : nodes) request.add_nodes(n);
  request.set_wait(absl::GetFlag(FLAGS_wait));
  monta::v1::RunBenchmarkReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(
        absl::Now() +
        absl::Seconds(absl::GetFlag(FLAGS_bench_timeout_seconds) + 15)));
    return stub.RunBenchmark(&context, request, &reply);
  });
  if (!status.ok()) return Fail("bench", status);
  if (ctx.json) return PrintJson(reply);
  const auto& s = reply.status();
  std::cout << monta::client::TaskStatusText(s);
  if (s.state() == monta::v1::TASK_STATE_SUCCEEDED) {
    // Show what was measured: the inter-node (or intra-node) AllToAll of the
    // first node.
    monta::v1::NodeInfo node;
    if (GetNode(ctx, s.nodes(0), &node).ok()) {
      for (const auto& curve : node.curves()) {
        if (curve.task_id() != s.task_id()) continue;
        std::cout << "\n"
                  << monta::CurveStrategyName(curve.strategy_kind()) << " "
                  << monta::bandwidth::CollectiveProtoName(curve.collective())
                  << ", " << curve.nranks() << " ranks on " << curve.n_nodes()
                  << " node(s):\n";
        // CHAIN: across nodes, one op of the warm chain timed after the
        // median (docs/MODEL.md §2); "-" when not measured.
        Table t({"SIZE", "TIME", "ALGBW", "BUSBW", "WRONG", "CHAIN"});
        for (const auto& p : curve.points()) {
          t.AddRow(
              {monta::client::HumanBytes(p.message_bytes()),
               monta::client::HumanSeconds(p.time_seconds()),
               absl::StrFormat("%.3f GB/s", p.algbw_bytes_per_second() / 1e9),
               absl::StrFormat("%.3f GB/s", p.busbw_bytes_per_second() / 1e9),
               absl::StrCat(p.wrong_bytes()),
               p.chain_time_seconds() > 0
                   ? monta::client::HumanSeconds(p.chain_time_seconds())
                   : std::string("-")});
        }
        std::cout << t.Render();
      }
    }
  }
  return s.state() == monta::v1::TASK_STATE_SUCCEEDED || !request.wait() ? 0
                                                                         : 1;
}

// One benchmark task by id, from any replica (a follower reads the store).
int Task(const Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "montactl: usage: montactl task ID\n";
    return 2;
  }
  monta::v1::GetBenchmarkTaskRequest request;
  request.set_task_id(args[0]);
  monta::v1::GetBenchmarkTaskReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.GetBenchmarkTask(context.get(), request, &reply);
  });
  if (!status.ok()) return Fail("get task", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << monta::client::TaskText(reply);
  return 0;
}

// "alltoall", "tp_dedup_pipelined K=4": what a curve measured.
std::string CurveWhat(const monta::v1::BandwidthCurve& c) {
  std::string what = monta::bandwidth::CollectiveProtoName(c.collective());
  if (c.strategy_kind() != monta::v1::STRATEGY_KIND_UNSPECIFIED) {
    what = absl::StrCat(monta::CurveStrategyName(c.strategy_kind()),
                        " K=", c.chunks());
  }
  return what;
}

std::string Age(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return ShortDuration(
      absl::ToDoubleSeconds(absl::Now() - absl::FromUnixSeconds(t.seconds())));
}

int Curves(const Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "montactl: usage: montactl curves NODE\n";
    return 2;
  }
  monta::v1::ListCurvesRequest request;
  request.set_node_name(args[0]);
  monta::v1::ListCurvesReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.ListCurves(context.get(), request, &reply);
  });
  if (!status.ok()) return Fail("list curves", status);
  if (ctx.json) return PrintJson(reply);
  // Newest first: the planner's sequence orders evidence; RECEIVED is when
  // the planner formed the curve (the agents' own dates are not trusted).
  Table curves({"SEQ", "TASK", "MEASURED", "NODES", "RANKS", "SIZES", "SPREAD",
                "RECEIVED"});
  for (const auto& c : reply.curves()) {
    const std::string sizes =
        c.points().empty()
            ? "-"
            : absl::StrCat(
                  monta::client::HumanBytes(c.points(0).message_bytes()), "..",
                  monta::client::HumanBytes(
                      c.points(c.points_size() - 1).message_bytes()));
    curves.AddRow({absl::StrCat(c.sequence()), c.task_id(), CurveWhat(c),
                   absl::StrJoin(c.nodes(), ","), absl::StrCat(c.nranks()),
                   sizes,
                   c.node_spread_ratio() > 0
                       ? absl::StrFormat("%.2fx", c.node_spread_ratio())
                       : "-",
                   Age(c.received_at()) + " ago"});
  }
  std::cout << curves.Render();
  if (reply.curves().empty()) std::cout << "(no curves)\n";
  if (!reply.excluded().empty()) {
    std::cout << "\nExcluded (not planned with):\n";
    Table excluded({"TASK", "MEASURED", "NODES", "REASON", "DETAIL"});
    for (const auto& e : reply.excluded()) {
      excluded.AddRow({e.curve().task_id(), CurveWhat(e.curve()),
                       absl::StrJoin(e.curve().nodes(), ","),
                       monta::ShortName(e.reason()), e.detail()});
    }
    std::cout << excluded.Render();
  }
  return 0;
}

int Forget(const Context& ctx, const std::vector<std::string>& args) {
  const std::string task = absl::GetFlag(FLAGS_task);
  const std::string node = absl::GetFlag(FLAGS_node);
  if (!args.empty() || task.empty() == node.empty()) {
    std::cerr << "montactl: usage: montactl forget (--task ID | --node NAME)\n";
    return 2;
  }
  monta::v1::ForgetCurvesRequest request;
  request.set_task_id(task);
  request.set_node_name(node);
  monta::v1::ForgetCurvesReply reply;
  grpc::Status status = CallPlanner(ctx, [&](monta::v1::Planner::Stub& stub) {
    auto context = RpcContext();
    return stub.ForgetCurves(context.get(), request, &reply);
  });
  if (!status.ok()) return Fail("forget", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << "forgot " << reply.forgotten_size() << " curve(s)\n";
  for (const auto& c : reply.forgotten()) {
    std::cout << "  - " << CurveWhat(c) << " on "
              << absl::StrJoin(c.nodes(), ",") << " (task " << c.task_id()
              << ", sequence " << c.sequence() << ")\n";
  }
  for (const auto& c : reply.restored()) {
    std::cout << "  evidence again: " << CurveWhat(c) << " on "
              << absl::StrJoin(c.nodes(), ",") << " (task " << c.task_id()
              << ", sequence " << c.sequence() << ")\n";
  }
  return 0;
}

}  // namespace

// What `montactl --help` says above the flags.
constexpr char kUsage[] =
    "Monta's command-line client.\n\n"
    "Usage: montactl [--planner ADDR[,ADDR...]] (--tls_ca_file F "
    "--tls_cert_file F "
    "--tls_key_file F | --insecure) [--output table|json] COMMAND [ARGS]\n"
    "commands:\n"
    "  health            planner health (gRPC health checking)\n"
    "  nodes [--all]     registered nodes\n"
    "  node NAME         one node in full (topology, events, curves)\n"
    "  topology NODE     GPU/NIC matrix as `nvidia-smi topo -m`, NIC table, "
    "events,\n"
    "                    where the node sits in the fabric\n"
    "  topology --fabric the fabric tree: blocks, racks, nodes, uplink "
    "rates\n"
    "  profiles [NAME]   hardware profiles and their sourced constants\n"
    "  plan --job FILE (--profile NAME --nodes N | --node_names a,b,...)\n"
    "                    ranked AllToAll strategies for a job, with "
    "evidence\n"
    "  bench --nodes a,b measure nodes (one node: intra-node; several: "
    "inter-node)\n"
    "  task ID           one benchmark task: state, attempt, leader epoch, "
    "times\n"
    "  bench --fabric [--dry_run]\n"
    "                    measure the fabric's levels now (inside racks, "
    "across racks,\n"
    "                    two racks at once), or list the tasks a round "
    "would run\n"
    "  verify --job FILE --node_names a,b,... [--scope layer|op] [--chunks "
    "K,..]\n"
    "                    run a MoE layer (or op) under every strategy and K "
    "there,\n"
    "                    and score the plan (predicted vs measured, spread, "
    "regret)\n"
    "  curves NODE       the evidence on a node: its curves, newest first "
    "(by the planner's\n"
    "                    sequence), and the curves it excluded, with why\n"
    "  forget (--task ID | --node NAME)\n"
    "                    drop evidence (operators; written to the audit "
    "log)\n"
    "Example:\n"
    "  montactl --planner=127.0.0.1:7400 --insecure plan "
    "--job=examples/monta-paper-2x70b.yaml --profile=a800-hgx --nodes=2";

int main(int argc, char** argv) {
  std::vector<char*> rest = monta::ParseFlags(argc, argv, kUsage, __FILE__);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  Context ctx;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "table" && output != "json") {
    std::cerr << "montactl: --output: expected table or json, got \"" << output
              << "\"\n";
    return 2;
  }
  ctx.json = output == "json";
  if (args.empty()) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  absl::StatusOr<monta::GrpcSecurityOptions> security =
      monta::GrpcSecurityFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      security.ok() ? monta::MakeChannelCredentials(*security)
                    : absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>(
                          security.status());
  if (!credentials.ok()) {
    std::cerr << "montactl: " << credentials.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<monta::replicas::Endpoints> endpoints =
      monta::replicas::Endpoints::Parse(absl::GetFlag(FLAGS_planner),
                                        "--planner");
  if (!endpoints.ok()) {
    std::cerr << "montactl: " << endpoints.status().message() << "\n";
    return 2;
  }
  Planners planners(*std::move(endpoints), *credentials);
  ctx.planners = &planners;
  const std::string command = args[0];
  args.erase(args.begin());
  using Handler = int (*)(const Context&, const std::vector<std::string>&);
  const std::map<std::string, Handler> commands = {
      {"health", Health},     {"nodes", Nodes},       {"node", Node},
      {"topology", Topology}, {"profiles", Profiles}, {"plan", Plan},
      {"bench", Bench},       {"verify", Verify},     {"curves", Curves},
      {"forget", Forget},     {"task", Task},
  };
  auto it = commands.find(command);
  if (it == commands.end()) {
    std::cerr << "montactl: unknown command \"" << command << "\"\n"
              << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  return it->second(ctx, args);
}
