// pybind11 as the bindings of commbench._cuda use it. The extension needs nothing else of torch: its
// buffers come from its own allocations (DeviceMemory) or any object the buffer caster reads.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
