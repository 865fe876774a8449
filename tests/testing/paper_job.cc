#include "tests/testing/paper_job.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_file.h"
#include "google/protobuf/util/json_util.h"

namespace monta::testing {
namespace {

// Bazel runs a test in its runfiles tree, where workspace-relative paths
// resolve; TEST_SRCDIR makes that explicit for a test started elsewhere.
std::string PaperJobPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return kPaperJobFile;
  return std::string(srcdir) + "/" + workspace + "/" + kPaperJobFile;
}

}  // namespace

monta::v1::StrategyRequest PaperJobRequest() {
  static const monta::v1::StrategyRequest* const kRequest = [] {
    absl::StatusOr<monta::v1::StrategyRequest> request =
        monta::LoadJobFile(PaperJobPath());
    if (!request.ok()) {
      std::cerr << "paper_job: " << request.status()
                << " (the test target needs //tests/testing:paper_job, whose "
                   "data is the example)"
                << std::endl;
      std::abort();
    }
    return new monta::v1::StrategyRequest(*std::move(request));
  }();
  return *kRequest;
}

std::string PaperJobJson() {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(
      PaperJobRequest(), &json, options);
  if (!status.ok()) {
    std::cerr << "paper_job: " << status.ToString() << std::endl;
    std::abort();
  }
  return json;
}

monta::v1::StrategyRequest PaperJobOnNodes(
    const std::vector<std::string>& nodes) {
  monta::v1::StrategyRequest request = PaperJobRequest();
  monta::v1::MoeJob& job = *request.mutable_job();
  job.set_world_size(4);
  job.set_tensor_parallel_size(2);
  job.set_data_parallel_size(2);
  job.set_expert_parallel_size(2);
  request.mutable_placement()->clear_profile();
  request.mutable_placement()->set_nodes(0);
  for (const std::string& node : nodes) {
    request.mutable_placement()->add_node_names(node);
  }
  request.mutable_placement()->set_gpus_per_node(2);
  return request;
}

}  // namespace monta::testing
