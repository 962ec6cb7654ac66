// commbench._cuda: the Python bindings, and what needs no communicator: device queries, the
// reduction kernel on its own. Collectives run on a NCCL communicator (device_comm.h) that is
// created from a unique id broadcast by rank 0; our algorithms walk the same schedules (schedule.h)
// with the same executors (collectives.h) as the host path, over NCCL point-to-point, reducing with
// a kernel that calls the same functor (reduce.h). Iterations are timed with CUDA events, one pair
// per iteration. Local copies (copies.cpp) need no communicator.
#include "python.h"

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
#include "resources.h"

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

// Device memory that Python owns: the sweeps' GPU buffers (commbench/run/device_arrays.py). The
// extension allocates them itself, so a rank's buffers, NCCL's and the up-front memory check all see
// one allocator, and no tensor library is needed on a GPU rank.
class DeviceMemory {
 public:
  DeviceMemory(int64_t bytes, int64_t device) : buf_(static_cast<std::size_t>(bytes), static_cast<int>(device), Where{0, static_cast<int>(device)}) {}
  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(buf_.ptr); }
  int device() const { return buf_.device; }

 private:
  DeviceBuffer buf_;
};

// The device memory's peak bandwidth in bytes/s, from its clock and bus width (two transfers a clock:
// an H100 SXM's 2,619 MHz over 5,120 bits is 3.35 TB/s); 0 where the driver does not say.
double memory_bandwidth(int64_t device) {
  const Where w{0, static_cast<int>(device)};
  int khz = 0, bits = 0;
  cuda_check(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, w.device), "cudaDeviceGetAttribute", w);
  cuda_check(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, w.device), "cudaDeviceGetAttribute", w);
  return 2.0 * khz * 1e3 * bits / 8.0;
}

std::pair<std::size_t, std::size_t> mem_get_info(int64_t device) {
  const Where w{0, static_cast<int>(device)};
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  std::size_t free_bytes = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo", w);
  return {free_bytes, total};
}

// Host <-> device copies of whole buffers, finished when they return. The host side is any writable
// (to_host) or readable (from_host) contiguous Python buffer of the same size in bytes.
void copy_bytes(const Buffer& dev, py::buffer host, bool to_host) {
  if (dev.on_host()) throw std::invalid_argument("copy: the first buffer must be on a GPU");
  const py::buffer_info info = host.request(to_host);
  // One block of memory: a strided view's elements are not where a copy of its size would go.
  py::ssize_t stride = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != stride)
      throw std::invalid_argument("copy: the host buffer is not contiguous");
    stride *= info.shape[d];
  }
  const std::size_t bytes = static_cast<std::size_t>(info.size * info.itemsize);
  if (bytes != nbytes(dev)) throw std::invalid_argument("copy: the host buffer's size differs from the device buffer's");
  const Where w{0, dev.device};
  py::gil_scoped_release no_gil;
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  if (to_host)
    cuda_check(cudaMemcpy(info.ptr, dev.data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", w);
  else
    cuda_check(cudaMemcpy(dev.data, info.ptr, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", w);
  // A copy from pageable memory may return before its DMA ends; work on other streams that are not
  // ordered after it (the NCCL stream is non-blocking) must find the data there.
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", w);
}

// Every element of a device buffer set to `value`, finished when it returns.
void fill_value(const Buffer& dev, double value) {
  if (dev.on_host()) throw std::invalid_argument("fill: the buffer must be on a GPU");
  const Where w{0, dev.device};
  py::gil_scoped_release no_gil;
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  if (dev.dtype == DType::UInt8) {
    launch_fill_value(static_cast<uint8_t*>(dev.data), dev.count, value, nullptr);
  } else {
    dispatch_dtype(dev.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_fill_value(static_cast<T*>(dev.data), dev.count, value, nullptr);
      return 0;
    });
  }
  cuda_check(cudaDeviceSynchronize(), "value fill kernel", w);
}

// The exact pattern (pattern.h) on a device buffer, without a communicator: rank `rank` of `nranks`'s
// values at pattern indices first, first + 1, ... Finished when it returns.
void fill_pattern(const Buffer& t, int64_t op_code, int64_t rank, int64_t nranks, int64_t first) {
  if (t.on_host()) throw std::invalid_argument("fill_pattern: the buffer must be on a GPU");
  const Where w{static_cast<int>(rank), t.device};
  const RedOp op = redop_from(op_code);
  py::gil_scoped_release no_gil;
  cuda_check(cudaSetDevice(w.device), "cudaSetDevice", w);
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_fill<T>(static_cast<T*>(t.data), t.count, static_cast<std::size_t>(first), op, w.rank, static_cast<int>(nranks), nullptr);
    return 0;
  });
  cuda_check(cudaDeviceSynchronize(), "fill kernel", w);
}

// Elements of a device buffer that differ from the exact reduction over nranks (source < 0) or from
// rank source's values, at pattern indices first, first + 1, ...
int64_t count_wrong(const Buffer& t, int64_t op_code, int64_t nranks, int64_t first, int64_t source) {
  if (t.on_host()) throw std::invalid_argument("count_wrong: the buffer must be on a GPU");
  const Where w{0, t.device};
  const RedOp op = redop_from(op_code);
  py::gil_scoped_release no_gil;
  DeviceBuffer counter(sizeof(unsigned long long), w.device, w);
  auto* wrong = static_cast<unsigned long long*>(counter.ptr);
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_count_wrong<T>(static_cast<const T*>(t.data), t.count, static_cast<std::size_t>(first), op,
                          static_cast<int>(nranks), static_cast<int>(source), wrong, nullptr);
    return 0;
  });
  unsigned long long host = 0;
  cuda_check(cudaMemcpy(&host, wrong, sizeof(host), cudaMemcpyDeviceToHost), "check kernel", w);
  return static_cast<int64_t>(host);
}

