// The MoNTA paper's job (examples/monta-paper-2x70b.yaml) as the pure model's
// MoeJobShape, for the model's tests and perf/model_benchmark, which stay free
// of protobuf and of the job-file parser. The one copy for those tests: the
// other tests read the example itself (tests/testing/paper_job.h), and
// server/planning/request_validation_test checks that this matches it.
#ifndef MONTA_SERVER_MODEL_PAPER_JOB_SHAPE_H_
#define MONTA_SERVER_MODEL_PAPER_JOB_SHAPE_H_

#include "server/model/traffic.h"

namespace monta::model {

// Two experts of a 70B-class model (hidden 8192, 80 layers), top-1 with
// capacity factor 1, 8K tokens, on 16 ranks: TP=8, EP=2, DP=2.
inline MoeJobShape PaperJobShape() {
  MoeJobShape j;
  j.hidden_size = 8192;
  j.num_experts = 2;
  j.top_k = 1;
  j.capacity_factor = 1.0;
  j.micro_batch_size = 1;
  j.sequence_length = 8192;
  j.bytes_per_element = 2;
  j.moe_layers = 80;
  j.microbatches_per_step = 1;
  j.world_size = 16;
  j.tensor_parallel_size = 8;
  j.expert_parallel_size = 2;
  j.pipeline_parallel_size = 1;
  j.data_parallel_size = 2;
  j.expert_layout = ExpertLayout::kTensorParallel;
  j.alltoall_share_ratio = 0.3;
  return j;
}

}  // namespace monta::model

#endif  // MONTA_SERVER_MODEL_PAPER_JOB_SHAPE_H_
