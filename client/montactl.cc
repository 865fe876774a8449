// montactl: the command line for a Monta planner.
//
//   montactl [--planner ADDR] [--output table|json] COMMAND [ARGS]
//
// Commands: health, nodes, node NAME.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/table.h"
#include "common/proto_json.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/monta/v1/planner.grpc.pb.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:7400", "planner gRPC address");
ABSL_FLAG(std::string, output, "table", "output format: table or json");
ABSL_FLAG(double, timeout_seconds, 10, "RPC deadline");
ABSL_FLAG(bool, all, false, "nodes: include gone (deregistered) nodes");

namespace {

using monta::client::ShortDuration;
using monta::client::Table;

struct Context {
  std::shared_ptr<grpc::Channel> channel;
  bool json = false;
};

std::unique_ptr<grpc::ClientContext> RpcContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_seconds))));
  return context;
}

int Fail(const std::string& what, const grpc::Status& status) {
  std::cerr << "montactl: " << what << ": " << status.error_message() << " (code "
            << status.error_code() << ")\n";
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

int Health(const Context& ctx, const std::vector<std::string>& args) {
  auto stub = grpc::health::v1::Health::NewStub(ctx.channel);
  grpc::health::v1::HealthCheckRequest request;
  if (!args.empty()) request.set_service(args[0]);
  grpc::health::v1::HealthCheckResponse reply;
  auto context = RpcContext();
  grpc::Status status = stub->Check(context.get(), request, &reply);
  if (!status.ok()) return Fail("health check", status);
  if (ctx.json) return PrintJson(reply);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(reply.status())
            << "\n";
  return reply.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

std::string StateName(monta::v1::NodeState state) {
  switch (state) {
    case monta::v1::NODE_STATE_ALIVE:
      return "alive";
    case monta::v1::NODE_STATE_STALE:
      return "stale";
    case monta::v1::NODE_STATE_GONE:
      return "gone";
    default:
      return "unknown";
  }
}

std::string NicSummary(const monta::v1::NodeTopology& topology) {
  if (topology.nics().empty()) return "none";
  std::map<double, int> by_rate;
  for (const auto& nic : topology.nics()) ++by_rate[nic.rate_gbps()];
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
  auto stub = monta::v1::Planner::NewStub(ctx.channel);
  monta::v1::ListNodesRequest request;
  request.set_include_gone(absl::GetFlag(FLAGS_all));
  monta::v1::ListNodesReply reply;
  auto context = RpcContext();
  grpc::Status status = stub->ListNodes(context.get(), request, &reply);
  if (!status.ok()) return Fail("list nodes", status);
  if (ctx.json) return PrintJson(reply);
  Table table({"NAME", "STATE", "LEASE AGE", "GPUS", "NICS", "CPUS", "CURVES", "VERSION"});
  for (const auto& node : reply.nodes()) {
    table.AddRow({node.name(), StateName(node.state()), ShortDuration(node.lease_age_seconds()),
                  GpuSummary(node.topology()), NicSummary(node.topology()),
                  absl::StrCat(node.topology().cpu_logical_count()), CurveSummary(node),
                  node.agent_version()});
  }
  std::cout << table.Render();
  if (reply.nodes().empty()) std::cout << "(no nodes registered)\n";
  return 0;
}

int Node(const Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "montactl: usage: montactl node NAME\n";
    return 2;
  }
  auto stub = monta::v1::Planner::NewStub(ctx.channel);
  monta::v1::GetNodeRequest request;
  request.set_name(args[0]);
  monta::v1::NodeInfo reply;
  auto context = RpcContext();
  grpc::Status status = stub->GetNode(context.get(), request, &reply);
  if (!status.ok()) return Fail("get node", status);
  // A node is a nested document: JSON is the readable form for both outputs.
  return PrintJson(reply);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "montactl [--planner ADDR] [--output table|json] COMMAND [ARGS]\n"
      "commands:\n"
      "  health            planner health (gRPC health checking)\n"
      "  nodes [--all]     registered nodes\n"
      "  node NAME         one node in full (topology, events, curves)\n");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  Context ctx;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "table" && output != "json") {
    std::cerr << "montactl: --output: expected table or json, got \"" << output << "\"\n";
    return 2;
  }
  ctx.json = output == "json";
  if (args.empty()) {
    std::cerr << absl::ProgramUsageMessage();
    return 2;
  }
  ctx.channel = grpc::CreateChannel(absl::GetFlag(FLAGS_planner),
                                    grpc::InsecureChannelCredentials());
  const std::string command = args[0];
  args.erase(args.begin());
  using Handler = int (*)(const Context&, const std::vector<std::string>&);
  const std::map<std::string, Handler> commands = {
      {"health", Health},
      {"nodes", Nodes},
      {"node", Node},
  };
  auto it = commands.find(command);
  if (it == commands.end()) {
    std::cerr << "montactl: unknown command \"" << command << "\"\n"
              << absl::ProgramUsageMessage();
    return 2;
  }
  return it->second(ctx, args);
}