// "CUDA runtime 13.0, NCCL 2.28.9; driver: CUDA 12.8 (older than the runtime: ...)". A driver older
// than the runtime is what makes every CUDA call fail at once on a node whose torch is too new for it.
// The device's model, as the driver names it.
std::string device_name(int64_t device) {
  const Where w{0, static_cast<int>(device)};
  cudaDeviceProp prop;
  cuda_check(cudaGetDeviceProperties(&prop, static_cast<int>(device)), "cudaGetDeviceProperties", w);
  return prop.name;
}

std::string versions() {
  int runtime = 0, driver = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl);
  auto release = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  std::string text = "CUDA runtime " + release(runtime) + ", NCCL " + std::to_string(nccl / 10000) + "." +
                     std::to_string((nccl / 100) % 100) + "." + std::to_string(nccl % 100) + "; driver: ";
  if (driver == 0) return text + "none loaded";
  text += "CUDA " + release(driver);
  if (driver < runtime)
    text += " (older than the runtime: reinstall with a torch built for it, make install TORCH_CUDA=cu" +
            std::to_string(driver / 1000) + std::to_string((driver % 1000) / 10) + ")";
  return text;
}

}  // namespace
}  // namespace commbench

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace commbench;
  m.doc() = "commbench GPU timed loops (NCCL, device ring/tree, copies)";
  py::register_exception<DeadlineExceeded>(m, "DeadlineExceeded", PyExc_TimeoutError);
  bind_collective_enums(m);
  py::class_<DeviceComm>(m, "DeviceComm")
      .def(py::init<const std::string&, int, int, int, double, bool>(), py::arg("unique_id"), py::arg("rank"),
           py::arg("size"), py::arg("device"), py::arg("timeout_s"), py::arg("splits") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("split", &DeviceComm::split, py::arg("size"), py::call_guard<py::gil_scoped_release>())
      .def("set_timeout", &DeviceComm::set_timeout, py::arg("seconds"))
      .def("barrier", &DeviceComm::barrier, py::call_guard<py::gil_scoped_release>())
      // The buffers by position, the integers and flags by name: a dozen of them in a row are too easy to swap.
      .def("collective_times", &DeviceComm::collective_times, py::arg("collective"), py::arg("algorithm"),
           py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("op"), py::arg("root"), py::arg("iters"), py::arg("chunk_bytes"),
           py::arg("graph") = false, py::arg("agg") = 1, py::arg("delay_s") = 0.0, py::arg("loop") = 1,
           py::arg("launch_free") = true, py::call_guard<py::gil_scoped_release>())
      .def("pingpong_times", &DeviceComm::pingpong_times, py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("bytes"), py::arg("peer"),
           py::arg("iters"), py::arg("loop") = 1, py::call_guard<py::gil_scoped_release>())
      .def("bandwidth_times", &DeviceComm::bandwidth_times, py::arg("send"), py::arg("recv"), py::kw_only(), py::arg("bytes"), py::arg("peer"),
           py::arg("window"), py::arg("iters"), py::arg("loop") = 1, py::call_guard<py::gil_scoped_release>())
      ;
  m.def("nccl_unique_id", &nccl_unique_id);
  m.def("reduce_tensors", &reduce_tensors, py::arg("dst"), py::arg("src"), py::arg("op"));
  m.def("device_count", &device_count);
  m.def("device_identity", &device_identity, py::arg("device"));
  m.def("versions", &versions);
  m.def("device_name", &device_name, py::arg("device"));
  m.def("memory_bandwidth", &memory_bandwidth, py::arg("device"));
  py::class_<DeviceMemory>(m, "DeviceMemory")
      .def(py::init<int64_t, int64_t>(), py::arg("bytes"), py::arg("device"))
      .def_property_readonly("ptr", &DeviceMemory::ptr)
      .def_property_readonly("device", &DeviceMemory::device);
  m.def("mem_get_info", &mem_get_info, py::arg("device"));
  m.def("copy_to_host", [](const Buffer& src, py::buffer dst) { copy_bytes(src, dst, true); }, py::arg("src"), py::arg("dst"));
  m.def("copy_from_host", [](const Buffer& dst, py::buffer src) { copy_bytes(dst, src, false); }, py::arg("dst"), py::arg("src"));
  m.def("fill_pattern", &fill_pattern, py::arg("buffer"), py::arg("op"), py::arg("rank"), py::arg("nranks"),
        py::arg("first") = 0);
  m.def("count_wrong", &count_wrong, py::arg("buffer"), py::arg("op"), py::arg("nranks"), py::arg("first") = 0,
        py::arg("source") = -1);
  m.def("fill", &fill_value, py::arg("buffer"), py::arg("value"));
#if defined(COMMBENCH_EMULATED)
  // The emulated build (tests/emu): the GPUs per host it emulates, for `commbench version -v`.
  m.attr("emulated") = true;
#else
  m.attr("emulated") = false;
#endif
  bind_copies(m);
}
