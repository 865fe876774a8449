#include "proto/monta/v1/contract_snapshot.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace monta::contract {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;

std::string FieldLine(const FieldDescriptor& f) {
  std::string type = f.type_name();
  if (f.message_type() != nullptr) {
    absl::StrAppend(&type, " ", f.message_type()->full_name());
  } else if (f.enum_type() != nullptr) {
    absl::StrAppend(&type, " ", f.enum_type()->full_name());
  }
  return absl::StrCat("field ", f.full_name(), " = ", f.number(), " ", type,
                      " ", f.is_repeated() ? "repeated" : "optional");
}

std::string RpcLine(const MethodDescriptor& m) {
  return absl::StrCat(
      "rpc ", m.full_name(), " ", m.client_streaming() ? "stream " : "",
      m.input_type()->full_name(), " -> ",
      m.server_streaming() ? "stream " : "", m.output_type()->full_name());
}

// Reserved numbers one per line (ranges in the contract are small); `end` is
// exclusive.
void AddReserved(const std::string& type, int start, int end,
                 std::vector<std::string>* out) {
  for (int n = start; n < end; ++n) {
    out->push_back(absl::StrCat("reserved ", type, " ", n));
  }
}

void AddEnum(const EnumDescriptor& e, std::vector<std::string>* out) {
  for (int i = 0; i < e.value_count(); ++i) {
    out->push_back(absl::StrCat("value ", e.full_name(), ".",
                                e.value(i)->name(), " = ",
                                e.value(i)->number()));
  }
  for (int i = 0; i < e.reserved_range_count(); ++i) {
    // Enum reserved ranges include their end.
    AddReserved(e.full_name(), e.reserved_range(i)->start,
                e.reserved_range(i)->end + 1, out);
  }
  for (int i = 0; i < e.reserved_name_count(); ++i) {
    out->push_back(absl::StrCat("reserved ", e.full_name(), " \"",
                                e.reserved_name(i), "\""));
  }
}

// A proto3 `optional` scalar: readers tell "not set" from the default, so
// dropping the keyword would change what an unset field means.
std::string PresenceLine(const FieldDescriptor& f) {
  return absl::StrCat("presence ", f.full_name(), " = ", f.number());
}

void AddMessage(const Descriptor& d, std::vector<std::string>* out) {
  for (int i = 0; i < d.field_count(); ++i) {
    out->push_back(FieldLine(*d.field(i)));
    if (d.field(i)->has_optional_keyword() &&
        d.file()->syntax() == google::protobuf::FileDescriptor::SYNTAX_PROTO3) {
      out->push_back(PresenceLine(*d.field(i)));
    }
  }
  for (int i = 0; i < d.reserved_range_count(); ++i) {
    AddReserved(d.full_name(), d.reserved_range(i)->start,
                d.reserved_range(i)->end, out);
  }
  for (int i = 0; i < d.reserved_name_count(); ++i) {
    out->push_back(absl::StrCat("reserved ", d.full_name(), " \"",
                                d.reserved_name(i), "\""));
  }
  for (int i = 0; i < d.enum_type_count(); ++i) AddEnum(*d.enum_type(i), out);
  for (int i = 0; i < d.nested_type_count(); ++i) {
    AddMessage(*d.nested_type(i), out);
  }
}

// "monta.v1.Candidate.kind" -> ("monta.v1.Candidate", "kind").
std::pair<std::string, std::string> SplitLast(absl::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == absl::string_view::npos) return {"", std::string(name)};
  return {std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
}

class Checker {
 public:
  explicit Checker(const std::vector<const FileDescriptor*>& files)
      : pool_(files.empty() ? DescriptorPool::generated_pool()
                            : files.front()->pool()) {
    for (const std::string& line : SnapshotLines(files)) current_.insert(line);
  }

  // Empty when `line` still holds, else why not.
  std::string Check(const std::string& line) const {
    if (current_.count(line)) return "";
    const std::vector<std::string> t = absl::StrSplit(line, ' ');
    if (t.size() >= 4 && t[0] == "field" && t[2] == "=") return Field(line, t);
    if (t.size() == 4 && t[0] == "presence" && t[2] == "=") {
      return Presence(line, t);
    }
    if (t.size() == 4 && t[0] == "value" && t[2] == "=") return Value(line, t);
    if (t.size() == 3 && t[0] == "reserved") return Reserved(line, t);
    if (t[0] == "rpc") {
      return absl::StrCat(line,
                          ": the method was removed or its types "
                          "changed; add a new method instead");
    }
    return absl::StrCat(line, ": not a snapshot line");
  }

