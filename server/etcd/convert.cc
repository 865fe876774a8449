// etcd's messages <-> server/etcd/kv.h, and the per-request context.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "server/etcd/internal.h"

namespace monta::etcd {

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Compare Compare::Version(std::string key, Result result, int64_t version) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kVersion;
  c.result = result;
  c.number = version;
  return c;
}

Compare Compare::CreateRevision(std::string key, Result result,
                                int64_t revision) {
  Compare c = Version(std::move(key), result, revision);
  c.target = Target::kCreateRevision;
  return c;
}

Compare Compare::ModRevision(std::string key, Result result, int64_t revision) {
  Compare c = Version(std::move(key), result, revision);
  c.target = Target::kModRevision;
  return c;
}

Compare Compare::Value(std::string key, Result result, std::string value) {
  Compare c = Version(std::move(key), result, 0);
  c.target = Target::kValue;
  c.value = std::move(value);
  return c;
}

Compare Compare::Lease(std::string key, Result result, int64_t lease) {
  Compare c = Version(std::move(key), result, lease);
  c.target = Target::kLease;
  return c;
}

Op Op::Get(std::string key, std::string range_end) {
  Op op;
  op.kind = Kind::kRange;
  op.key = std::move(key);
  op.range_end = std::move(range_end);
  return op;
}

Op Op::Put(std::string key, std::string value, int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

Op Op::Delete(std::string key, std::string range_end) {
  Op op = Get(std::move(key), std::move(range_end));
  op.kind = Kind::kDelete;
  return op;
}

void PrepareContext(grpc::ClientContext& context, absl::Duration timeout) {
  // etcd's rpctypes.MetadataRequireLeaderKey / MetadataHasLeader.
  context.AddMetadata("hasleader", "true");
  if (timeout > absl::ZeroDuration()) {
    context.set_deadline(GrpcDeadline(timeout));
  }
}

absl::Status CallStatus(const grpc::Status& status, absl::string_view what,
                        absl::string_view endpoint) {
  if (status.ok()) return absl::OkStatus();
  absl::Status s = FromGrpc(status);
  return absl::Status(s.code(), absl::StrCat("etcd ", what, " at ", endpoint,
                                             ": ", s.message()));
}

bool IsNoLeader(const absl::Status& status) {
  return absl::IsUnavailable(status) &&
         absl::StrContains(status.message(), "etcdserver: no leader");
}

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

RangeResult FromProto(const etcdserverpb::RangeResponse& response) {
  RangeResult out;
  out.kvs.reserve(response.kvs_size());
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    out.kvs.push_back(FromProto(kv));
  }
  out.more = response.more();
  out.count = response.count();
  out.revision = response.header().revision();
  return out;
}

PutResult FromProto(const etcdserverpb::PutResponse& response) {
  PutResult out;
  out.revision = response.header().revision();
  out.has_prev = response.has_prev_kv();
  if (out.has_prev) out.prev = FromProto(response.prev_kv());
  return out;
}

DeleteResult FromProto(const etcdserverpb::DeleteRangeResponse& response) {
  DeleteResult out;
  out.revision = response.header().revision();
  out.deleted = response.deleted();
  for (const mvccpb::KeyValue& kv : response.prev_kvs()) {
    out.prev.push_back(FromProto(kv));
  }
  return out;
}

Event FromProto(const mvccpb::Event& event) {
  Event out;
  out.type = event.type() == mvccpb::Event::DELETE ? Event::Type::kDelete
                                                   : Event::Type::kPut;
  out.kv = FromProto(event.kv());
  out.has_prev = event.has_prev_kv();
  if (out.has_prev) out.prev = FromProto(event.prev_kv());
  return out;
}

void ToProto(const RangeRequest& request, etcdserverpb::RangeRequest* out) {
  out->set_key(request.key);
  out->set_range_end(request.range_end);
  out->set_revision(request.revision);
  out->set_limit(request.limit);
  out->set_keys_only(request.keys_only);
  out->set_count_only(request.count_only);
  out->set_serializable(request.serializable);
}

void ToProto(const Compare& compare, etcdserverpb::Compare* out) {
  using P = etcdserverpb::Compare;
  out->set_key(compare.key);
  out->set_range_end(compare.range_end);
  switch (compare.result) {
    case Compare::Result::kEqual:
      out->set_result(P::EQUAL);
      break;
    case Compare::Result::kGreater:
      out->set_result(P::GREATER);
      break;
    case Compare::Result::kLess:
      out->set_result(P::LESS);
      break;
    case Compare::Result::kNotEqual:
      out->set_result(P::NOT_EQUAL);
      break;
  }
  switch (compare.target) {
    case Compare::Target::kVersion:
      out->set_target(P::VERSION);
      out->set_version(compare.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(P::CREATE);
      out->set_create_revision(compare.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(P::MOD);
      out->set_mod_revision(compare.number);
      break;
    case Compare::Target::kValue:
      out->set_target(P::VALUE);
      out->set_value(compare.value);
      break;
    case Compare::Target::kLease:
      out->set_target(P::LEASE);
      out->set_lease(compare.number);
      break;
  }
}

void ToProto(const Op& op, etcdserverpb::RequestOp* out) {
  switch (op.kind) {
    case Op::Kind::kRange: {
      RangeRequest range;
      range.key = op.key;
      range.range_end = op.range_end;
      range.limit = op.limit;
      ToProto(range, out->mutable_request_range());
      break;
    }
    case Op::Kind::kPut: {
      etcdserverpb::PutRequest* put = out->mutable_request_put();
      put->set_key(op.key);
      put->set_value(op.value);
      put->set_lease(op.lease);
      put->set_prev_kv(op.prev_kv);
      break;
    }
    case Op::Kind::kDelete: {
      etcdserverpb::DeleteRangeRequest* del =
          out->mutable_request_delete_range();
      del->set_key(op.key);
      del->set_range_end(op.range_end);
      del->set_prev_kv(op.prev_kv);
      break;
    }
  }
}

void ToProto(const TxnRequest& txn, etcdserverpb::TxnRequest* out) {
  for (const Compare& c : txn.compares) ToProto(c, out->add_compare());
  for (const Op& op : txn.success) ToProto(op, out->add_success());
  for (const Op& op : txn.failure) ToProto(op, out->add_failure());
}

TxnResult FromProto(const etcdserverpb::TxnResponse& response) {
  TxnResult out;
  out.succeeded = response.succeeded();
  out.revision = response.header().revision();
  for (const etcdserverpb::ResponseOp& op : response.responses()) {
    OpResult result;
    switch (op.response_case()) {
      case etcdserverpb::ResponseOp::kResponsePut:
        result.kind = Op::Kind::kPut;
        result.put = FromProto(op.response_put());
        break;
      case etcdserverpb::ResponseOp::kResponseDeleteRange:
        result.kind = Op::Kind::kDelete;
        result.del = FromProto(op.response_delete_range());
        break;
      default:
        result.kind = Op::Kind::kRange;
        result.range = FromProto(op.response_range());
        break;
    }
    out.results.push_back(std::move(result));
  }
  return out;
}

}  // namespace monta::etcd
