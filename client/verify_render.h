// montactl verify's renderers: the scored candidates as a table and as an SVG
// picture of time against K per strategy (predictions as lines, measurements
// as points), since a K sweep reads faster as a picture than as a table.
#ifndef MONTA_CLIENT_VERIFY_RENDER_H_
#define MONTA_CLIENT_VERIFY_RENDER_H_

#include <string>

#include "proto/monta/v1/planner.pb.h"

namespace monta::client {

// The candidates table and the summary lines (regret, errors, calibration).
std::string VerifyTable(const monta::v1::VerifyReply& reply);

// A self-contained SVG document (no scripts, no external references).
std::string VerifySvg(const monta::v1::VerifyReply& reply);

}  // namespace monta::client

#endif  // MONTA_CLIENT_VERIFY_RENDER_H_
