// Where the planner records what operators did to its state (montactl forget):
// who (the identity from their client certificate), what, to what, and when.
#ifndef MONTA_SERVER_STORE_AUDIT_LOG_H_
#define MONTA_SERVER_STORE_AUDIT_LOG_H_

#include <string>

#include "server/store/record_done.h"

namespace monta::store {

struct AuditEntry {
  // "operator alice" (server/api/authz Authorizer::Accountable: the
  // certificate's identity), or the peer's address under --insecure.
  std::string identity;
  std::string action;  // e.g. "forget_curves"
  std::string target;  // e.g. "task bench-17-3", "node node-b"
  std::string detail;  // what it changed, for people
};

class AuditLog {
 public:
  virtual ~AuditLog() = default;
  // Appends the entry, dated now; `stored` is told once whether it is stored
  // (record_done.h). Must not block: it runs on the RPC path.
  virtual void RecordAudit(const AuditEntry& entry, RecordDone stored) = 0;
};

}  // namespace monta::store

#endif  // MONTA_SERVER_STORE_AUDIT_LOG_H_
