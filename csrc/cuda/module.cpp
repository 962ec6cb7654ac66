// commbench._cuda: the Python bindings, and what needs no communicator: device queries, the
// reduction kernel on its own. Collectives run on a NCCL communicator (device_comm.h) that is
// created from a unique id broadcast by rank 0; our algorithms walk the same schedules (schedule.h)
// with the same executors (collectives.h) as the host path, over NCCL point-to-point, reducing with
// a kernel that calls the same functor (reduce.h). Iterations are timed with CUDA events, one pair
// per iteration. Local copies (copies.cpp) need no communicator.
#include <torch/extension.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <string>
#include <utility>

#include "commbench/reduce.h"
#include "copies.h"
#include "device_comm.h"
#include "errors.h"
#include "kernels.cuh"
#include "buffer_caster.h"

namespace commbench {
namespace {

// dst = op(dst, src) with the device reduction kernel, on the current device; lets tests compare the
// kernel (head, vector and tail paths) against torch on a single GPU.
void reduce_tensors(const Buffer& dst, const Buffer& src, int64_t op_code) {
  if (dst.on_host() || dst.device != src.device || dst.dtype != src.dtype || dst.count != src.count)
    throw std::invalid_argument("reduce_tensors: two contiguous buffers of one dtype and length on one GPU");
  const Where w{0, dst.device};
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  dispatch_dtype_op(dst.dtype, redop_from(op_code), [&](auto tag, auto functor) {
    using T = typename decltype(tag)::type;
    launch_reduce<T, decltype(functor)>(static_cast<T*>(dst.data), static_cast<const T*>(src.data), dst.count, nullptr);
    return 0;
  });
  cuda_check(cudaDeviceSynchronize(), "reduce kernel", w);
}

// Visible devices. No device at all is an answer (0); any other failure (a driver too old for this
// runtime, a broken installation) is raised with the runtime's own words.
int device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice) {
    cudaGetLastError();
    return 0;
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    int driver = 0;
    cudaDriverGetVersion(&driver);
    const std::string runtime = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
    throw std::runtime_error(std::string(cudaGetErrorString(rc)) + " (" +
                             (driver ? "the driver supports CUDA " + std::to_string(driver / 1000) + "." +
                                           std::to_string((driver % 1000) / 10)
                                     : std::string("no NVIDIA driver is loaded")) +
                             ", commbench was built for CUDA " + runtime + ")");
  }
  return n;
}

// (UUID as nvidia-smi prints it, PCI bus id) of a visible device: what tells two ranks that see
// different ordinals apart from two ranks on one physical GPU.
std::pair<std::string, std::string> device_identity(int64_t device) {
  const Where w{0, static_cast<int>(device)};
  cudaDeviceProp prop;
  cuda_check(cudaGetDeviceProperties(&prop, static_cast<int>(device)), "cudaGetDeviceProperties", w);
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  char bus[32] = {0};
  cuda_check(cudaDeviceGetPCIBusId(bus, sizeof(bus), static_cast<int>(device)), "cudaDeviceGetPCIBusId", w);
  return {uuid, bus};
}

std::string versions() {
  int runtime = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  return "CUDA runtime " + std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10) + ", NCCL " +
         std::to_string(nccl / 10000) + "." + std::to_string((nccl / 100) % 100) + "." + std::to_string(nccl % 100);
}

}  // namespace
}  // namespace commbench

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace commbench;
  m.doc() = "commbench GPU timed loops (NCCL, device ring/tree, copies)";
  py::register_exception<DeadlineExceeded>(m, "DeadlineExceeded", PyExc_TimeoutError);
  bind_collective_enums(m);
  py::class_<DeviceComm>(m, "DeviceComm")
      .def(py::init<const std::string&, int, int, int, double>(), py::arg("unique_id"), py::arg("rank"), py::arg("size"),
           py::arg("device"), py::arg("timeout_s"))
      .def("set_timeout", &DeviceComm::set_timeout, py::arg("seconds"))
      .def("barrier", &DeviceComm::barrier, py::call_guard<py::gil_scoped_release>())
      .def("collective_times", &DeviceComm::collective_times, py::arg("collective"), py::arg("algorithm"),
           py::arg("send"), py::arg("recv"), py::arg("op"), py::arg("root"), py::arg("iters"), py::arg("chunk_bytes"),
           py::arg("graph") = false, py::arg("agg") = 1, py::arg("delay_s") = 0.0, py::call_guard<py::gil_scoped_release>())
      .def("pingpong_times", &DeviceComm::pingpong_times, py::arg("send"), py::arg("recv"), py::arg("bytes"), py::arg("peer"),
           py::arg("iters"), py::call_guard<py::gil_scoped_release>())
      .def("bandwidth_times", &DeviceComm::bandwidth_times, py::arg("send"), py::arg("recv"), py::arg("bytes"), py::arg("peer"),
           py::arg("window"), py::arg("iters"), py::call_guard<py::gil_scoped_release>())
      .def("fill_pattern", &DeviceComm::fill_pattern, py::arg("buffer"), py::arg("op"), py::arg("first") = 0)
      .def("count_wrong", &DeviceComm::count_wrong, py::arg("buffer"), py::arg("op"), py::arg("first") = 0,
           py::arg("source") = -1);
  m.def("nccl_unique_id", &nccl_unique_id);
  m.def("reduce_tensors", &reduce_tensors, py::arg("dst"), py::arg("src"), py::arg("op"));
  m.def("device_count", &device_count);
  m.def("device_identity", &device_identity, py::arg("device"));
  m.def("versions", &versions);
  bind_copies(m);
}
