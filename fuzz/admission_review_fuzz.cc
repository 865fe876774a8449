// AdmissionReview bodies (server/admission/admission_handler): what the API
// server, or anyone reaching the webhook port, posts to /mutate and /validate.
// Any body must get a 400 or a 200 carrying a well-formed AdmissionReview
// response for the same uid; a 500 means an exception escaped the review
// (Handle's last resort, "only a bug gets here"). A JSONPatch in a /mutate
// answer must apply cleanly to the object it was computed for.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "fuzz/fixed_cluster.h"
#include "nlohmann/json.hpp"
#include "server/admission/admission_handler.h"

namespace {

using monta::admission::AdmissionHandler;
using monta::admission::HttpReply;
using monta::admission::Operation;
using nlohmann::json;

void Check(bool condition) {
  if (!condition) std::abort();
}

const AdmissionHandler& Handler() {
  static const AdmissionHandler* const handler = [] {
    monta::admission::AdmissionOptions options;
    options.new_decision_id = [] { return std::string("fuzz-decision"); };
    options.now = [] { return absl::FromUnixSeconds(1'700'000'000); };
    return new AdmissionHandler(
        monta::admission::RegistryDecider(&monta::fuzz::FixedCluster(),
                                          /*metrics=*/nullptr),
        /*metrics=*/nullptr, options);
  }();
  return *handler;
}

// The patch decodes, parses and applies to request.object.
void CheckPatch(const json& review, const json& response) {
  std::string patch_text;
  Check(response.at("patch").is_string());
  Check(absl::Base64Unescape(response.at("patch").get<std::string>(),
                             &patch_text));
  const json patch = json::parse(patch_text);
  Check(patch.is_array());
  (void)review.at("request").at("object").patch(patch);
}

void CheckReply(absl::string_view body, const HttpReply& reply) {
  Check(reply.status == 200 || reply.status == 400);
  Check(!reply.body.empty());
  if (reply.status != 200) return;
  try {
    const json review = json::parse(body.begin(), body.end());
    const json answer = json::parse(reply.body);
    const json& response = answer.at("response");
    Check(response.at("uid") == review.at("request").at("uid"));
    Check(response.at("allowed").is_boolean());
    if (response.contains("patch")) CheckPatch(review, response);
  } catch (const json::exception&) {
    std::abort();  // a 200 whose review, answer or patch is not well-formed
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  for (Operation op : {Operation::kMutate, Operation::kValidate}) {
    CheckReply(body, Handler().Handle(op, body));
  }
  return 0;
}
