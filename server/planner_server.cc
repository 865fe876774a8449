#include "server/planner_server.h"

#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/topology/topology_diff.h"
#include "common/rpc_metrics.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace monta {

PlannerServer::PlannerServer(PlannerOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(
    PlannerOptions options) {
  std::unique_ptr<PlannerServer> s(new PlannerServer(std::move(options)));
  s->metrics_ = std::make_shared<prometheus::Registry>();
  if (!s->options_.metrics_address.empty()) {
    try {
      s->exposer_ =
          std::make_unique<prometheus::Exposer>(s->options_.metrics_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("metrics address ", s->options_.metrics_address,
                       ": cannot listen: ", e.what()));
    }
    s->exposer_->RegisterCollectable(s->metrics_);
    std::vector<int> ports = s->exposer_->GetListeningPorts();
    s->metrics_port_ = ports.empty() ? 0 : ports.front();
  }
  s->planner_metrics_ = std::make_unique<metrics::PlannerMetrics>(*s->metrics_);
  s->registry_ = std::make_unique<registry::Registry>(
      s->options_.registry, [](const monta::v1::NodeTopology& before,
                               const monta::v1::NodeTopology& after) {
        std::vector<monta::v1::TopologyEvent> events;
        for (const auto& change : topology::DiffTopology(before, after)) {
          monta::v1::TopologyEvent event;
          event.set_kind(change.kind);
          event.set_message(change.message);
          events.push_back(std::move(event));
        }
        return events;
      });
  if (!s->options_.db_path.empty()) {
    absl::StatusOr<std::unique_ptr<store::SqliteStore>> store =
        store::SqliteStore::Open(s->options_.db_path);
    if (!store.ok()) return store.status();
    s->store_ = *std::move(store);
    if (absl::Status loaded = s->store_->LoadInto(*s->registry_);
        !loaded.ok()) {
      return absl::DataLossError(
          absl::StrCat("--db ", s->options_.db_path, ": ", loaded.message()));
    }
    s->registry_->SetObserver(s->store_.get());
  }
  s->cluster_collector_ =
      std::make_shared<metrics::ClusterCollector>(s->registry_.get());
  if (s->exposer_ != nullptr)
    s->exposer_->RegisterCollectable(s->cluster_collector_);
  s->coordinator_ = std::make_unique<bench::Coordinator>(
      s->registry_.get(), s->options_.coordinator);
  metrics::PlannerMetrics* planner_metrics = s->planner_metrics_.get();
  s->coordinator_->SetTaskFinishedCallback(
      [planner_metrics](const monta::v1::BenchmarkTaskStatus& status) {
        planner_metrics->RecordBenchmarkTask(status);
      });
  PlannerServer* self = s.get();
  api::AgentGatewayService::RegisteredCallback on_registered = nullptr;
  if (s->options_.bench_on_register) {
    on_registered = [self](const std::string& node) {
      auto info = self->registry_->Get(node, absl::Now());
      if (!info.ok() || info->curves_size() > 0) return;
      monta::v1::RunBenchmarkRequest request;
      request.add_nodes(node);
      (void)self->coordinator_->Schedule(request, absl::Now());
    };
  }
  s->gateway_ = std::make_unique<api::AgentGatewayService>(
      s->registry_.get(), s->coordinator_.get(), std::move(on_registered));
  s->planner_ = std::make_unique<api::PlannerService>(
      s->registry_.get(), s->coordinator_.get(), s->planner_metrics_.get(),
      s->store_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(s->options_.grpc_address,
                           grpc::InsecureServerCredentials(), &s->grpc_port_);
  builder.RegisterService(s->gateway_.get());
  builder.RegisterService(s->planner_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<RpcMetricsInterceptorFactory>(*s->metrics_, "planner"));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "grpc address ", s->options_.grpc_address, ": cannot listen"));
  }
  if (!s->options_.webhook_address.empty()) {
    admission::AdmissionOptions admission_options;
    if (s->options_.webhook_log_decisions) {
      admission_options.log = [](const std::string& line) {
        std::cerr << "monta-planner: " << line << std::endl;
      };
    }
    s->admission_ = std::make_unique<admission::AdmissionHandler>(
        admission::RegistryDecider(s->registry_.get(),
                                   s->planner_metrics_.get(), s->store_.get()),
        s->planner_metrics_.get(), std::move(admission_options));
    admission::WebhookOptions webhook_options;
    webhook_options.address = s->options_.webhook_address;
    webhook_options.tls_cert_file = s->options_.tls_cert_file;
    webhook_options.tls_key_file = s->options_.tls_key_file;
    auto webhook =
        admission::WebhookServer::Start(webhook_options, s->admission_.get());
    if (!webhook.ok()) return webhook.status();
    s->webhook_ = *std::move(webhook);
  }
  s->maintenance_ = std::thread([self] { self->Maintain(); });
  return s;
}

void PlannerServer::Maintain() {
  // Once a second: fail benchmark tasks past their deadline, and the tasks of
  // nodes whose lease expired (their agent died mid-run).
  absl::Time last_periodic = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    const absl::Time now = absl::Now();
    coordinator_->ExpireOverdue(now);
    if (options_.bench_interval > absl::ZeroDuration() &&
        now - last_periodic >= options_.bench_interval) {
      last_periodic = now;
      SchedulePeriodicBenchmarks(now);
    }
    for (const auto& node : registry_->List(now, /*include_gone=*/false)) {
      if (node.state() == monta::v1::NODE_STATE_STALE) {
        coordinator_->FailTasksOfNode(node.name(), "lost its lease", now);
      }
    }
  }
}

void PlannerServer::SchedulePeriodicBenchmarks(absl::Time now) {
  std::vector<std::string> idle;
  for (const auto& node : registry_->List(now, /*include_gone=*/false)) {
    if (node.state() == monta::v1::NODE_STATE_ALIVE &&
        !coordinator_->Busy(node.name())) {
      idle.push_back(node.name());
    }
  }
  // Pairs first: they bound most decisions (the slowest pair of a job), and a
  // larger group is measured on request (RunBenchmark with its nodes).
  for (size_t i = 0; i + 1 < idle.size(); i += 2) {
    monta::v1::RunBenchmarkRequest pair;
    pair.add_nodes(idle[i]);
    pair.add_nodes(idle[i + 1]);
    (void)coordinator_->Schedule(pair, now);
  }
  for (const std::string& node : idle) {
    monta::v1::RunBenchmarkRequest single;
    single.add_nodes(node);
    (void)coordinator_->Schedule(single, now);
  }
}

void PlannerServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_.Notify();
  if (webhook_ != nullptr) webhook_->Shutdown();
  coordinator_->Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  if (maintenance_.joinable()) maintenance_.join();
}

PlannerServer::~PlannerServer() { Shutdown(); }

}  // namespace monta
