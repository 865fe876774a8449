// Clean shutdown on SIGTERM/SIGINT for long-running binaries.
#ifndef MONTA_COMMON_SIGNALS_H_
#define MONTA_COMMON_SIGNALS_H_

#include <functional>

namespace monta {

// Blocks SIGTERM, SIGINT and SIGPIPE in the calling thread. Call first in
// main(), before any thread starts, so every thread inherits the mask and the
// signals are delivered only to WaitForTerminationSignal().
void BlockTerminationSignals();

// Waits until SIGTERM or SIGINT arrives and returns its number.
int WaitForTerminationSignal();

}  // namespace monta

#endif  // MONTA_COMMON_SIGNALS_H_
