#include "common/job_file.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace monta {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

absl::Status Error(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path.empty() ? "job file" : CutMessage(path), ": ", what));
}

std::string Show(const json& v) {
  // YAML strings may hold invalid UTF-8, which dump() would throw on.
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// A job file is a few levels deep and a few dozen values wide. yaml-cpp
// resolves an alias by sharing the anchored node, so an alias inside its own
// anchor ("&a [*a]") is an endless tree and aliases of aliases ("billion
// laughs") an exponential one: these bounds end the walk with an error instead
// of overflowing the stack or filling memory.
constexpr int kMaxYamlDepth = 32;
constexpr int kMaxYamlValues = 100000;

// YAML scalars stay strings here; the proto field's type decides how to read
// them, so `hidden_size: 8192` and `hidden_size: "8192"` mean the same.
// `values_left` counts down the values converted so far.
absl::StatusOr<json> YamlToJson(const YAML::Node& node, const std::string& path,
                                int depth, int& values_left) {
  if (depth > kMaxYamlDepth) {
    return Error(path, absl::StrCat("nested deeper than ", kMaxYamlDepth,
                                    " levels (an alias inside its anchor?)"));
  }
  if (--values_left < 0) {
    return Error(path, absl::StrCat("more than ", kMaxYamlValues,
                                    " values (aliases expanding?)"));
  }
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      return json(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        absl::StatusOr<json> v = YamlToJson(
            node[i], absl::StrCat(path, "[", i, "]"), depth + 1, values_left);
        if (!v.ok()) return v.status();
        out.push_back(*std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar())
          return Error(path, "keys must be plain names");
        const std::string key = kv.first.Scalar();
        const std::string child =
            path.empty() ? key : absl::StrCat(path, ".", key);
        if (out.contains(key)) return Error(child, "duplicate key");
        absl::StatusOr<json> v =
            YamlToJson(kv.second, child, depth + 1, values_left);
        if (!v.ok()) return v.status();
        out[key] = *std::move(v);
      }
      return out;
    }
  }
  return Error(path, "unsupported YAML node");
}

absl::StatusOr<int64_t> ReadInt(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(path, absl::StrCat("integer too large, got ", Show(v)));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  if (v.is_string()) {
    int64_t out = 0;
    if (absl::SimpleAtoi(v.get<std::string>(), &out)) return out;
  }
  return Error(path, absl::StrCat("expected an integer, got ", Show(v)));
}

absl::StatusOr<double> ReadDouble(const json& v, const std::string& path) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    double out = 0;
    if (absl::SimpleAtod(v.get<std::string>(), &out) && std::isfinite(out)) {
      return out;
    }
  }
  return Error(path, absl::StrCat("expected a number, got ", Show(v)));
}

absl::StatusOr<bool> ReadBool(const json& v, const std::string& path) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    const std::string s = absl::AsciiStrToLower(v.get<std::string>());
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  return Error(path, absl::StrCat("expected true or false, got ", Show(v)));
}

absl::StatusOr<const EnumValueDescriptor*> ReadEnum(const json& v,
                                                    const FieldDescriptor* fd,
                                                    const std::string& path) {
  const auto* type = fd->enum_type();
  std::vector<std::string> names;
  if (v.is_string()) {
    const std::string want = absl::AsciiStrToUpper(v.get<std::string>());
    // Short names drop the common prefix: STRATEGY_KIND_FLAT -> flat.
    for (int i = 0; i < type->value_count(); ++i) {
      const EnumValueDescriptor* ev = type->value(i);
      if (ev->number() == 0) continue;  // UNSPECIFIED is never meant
      const std::string& full = ev->name();
      if (full == want || absl::EndsWith(full, absl::StrCat("_", want))) {
        return ev;
      }
      names.push_back(absl::AsciiStrToLower(full));
    }
  } else if (v.is_number_integer()) {
    const EnumValueDescriptor* ev = type->FindValueByNumber(v.get<int>());
    if (ev != nullptr && ev->number() != 0) return ev;
  }
  return Error(path,
               absl::StrCat("expected one of ", absl::StrJoin(names, ", "),
                            "; got ", Show(v)));
}

absl::Status Fill(const json& j, Message* msg, const std::string& path);

