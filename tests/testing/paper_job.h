// The MoNTA paper's job (arXiv 2411.00662: a 2x70B-class MoE on 2 A800 nodes x
// 8, TP=8, 8K tokens) as tests need it, read from its one copy in the
// repository, examples/monta-paper-2x70b.yaml, so that no test keeps a hand-
// written copy that drifts from the example or from the other tests. A test
// that needs a variant starts from this and changes only the fields it is
// about.
//
// Tests of the pure model (server/model, no protobuf) use the model-struct
// twin in server/model/paper_job_shape.h; request_validation_test checks that
// the two agree.
#ifndef MONTA_TESTS_TESTING_PAPER_JOB_H_
#define MONTA_TESTS_TESTING_PAPER_JOB_H_

#include <string>
#include <vector>

#include "proto/monta/v1/strategy.pb.h"

namespace monta::testing {

// Workspace-relative path of the example (data of //tests/testing:paper_job).
inline constexpr char kPaperJobFile[] = "examples/monta-paper-2x70b.yaml";

// The example parsed by the job-file parser. Aborts with the reason when the
// file is missing or does not parse: every test using it would be meaningless.
monta::v1::StrategyRequest PaperJobRequest();

// The same request as the compact JSON of a `monta.io/moe` annotation (proto
// field names, only the fields the example sets).
std::string PaperJobJson();

// The example shrunk to 2 GPUs on each of `nodes` (tp 2, dp 2, ep 2 for two
// nodes): a request the registered nodes' curves price.
monta::v1::StrategyRequest PaperJobOnNodes(
    const std::vector<std::string>& nodes);

}  // namespace monta::testing

#endif  // MONTA_TESTS_TESTING_PAPER_JOB_H_
