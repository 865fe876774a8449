// gRPC clients of a LocalCluster's planner for multi-process tests that call
// the API directly (as a node, an operator or a reader would) rather than
// through montactl: channels over mutual TLS with the cluster's certificates,
// and the planner's /metrics text.
#ifndef MONTA_TESTS_TESTING_GRPC_CLIENTS_H_
#define MONTA_TESTS_TESTING_GRPC_CLIENTS_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "tests/testing/cluster.h"

namespace monta::testing {

// A channel to `cluster`'s planner presenting the certificate named by
// `tls_flags` (LocalCluster::NodeTlsFlags(...), OperatorTlsFlags()); null
// when the flags do not give usable files.
std::shared_ptr<grpc::Channel> PlannerChannel(
    const LocalCluster& cluster, const std::vector<std::string>& tls_flags);

// A context whose deadline is `seconds` from now.
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(int seconds = 30);

// The planner's /metrics text ("" when it cannot be read).
std::string PlannerMetrics(const LocalCluster& cluster);

// The value of the series whose line starts with `series` (name and labels
// exactly as exposed, e.g. monta_planner_held_bytes{kind="rendezvous"}), or
// -1 when absent.
double MetricValue(const std::string& metrics_text, const std::string& series);

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_GRPC_CLIENTS_H_
