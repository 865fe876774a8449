// Inside the etcd client: one member's channel and stubs, the per-request
// context, and conversions between etcd's messages and server/etcd/kv.h. Not
// for use outside server/etcd.
#ifndef MONTA_SERVER_ETCD_INTERNAL_H_
#define MONTA_SERVER_ETCD_INTERNAL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/api/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/api/etcdserverpb/rpc.pb.h"
#include "etcd/api/mvccpb/kv.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "server/etcd/kv.h"

namespace monta::etcd {

// One etcd member: a channel of its own (its own subchannel, so clients do
// not share connections) and the stubs on it.
struct Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
};

// Every request and stream: `hasleader: true`, so a member without a leader
// refuses; and, when `timeout` is positive, a deadline that far from now.
void PrepareContext(grpc::ClientContext& context, absl::Duration timeout);

// etcd's answer as a Status with gRPC's code; its message prefixed with the
// call and the endpoint ("etcd Put at 127.0.0.1:2379: ...").
absl::Status CallStatus(const grpc::Status& status, absl::string_view what,
                        absl::string_view endpoint);

// True for etcd's "no leader" refusal: the request was not applied.
bool IsNoLeader(const absl::Status& status);

KeyValue FromProto(const mvccpb::KeyValue& kv);
RangeResult FromProto(const etcdserverpb::RangeResponse& response);
PutResult FromProto(const etcdserverpb::PutResponse& response);
DeleteResult FromProto(const etcdserverpb::DeleteRangeResponse& response);
Event FromProto(const mvccpb::Event& event);

void ToProto(const RangeRequest& request, etcdserverpb::RangeRequest* out);
void ToProto(const Compare& compare, etcdserverpb::Compare* out);
void ToProto(const Op& op, etcdserverpb::RequestOp* out);
void ToProto(const TxnRequest& txn, etcdserverpb::TxnRequest* out);
TxnResult FromProto(const etcdserverpb::TxnResponse& response);

}  // namespace monta::etcd

#endif  // MONTA_SERVER_ETCD_INTERNAL_H_
