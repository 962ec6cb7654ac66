// Local copies within one process: peer (copy engine or SM kernel, one or both directions),
// host<->device (pinned or pageable) and GPU -> pinned host -> GPU staging. Each is an object that
// owns its buffers, so the timer can be called again and again without reallocating, and whose
// wrong() verifies one untimed copy with a byte pattern: a path that reports plausible GB/s over
// corrupted data (broken P2P behind an IOMMU, say) fails the run.
#pragma once

#include "python.h"

namespace commbench {

void bind_copies(pybind11::module& m);

}  // namespace commbench