absl::Status SetOne(const json& v, Message* msg, const FieldDescriptor* fd,
                    const std::string& path) {
  const Reflection* r = msg->GetReflection();
  const bool rep = fd->is_repeated();
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      absl::StatusOr<int64_t> i = ReadInt(v, path);
      if (!i.ok()) return i.status();
      const int64_t x = *i;
      const auto type = fd->cpp_type();
      const bool is32 = type == FieldDescriptor::CPPTYPE_INT32 ||
                        type == FieldDescriptor::CPPTYPE_UINT32;
      const bool is_unsigned = type == FieldDescriptor::CPPTYPE_UINT32 ||
                               type == FieldDescriptor::CPPTYPE_UINT64;
      if ((is32 && (x > std::numeric_limits<int32_t>::max() ||
                    x < std::numeric_limits<int32_t>::min())) ||
          (is_unsigned && x < 0)) {
        return Error(path,
                     absl::StrCat("out of range for this field, got ", x));
      }
      switch (type) {
        case FieldDescriptor::CPPTYPE_INT32:
          rep ? r->AddInt32(msg, fd, x) : r->SetInt32(msg, fd, x);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          rep ? r->AddUInt32(msg, fd, x) : r->SetUInt32(msg, fd, x);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          rep ? r->AddUInt64(msg, fd, x) : r->SetUInt64(msg, fd, x);
          break;
        default:
          rep ? r->AddInt64(msg, fd, x) : r->SetInt64(msg, fd, x);
          break;
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      absl::StatusOr<double> d = ReadDouble(v, path);
      if (!d.ok()) return d.status();
      if (fd->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        rep ? r->AddFloat(msg, fd, *d) : r->SetFloat(msg, fd, *d);
      } else {
        rep ? r->AddDouble(msg, fd, *d) : r->SetDouble(msg, fd, *d);
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      absl::StatusOr<bool> b = ReadBool(v, path);
      if (!b.ok()) return b.status();
      rep ? r->AddBool(msg, fd, *b) : r->SetBool(msg, fd, *b);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (!v.is_string()) {
        return Error(path, absl::StrCat("expected a string, got ", Show(v)));
      }
      rep ? r->AddString(msg, fd, v.get<std::string>())
          : r->SetString(msg, fd, v.get<std::string>());
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      absl::StatusOr<const EnumValueDescriptor*> e = ReadEnum(v, fd, path);
      if (!e.ok()) return e.status();
      rep ? r->AddEnum(msg, fd, *e) : r->SetEnum(msg, fd, *e);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return Fill(v, rep ? r->AddMessage(msg, fd) : r->MutableMessage(msg, fd),
                  path);
  }
  return Error(path, "unsupported field type");
}

absl::Status Fill(const json& j, Message* msg, const std::string& path) {
  if (!j.is_object()) {
    return Error(path, absl::StrCat("expected a mapping of ",
                                    msg->GetDescriptor()->name(), " fields"));
  }
  const Descriptor* desc = msg->GetDescriptor();
  for (const auto& [key, value] : j.items()) {
    const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
    const FieldDescriptor* fd = desc->FindFieldByName(key);
    if (fd == nullptr) {
      std::vector<std::string> known;
      for (int i = 0; i < desc->field_count(); ++i) {
        known.push_back(desc->field(i)->name());
      }
      return Error(child, absl::StrCat("unknown key; expected one of: ",
                                       absl::StrJoin(known, ", ")));
    }
    if (value.is_null()) continue;  // "key:" with nothing = unset
    if (fd->is_repeated()) {
      if (!value.is_array()) return Error(child, "expected a list");
      for (size_t i = 0; i < value.size(); ++i) {
        absl::Status s =
            SetOne(value[i], msg, fd, absl::StrCat(child, "[", i, "]"));
        if (!s.ok()) return s;
      }
      continue;
    }
    absl::Status s = SetOne(value, msg, fd, child);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ParseText(absl::string_view text, JobFileFormat format) {
  if (format == JobFileFormat::kAuto) {
    const absl::string_view body = absl::StripLeadingAsciiWhitespace(text);
    format = absl::StartsWith(body, "{") ? JobFileFormat::kJson
                                         : JobFileFormat::kYaml;
  }
  if (format == JobFileFormat::kJson) {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("job file: invalid JSON: ", CutMessage(e.what())));
    }
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("job file: invalid YAML at line ", e.mark.line + 1, ": ",
                     CutMessage(e.msg)));
  }
  int values_left = kMaxYamlValues;
  return YamlToJson(root, "", 0, values_left);
}

}  // namespace

absl::StatusOr<monta::v1::StrategyRequest> ParseJobFile(absl::string_view text,
                                                        JobFileFormat format) {
  absl::StatusOr<json> tree = ParseText(text, format);
  if (!tree.ok()) return tree.status();
  if (tree->is_null()) return Error("", "empty");
  monta::v1::StrategyRequest request;
  if (absl::Status s = Fill(*tree, &request, ""); !s.ok()) return s;
  if (!request.has_job()) return Error("job", "required");
  return request;
}

absl::StatusOr<monta::v1::StrategyRequest> LoadJobFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("job file \"", path, "\": cannot be read"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  JobFileFormat format = JobFileFormat::kAuto;
  if (absl::EndsWith(path, ".json")) format = JobFileFormat::kJson;
  if (absl::EndsWith(path, ".yaml") || absl::EndsWith(path, ".yml")) {
    format = JobFileFormat::kYaml;
  }
  absl::StatusOr<monta::v1::StrategyRequest> request =
      ParseJobFile(buffer.str(), format);
  if (!request.ok()) {
    return absl::Status(request.status().code(),
                        absl::StrCat(path, ": ", request.status().message()));
  }
  return request;
}

}  // namespace monta