 private:
  std::string Field(const std::string& line,
                    const std::vector<std::string>& t) const {
    const auto [message, name] = SplitLast(t[1]);
    int number = 0;
    if (!absl::SimpleAtoi(t[3], &number)) return line + ": bad number";
    const Descriptor* d = pool_->FindMessageTypeByName(message);
    if (d == nullptr)
      return absl::StrCat(line, ": message ", message, " was removed");
    if (const FieldDescriptor* now = d->FindFieldByNumber(number)) {
      return absl::StrCat(t[1], " = ", number, " changed meaning: now \"",
                          FieldLine(*now),
                          "\"; never reuse a field number, "
                          "add a new field instead");
    }
    if (!d->IsReservedNumber(number) || !d->IsReservedName(name)) {
      return absl::StrCat(t[1], " = ", number,
                          " was removed without "
                          "reserving it: add `reserved ",
                          number, "; reserved \"", name, "\";` to ", message);
    }
    return "";
  }

  // A field that had presence keeps it (or is gone, its number reserved:
  // the field's own line says so).
  std::string Presence(const std::string& line,
                       const std::vector<std::string>& t) const {
    const auto [message, name] = SplitLast(t[1]);
    int number = 0;
    if (!absl::SimpleAtoi(t[3], &number)) return line + ": bad number";
    const Descriptor* d = pool_->FindMessageTypeByName(message);
    const FieldDescriptor* now =
        d == nullptr ? nullptr : d->FindFieldByNumber(number);
    if (now == nullptr || now->name() != name) return "";
    return absl::StrCat(t[1], " = ", number,
                        " lost its presence: keep `optional`, so that an "
                        "unset field still reads as not given");
  }

  std::string Value(const std::string& line,
                    const std::vector<std::string>& t) const {
    const auto [type, name] = SplitLast(t[1]);
    int number = 0;
    if (!absl::SimpleAtoi(t[3], &number)) return line + ": bad number";
    const EnumDescriptor* e = pool_->FindEnumTypeByName(type);
    if (e == nullptr)
      return absl::StrCat(line, ": enum ", type, " was removed");
    if (const auto* now = e->FindValueByNumber(number)) {
      return absl::StrCat(t[1], " = ", number, " changed meaning: now ",
                          now->name(), "; add a new value instead");
    }
    if (!e->IsReservedNumber(number) || !e->IsReservedName(name)) {
      return absl::StrCat(t[1], " = ", number,
                          " was removed without "
                          "reserving it: add `reserved ",
                          number, "; reserved \"", name, "\";` to ", type);
    }
    return "";
  }

  std::string Reserved(const std::string& line,
                       const std::vector<std::string>& t) const {
    const Descriptor* d = pool_->FindMessageTypeByName(t[1]);
    const EnumDescriptor* e = pool_->FindEnumTypeByName(t[1]);
    if (d == nullptr && e == nullptr)
      return absl::StrCat(line, ": ", t[1], " was removed");
    absl::string_view what = t[2];
    int number = 0;
    bool still = false;
    if (absl::ConsumePrefix(&what, "\"") && absl::ConsumeSuffix(&what, "\"")) {
      still = d != nullptr ? d->IsReservedName(std::string(what))
                           : e->IsReservedName(std::string(what));
    } else if (absl::SimpleAtoi(what, &number)) {
      still = d != nullptr ? d->IsReservedNumber(number)
                           : e->IsReservedNumber(number);
    }
    return still ? ""
                 : absl::StrCat(line, ": a reservation was dropped; keep it");
  }

  const DescriptorPool* pool_;
  std::set<std::string> current_;
};

}  // namespace

std::vector<const FileDescriptor*> ContractFiles(
    const std::vector<std::string>& proto_paths) {
  std::vector<const FileDescriptor*> files;
  for (const std::string& path : proto_paths) {
    const FileDescriptor* f =
        DescriptorPool::generated_pool()->FindFileByName(path);
    if (f != nullptr) files.push_back(f);
  }
  std::sort(files.begin(), files.end(),
            [](const FileDescriptor* a, const FileDescriptor* b) {
              return a->name() < b->name();
            });
  return files;
}

std::vector<std::string> SnapshotLines(
    const std::vector<const FileDescriptor*>& files) {
  std::vector<std::string> out;
  for (const FileDescriptor* f : files) {
    for (int i = 0; i < f->enum_type_count(); ++i)
      AddEnum(*f->enum_type(i), &out);
    for (int i = 0; i < f->message_type_count(); ++i) {
      AddMessage(*f->message_type(i), &out);
    }
    for (int i = 0; i < f->service_count(); ++i) {
      const ServiceDescriptor& s = *f->service(i);
      for (int j = 0; j < s.method_count(); ++j)
        out.push_back(RpcLine(*s.method(j)));
    }
  }
  return out;
}

std::vector<std::string> CheckSnapshot(
    const std::vector<std::string>& frozen,
    const std::vector<const FileDescriptor*>& files) {
  Checker checker(files);
  std::vector<std::string> problems;
  for (const std::string& line : frozen) {
    if (line.empty() || line[0] == '#') continue;
    std::string why = checker.Check(line);
    if (!why.empty()) problems.push_back(std::move(why));
  }
  return problems;
}

}  // namespace monta::contract
