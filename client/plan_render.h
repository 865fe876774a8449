// montactl plan's renderer: a StrategyReply as the text `montactl plan`
// prints (traffic, the expert layout priced, the candidates table, the
// choice, the evidence). docs/MODEL.md quotes it, and tests/model_doc_test
// checks the quotes against it, digit for digit.
#ifndef MONTA_CLIENT_PLAN_RENDER_H_
#define MONTA_CLIENT_PLAN_RENDER_H_

#include <string>

#include "proto/monta/v1/strategy.pb.h"

namespace monta::client {

// The whole plan as montactl prints it.
std::string PlanText(const monta::v1::StrategyReply& reply);

// Where the numbers came from: curves, verify runs, calibration, notes.
std::string EvidenceText(const monta::v1::Evidence& evidence);

}  // namespace monta::client

#endif  // MONTA_CLIENT_PLAN_RENDER_H_
