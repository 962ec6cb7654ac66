// The emulated CUDA runtime (see include/cuda_runtime.h). One mutex orders every queue; each stream
// has a worker thread that runs its work in enqueue order, after whatever the legacy-stream rules make
// it wait for. Device memory lives in one host arena, PROT_NONE except while a worker runs work that
// touches it, so host code that reads or writes a device pointer outside the runtime faults as on a GPU.
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu.h"

constinit thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

namespace emu {
namespace {

using Clock = std::chrono::steady_clock;
// A kernel or a copy takes a GPU about a microsecond between two events whatever it moves (its front
// end dispatches it and signals its end): the launch of results/physical.py's floor.
constexpr auto kLeastTask = std::chrono::microseconds(1);

struct Graph {
  std::vector<std::function<void()>> nodes;
  std::vector<std::shared_ptr<void>> holds;
};

struct Stream;
struct Task {
  std::function<void()> work;
  std::vector<std::pair<Stream*, uint64_t>> after;  // (stream, work count it must have completed)
  bool opens = true;  // touches device memory (an event's timestamp does not)
};

// Never freed: a task may wait on a stream that was destroyed meanwhile.
struct Stream {
  int device = 0;
  bool blocking = true;
  bool legacy = false;
  std::deque<Task> queue;
  std::condition_variable wake;  // work queued or the stream closing: its worker alone waits here
  uint64_t enqueued = 0, completed = 0;
  bool closing = false;
  Graph* capture = nullptr;
  bool capture_broken = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capturer;
};

struct Event {
  int device = 0;  // the device current when it was created: CUDA records it on that device's streams alone
  unsigned flags = 0;
  Stream* stream = nullptr;
  uint64_t seq = 0;
  bool in_capture = false;
  std::shared_ptr<Clock::time_point> stamp;
};

struct Device {
  int physical = 0;
  char* base = nullptr;
  std::map<std::size_t, std::size_t> free_blocks, used;  // offset -> bytes
  std::size_t in_use = 0;
  Stream* legacy = nullptr;
  std::vector<Stream*> streams;
  std::set<int> peers;
};

// Queues, progress, streams, events, memory maps. Never destroyed: the workers of streams that live to
// the end of the process still wait on them while static objects are destroyed at exit. `cv` tells of
// completed work (host waits, work waiting on other streams); each stream's `wake` of queued work, so
// that queueing wakes one worker, not all.
std::mutex& mu = *new std::mutex;
std::condition_variable& cv = *new std::condition_variable;

struct Runtime {
  cudaError_t error = cudaSuccess;
  std::vector<Device> devices;
  char* arena = nullptr;
  std::size_t per_device = 0, arena_bytes = 0;
  bool peer_access = true;
  std::string fail_launch, skip_launch;
  long launch_delay_us = 0;  // COMMBENCH_EMU_LAUNCH_DELAY_US: the host's cost of each kernel launch
  // COMMBENCH_EMU_EVENT_HOP_US: how much later than the event a stream waiting on another device's
  // event goes on (the signal crosses between the GPUs).
  long event_hop_us = 0;
  // COMMBENCH_EMU_ELAPSED_US: every elapsed time between two events reads this, as events recorded out
  // of order read (0.1-0.5 us at every size): a defect of the timing, for the physical floor to catch.
  double elapsed_us = -1;
  // COMMBENCH_EMU_SLOW_DEVICE=<device>:<us>: each task of that device's streams that touches memory
  // takes that much longer (the work a GPU issues is slow: which GPU issued a copy shows); `all:<us>`
  // slows every device alike (a pipeline across two GPUs shows whether its stages overlap).
  static constexpr int kEveryDevice = -2;
  int slow_device = -1;
  long slow_us = 0;
  std::set<void*> pinned;
  bool exclusive = false;   // COMMBENCH_EMU_COMPUTE_MODE=exclusive-process
  std::set<int> contexts;   // devices this process holds a context on
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void open_for_mpi(int open);

Runtime& rt() {
  static Runtime* r = [] {
    auto* r = new Runtime;
    char* end = nullptr;
    const std::string n_text = env("COMMBENCH_GPU_EMULATION");
    const long n = std::strtol(n_text.c_str(), &end, 10);
    if (n_text.empty() || *end != '\0' || n < 0 || n > 64) {
      r->error = cudaErrorInitializationError;
      return r;
    }
    // CUDA_VISIBLE_DEVICES as CUDA reads it: ordinals up to the first one that is invalid or repeated.
    std::vector<int> visible;
    if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) {
      std::string list = cvd;
      std::size_t pos = 0;
      while (pos <= list.size() && !list.empty()) {
        const std::size_t comma = std::min(list.find(',', pos), list.size());
        const std::string item = list.substr(pos, comma - pos);
        char* e = nullptr;
        const long d = std::strtol(item.c_str(), &e, 10);
        if (item.empty() || *e != '\0' || d < 0 || d >= n || std::count(visible.begin(), visible.end(), d)) break;
        visible.push_back(static_cast<int>(d));
        pos = comma + 1;
      }
    } else {
      for (int d = 0; d < n; ++d) visible.push_back(d);
    }
    // 16 GiB a device by default (reserved, not touched): room for NCCL's bound on 8 GPUs (node/gpu.py,
    // 4.2 GiB) beside a sweep's buffers.
    const std::string gib = env("COMMBENCH_EMU_MEMORY_GIB");
    r->per_device = (gib.empty() ? 16 : std::max(1L, std::strtol(gib.c_str(), nullptr, 10))) << 30;
    r->arena_bytes = r->per_device * visible.size();
    if (r->arena_bytes) {
      void* p = mmap(nullptr, r->arena_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        r->error = cudaErrorMemoryAllocation;
        return r;
      }
      r->arena = static_cast<char*>(p);
    }
    for (std::size_t i = 0; i < visible.size(); ++i) {
      Device d;
      d.physical = visible[i];
      d.base = r->arena + i * r->per_device;
      d.free_blocks[0] = r->per_device;
      r->devices.push_back(std::move(d));
    }
    r->peer_access = env("COMMBENCH_EMU_NO_PEER").empty();
    r->fail_launch = env("COMMBENCH_EMU_FAIL_LAUNCH");
    r->skip_launch = env("COMMBENCH_EMU_SKIP_LAUNCH");
    r->launch_delay_us = std::strtol(env("COMMBENCH_EMU_LAUNCH_DELAY_US").c_str(), nullptr, 10);
    r->event_hop_us = std::strtol(env("COMMBENCH_EMU_EVENT_HOP_US").c_str(), nullptr, 10);
    if (const std::string us = env("COMMBENCH_EMU_ELAPSED_US"); !us.empty()) r->elapsed_us = std::strtod(us.c_str(), nullptr);
    const std::string slow = env("COMMBENCH_EMU_SLOW_DEVICE");
    if (const std::size_t colon = slow.find(':'); colon != std::string::npos) {
      r->slow_device = slow.substr(0, colon) == "all" ? Runtime::kEveryDevice : std::atoi(slow.substr(0, colon).c_str());
      r->slow_us = std::strtol(slow.substr(colon + 1).c_str(), nullptr, 10);
    }
    r->exclusive = env("COMMBENCH_EMU_COMPUTE_MODE") == "exclusive-process";
    // The emulated CUDA-aware MPI (cuda_aware_mpi.c), when preloaded, opens device memory during MPI calls.
    if (void* reg = dlsym(RTLD_DEFAULT, "commbench_emu_register"))
      reinterpret_cast<void (*)(void (*)(int))>(reg)(&open_for_mpi);
    return r;
  }();
  return *r;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current = 0;

cudaError_t fail(cudaError_t rc) {
  if (rc != cudaSuccess) last_error = rc;
  return rc;
}

// The runtime's initialisation status, as every call reports it.
cudaError_t ready() {
  Runtime& r = rt();
  if (r.error != cudaSuccess) return r.error;
  return r.devices.empty() ? cudaErrorNoDevice : cudaSuccess;
}

bool valid_device(int d) { return d >= 0 && d < static_cast<int>(rt().devices.size()); }

// A context on device d for this process, as cudaSetDevice and whatever uses a device make one. In
// EXCLUSIVE_PROCESS compute mode one process of the host at a time may hold it: a lock file per
// physical GPU of the host, kept open until the process exits.
cudaError_t context(int d) {
  Runtime& r = rt();
  static std::mutex context_mu;
  std::lock_guard<std::mutex> l(context_mu);
  if (!r.exclusive || r.contexts.count(d)) return cudaSuccess;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  const std::string path = "/tmp/commbench-emu-exclusive-" + std::string(name) + "-" + std::to_string(r.devices[d].physical);
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (fd >= 0) close(fd);
    return cudaErrorDevicesUnavailable;
  }
  r.contexts.insert(d);
  return cudaSuccess;
}

// Under mu: whether the stream's next task may start now.
bool next_ready(const Stream* s) {
  if (s->queue.empty()) return false;
  for (auto& [other, seq] : s->queue.front().after)
    if (other->completed < seq) return false;
  return true;
}

void run_worker(Stream* s) {
  std::unique_lock<std::mutex> l(mu);
  // Device memory stays open across tasks that follow one another at once (each open and close is an
  // mprotect of the whole arena), and closes before the host can learn that the last one completed.
  std::optional<Open> open;
  for (;;) {
    s->wake.wait(l, [&] { return !s->queue.empty() || s->closing; });
    if (s->queue.empty()) return;
    cv.wait(l, [&] { return next_ready(s); });
    Task task = std::move(s->queue.front());
    s->queue.pop_front();
    l.unlock();
    if (task.opens && !open) open.emplace();
    if (task.opens && (s->device == rt().slow_device || rt().slow_device == Runtime::kEveryDevice))
      std::this_thread::sleep_for(std::chrono::microseconds(rt().slow_us));
    const auto began = Clock::now();
    task.work();
    while (task.opens && Clock::now() - began < kLeastTask) {
    }
    l.lock();
    if (!next_ready(s)) open.reset();
    ++s->completed;
    cv.notify_all();
  }
}

Stream* new_stream(int device, bool blocking, bool legacy) {
  auto* s = new Stream;
  s->device = device;
  s->blocking = blocking;
  s->legacy = legacy;
  rt().devices[device].streams.push_back(s);
  std::thread(run_worker, s).detach();
  return s;
}

// Under mu. The stream a handle names: 0 and cudaStreamLegacy are the current device's legacy stream.
Stream* resolve(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) {
    Device& d = rt().devices[current];
    if (!d.legacy) d.legacy = new_stream(current, true, true);
    return d.legacy;
  }
  return reinterpret_cast<Stream*>(handle);
}

// Under mu. A capture this thread may not go past: global-mode captures anywhere, thread-local ones of
// this thread (CUDA's "potentially unsafe" calls). The captures are invalidated, as CUDA does.
bool breaks_capture() {
  bool broken = false;
  for (Device& d : rt().devices)
    for (Stream* s : d.streams)
      if (s->capture && (s->mode == cudaStreamCaptureModeGlobal ||
                         (s->mode == cudaStreamCaptureModeThreadLocal && s->capturer == std::this_thread::get_id()))) {
        s->capture_broken = true;
        broken = true;
      }
  return broken;
}

cudaError_t enqueue_locked(Stream* s, std::function<void()> work, std::shared_ptr<void> hold, bool opens = true) {
  if (s->closing) return cudaErrorInvalidResourceHandle;
  if (s->capture) {
    if (s->capture_broken) return cudaErrorStreamCaptureInvalidated;
    s->capture->nodes.push_back(std::move(work));
    if (hold) s->capture->holds.push_back(std::move(hold));
    return cudaSuccess;
  }
  Task t{std::move(work), {}, opens};
  Device& d = rt().devices[s->device];
  // The legacy stream waits for every blocking stream of its device, and they for it.
  if (s->legacy) {
    for (Stream* o : d.streams) {
      if (o->legacy || !o->blocking || o->closing) continue;
      if (o->capture) {
        o->capture_broken = true;
        return cudaErrorStreamCaptureImplicit;
      }
      if (o->enqueued > o->completed) t.after.emplace_back(o, o->enqueued);
    }
  } else if (s->blocking && d.legacy && d.legacy->enqueued > d.legacy->completed) {
    t.after.emplace_back(d.legacy, d.legacy->enqueued);
  }
  s->queue.push_back(std::move(t));
  ++s->enqueued;
  s->wake.notify_one();
  return cudaSuccess;
}

// Under mu: until `s` completed everything enqueued so far.
void drain(std::unique_lock<std::mutex>& l, Stream* s) {
  const uint64_t target = s->enqueued;
  cv.wait(l, [&] { return s->completed >= target; });
}

// Under mu: the allocation that holds [p, p + n), as (device, offset), or device -1.
std::pair<int, std::size_t> locate(const void* p, std::size_t n) {
  Runtime& r = rt();
  const char* c = static_cast<const char*>(p);
  if (!r.arena || c < r.arena || c >= r.arena + r.arena_bytes) return {-1, 0};
  const int dev = static_cast<int>((c - r.arena) / r.per_device);
  Device& d = r.devices[dev];
  const std::size_t off = static_cast<std::size_t>(c - d.base);
  auto it = d.used.upper_bound(off);
  if (it == d.used.begin()) return {dev, SIZE_MAX};
  --it;
  if (off + n > it->first + it->second) return {dev, SIZE_MAX};
  return {dev, it->first};
}

bool is_device(const void* p) { return locate(p, 0).first >= 0; }

// Under mu: whether [p, p + n) lies inside one allocation when it is device memory; host memory is
// not checked.
bool valid_range(const void* p, std::size_t n) {
  const auto [dev, off] = locate(p, n);
  return dev < 0 || off != SIZE_MAX;
}

// Under mu: the byte ranges that copies queued and not yet completed read or write, each copy's two
// entries under one key.
std::multimap<uint64_t, std::pair<const char*, const char*>> in_flight;
uint64_t copies_queued = 0;

bool overlaps_in_flight(const char* lo, const char* hi) {
  for (const auto& [key, range] : in_flight)
    if (lo < range.second && range.first < hi) return true;
  return false;
}

// What an asynchronous copy's host destination holds until the copy completes: where the host reads it
// too early (before synchronising), it reads this, not the old contents that often look right. 0x7F in
// every byte is a large positive value in every integer and floating type (a count of wrong elements,
// a time), never a plausible one. The destination is poisoned at enqueue only where no queued copy
// still reads or writes it (a staging slot another stream copies out of first); device destinations
// are not: host code cannot read device memory at all (the arena is PROT_NONE outside the workers).
constexpr unsigned char kPoison = 0x7F;

cudaError_t copy_async(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                       bool wait) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::unique_lock<std::mutex> l(mu);
  const bool d_dev = is_device(dst), s_dev = is_device(src);
  const bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && d_dev && !s_dev) ||
                  (kind == cudaMemcpyDeviceToHost && !d_dev && s_dev) ||
                  (kind == cudaMemcpyDeviceToDevice && d_dev && s_dev) ||
                  (kind == cudaMemcpyHostToHost && !d_dev && !s_dev);
  if (!ok) return fail(cudaErrorInvalidMemcpyDirection);
  if (!valid_range(dst, n) || !valid_range(src, n)) return fail(cudaErrorInvalidValue);
  if (n == 0) return cudaSuccess;
  if (wait && breaks_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  Stream* s = resolve(stream);
  if (wait || s->capture) {
    if (const cudaError_t rc = enqueue_locked(s, [=] { std::memmove(dst, src, n); }, nullptr)) return fail(rc);
    if (wait) drain(l, s);
    return cudaSuccess;
  }
  char* const d = static_cast<char*>(dst);
  const char* const c = static_cast<const char*>(src);
  const bool poison = !d_dev && !overlaps_in_flight(d, d + n);
  const uint64_t key = ++copies_queued;
  const cudaError_t rc = enqueue_locked(s, [=] {
    std::memmove(d, c, n);
    std::lock_guard<std::mutex> g(mu);
    in_flight.erase(key);
  }, nullptr);
  if (rc) return fail(rc);
  in_flight.emplace(key, std::make_pair(c, c + n));
  in_flight.emplace(key, std::make_pair(static_cast<const char*>(d), static_cast<const char*>(d + n)));
  if (poison) std::memset(d, kPoison, n);
  return cudaSuccess;
}

uint64_t fnv(const std::string& text, uint64_t h) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// An MPI call of the emulated CUDA-aware MPI holds device memory open as a worker does.
void open_for_mpi(int open) {
  static thread_local std::vector<std::unique_ptr<Open>> held;
  if (open)
    held.push_back(std::make_unique<Open>());
  else if (!held.empty())
    held.pop_back();
}

std::mutex open_mu;  // the arena's protection
int opened = 0;

}  // namespace

Open::Open() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> l(open_mu);
  if (opened++ == 0 && r.arena) mprotect(r.arena, r.arena_bytes, PROT_READ | PROT_WRITE);
}

Open::~Open() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> l(open_mu);
  if (--opened == 0 && r.arena) mprotect(r.arena, r.arena_bytes, PROT_NONE);
}

void idle(unsigned& rounds) {
  ++rounds;
  if (rounds < 200)
    sched_yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(rounds < 20000 ? 50 : 1000));
}

// A stream holds at most this much pending work: a launch beyond it blocks the host until the
// stream has run some, as a GPU's launch queue does (about a thousand launches), so that host code
// which enqueues long sequences behind held work meets the same wait here.
constexpr std::size_t kPendingLaunches = 1024;

// Under l: a launch onto `s` (not recorded into a graph) waits for room in its queue.
Stream* room_for_launch(std::unique_lock<std::mutex>& l, cudaStream_t stream) {
  Stream* s = resolve(stream);
  if (!s->capture) cv.wait(l, [&] { return s->queue.size() < kPendingLaunches; });
  return s;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, std::shared_ptr<void> hold) {
  std::unique_lock<std::mutex> l(mu);
  return enqueue_locked(room_for_launch(l, stream), std::move(work), std::move(hold));
}

int current_device() { return current; }

std::string host_name() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

int physical_index(int device) { return rt().devices[device].physical; }

bool device_range(const void* p, std::size_t bytes) {
  return device_of(p, bytes) >= 0;
}

int device_of(const void* p, std::size_t bytes) {
  std::lock_guard<std::mutex> l(mu);
  const auto [dev, off] = locate(p, bytes);
  return dev >= 0 && off != SIZE_MAX ? dev : -1;
}

int stream_device(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return -1;
  std::lock_guard<std::mutex> l(mu);
  return reinterpret_cast<Stream*>(stream)->device;
}

}  // namespace emu

using namespace emu;

const char* cudaGetErrorString(cudaError_t rc) {
  switch (rc) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error (COMMBENCH_GPU_EMULATION must be 0-64)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetLastError() {
  const cudaError_t rc = last_error;
  last_error = cudaSuccess;
  return rc;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 0;
  if (const cudaError_t rc = ready()) return fail(rc);
  *n = static_cast<int>(rt().devices.size());
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  if (const cudaError_t rc = ready()) return fail(rc);
  *d = current;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  if (const cudaError_t rc = context(d)) return fail(rc);
  current = d;
  return cudaSuccess;
}

// The memory's clock and bus width: an H100 SXM's (3,352 GB/s) unless COMMBENCH_EMU_MEMORY_GBPS sets
// the bandwidth they give (a clock over a 5120-bit bus, two transfers a clock).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  constexpr int kBusBits = 5120;
  const std::string gbps = env("COMMBENCH_EMU_MEMORY_GBPS");
  const double bandwidth = gbps.empty() ? 3352.32e9 : std::strtod(gbps.c_str(), nullptr) * 1e9;
  switch (attr) {
    case cudaDevAttrMemoryClockRate:
      *value = static_cast<int>(bandwidth / (2.0 * kBusBits / 8) / 1e3);
      return cudaSuccess;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = kBusBits;
      return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(d)) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "commbench emulated GPU");
  // The same physical device of the same host has the same UUID in every process, as on hardware.
  const std::string id = host_name() + "/" + std::to_string(physical_index(d));
  const uint64_t a = fnv(id, 14695981039346656037ULL), b = fnv(id, a);
  std::memcpy(p->uuid.bytes, &a, 8);
  std::memcpy(p->uuid.bytes + 8, &b, 8);
  p->totalGlobalMem = rt().per_device;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->pciBusID = 0x10 + physical_index(d);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* out, int len, int d) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(d) || len < 13) return fail(d < 0 ? cudaErrorInvalidDevice : cudaErrorInvalidValue);
  std::snprintf(out, static_cast<std::size_t>(len), "00000000:%02X:00.0", 0x10 + physical_index(d));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::unique_lock<std::mutex> l(mu);
  if (breaks_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  resolve(nullptr);
  for (Stream* s : rt().devices[current].streams) drain(l, s);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int d, int peer) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(d) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
  *can = rt().peer_access && d != peer ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(peer) || flags != 0) return fail(cudaErrorInvalidValue);
  if (!rt().peer_access || peer == current) return fail(cudaErrorPeerAccessUnsupported);
  std::lock_guard<std::mutex> l(mu);
  if (!rt().devices[current].peers.insert(peer).second) return fail(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::lock_guard<std::mutex> l(mu);
  *total = rt().per_device;
  *free_bytes = rt().per_device - rt().devices[current].in_use;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  *p = nullptr;
  if (const cudaError_t rc = ready()) return fail(rc);
  if (const cudaError_t rc = context(current)) return fail(rc);
  std::lock_guard<std::mutex> l(mu);
  if (breaks_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  Device& d = rt().devices[current];
  const std::size_t need = std::max<std::size_t>((bytes + 511) / 512 * 512, 512);
  for (auto it = d.free_blocks.begin(); it != d.free_blocks.end(); ++it) {
    if (it->second < need) continue;
    const std::size_t off = it->first, left = it->second - need;
    d.free_blocks.erase(it);
    if (left) d.free_blocks[off + need] = left;
    d.used[off] = need;
    d.in_use += need;
    *p = d.base + off;
    return cudaSuccess;
  }
  return fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (const cudaError_t rc = ready()) return fail(rc);
  std::unique_lock<std::mutex> l(mu);
  if (breaks_capture()) return fail(cudaErrorStreamCaptureUnsupported);
  const auto [dev, off] = locate(p, 0);
  if (dev < 0 || off == SIZE_MAX || rt().devices[dev].base + off != p) return fail(cudaErrorInvalidValue);
  // cudaFree waits for the device's work, as CUDA's does.
  for (Stream* s : rt().devices[dev].streams) drain(l, s);
  Device& d = rt().devices[dev];
  const std::size_t size = d.used[off];
  d.used.erase(off);
  d.in_use -= size;
  madvise(d.base + off, size, MADV_DONTNEED);  // gives the pages back; they read as zeros next time
  auto next = d.free_blocks.lower_bound(off);
  std::size_t start = off, len = size;
  if (next != d.free_blocks.end() && next->first == off + size) {
    len += next->second;
    next = d.free_blocks.erase(next);
  }
  if (next != d.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      start = prev->first;
      len += prev->second;
      d.free_blocks.erase(prev);
    }
  }
  d.free_blocks[start] = len;
  return cudaSuccess;
}

// The driver places pinned memory on the NUMA node of the CPU that asks: COMMBENCH_EMU_PINNED_LOG
// names a file that gets, per allocation, its bytes and the CPUs the calling thread may run on.
static void log_pinned(std::size_t bytes) {
  const std::string path = env("COMMBENCH_EMU_PINNED_LOG");
  if (path.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  std::string cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%zu %s\n", bytes, cpus.c_str());
    std::fclose(f);
  }
}

cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) {
  if (posix_memalign(p, 4096, std::max<std::size_t>(bytes, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  log_pinned(bytes);
  std::lock_guard<std::mutex> l(mu);
  rt().pinned.insert(*p);
  return cudaSuccess;
}

// Pinned memory is mapped: with one address space (UVA), the device sees it where the host does.
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  std::lock_guard<std::mutex> l(mu);
  if (flags != 0 || !rt().pinned.count(host)) return fail(cudaErrorInvalidValue);
  *device = host;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  std::lock_guard<std::mutex> l(mu);
  if (!rt().pinned.erase(p)) return fail(cudaErrorInvalidValue);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
  return copy_async(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  return copy_async(dst, src, n, kind, s, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_dev, const void* src, int src_dev, std::size_t n, cudaStream_t s) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (!valid_device(dst_dev) || !valid_device(src_dev)) return fail(cudaErrorInvalidDevice);
  {
    std::lock_guard<std::mutex> l(mu);
    if (locate(dst, n).first != dst_dev || locate(src, n).first != src_dev) return fail(cudaErrorInvalidValue);
  }
  return copy_async(dst, src, n, cudaMemcpyDeviceToDevice, s, false);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (const cudaError_t rc = context(current)) return fail(rc);
  std::lock_guard<std::mutex> l(mu);
  *s = reinterpret_cast<cudaStream_t>(new_stream(current, !(flags & cudaStreamNonBlocking), false));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(mu);
  Stream* s = resolve(handle);
  if (s->closing) return fail(cudaErrorInvalidResourceHandle);
  // As in CUDA the call returns at once; the worker ends after the work already queued.
  s->closing = true;
  s->wake.notify_one();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::unique_lock<std::mutex> l(mu);
  Stream* s = resolve(handle);
  if (s->capture) {
    s->capture_broken = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (s->completed == s->enqueued) return cudaSuccess;
  l.unlock();
  // The emulated device's work needs the host's cores, which a caller polling in a tight loop would
  // take (8 emulated ranks share 2 cores in the tests): a query that finds work pending yields them.
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  return cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::unique_lock<std::mutex> l(mu);
  Stream* s = resolve(handle);
  if (s->capture) {
    s->capture_broken = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  drain(l, s);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::lock_guard<std::mutex> l(mu);
  Stream* s = resolve(handle);
  Event* e = reinterpret_cast<Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  if (e->in_capture || !e->stream || e->stream->completed >= e->seq) return cudaSuccess;
  if (s->capture) {  // a dependency on work outside the capture: not representable, as in CUDA
    s->capture_broken = true;
    return fail(cudaErrorStreamCaptureIsolation);
  }
  Stream* other = e->stream;
  const uint64_t seq = e->seq;
  const long hop_us = other->device != s->device ? rt().event_hop_us : 0;
  auto hop = [hop_us] {
    if (hop_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(hop_us));
  };
  if (const cudaError_t rc = enqueue_locked(s, hop, nullptr, false)) return fail(rc);
  s->queue.back().after.emplace_back(other, seq);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  if (const cudaError_t rc = ready()) return fail(rc);
  auto* ev = new Event;
  ev->device = current;
  ev->flags = flags;
  *e = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(mu);
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  if (const cudaError_t rc = ready()) return fail(rc);
  Event* e = reinterpret_cast<Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(mu);
  Stream* s = resolve(handle);
  // CUDA refuses an event recorded on a stream of another device than the event's.
  if (s->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  auto stamp = std::make_shared<Clock::time_point>();
  if (const cudaError_t rc = enqueue_locked(s, [stamp] { *stamp = Clock::now(); }, nullptr, false)) return fail(rc);
  e->in_capture = s->capture != nullptr;
  e->stream = s;
  e->seq = s->enqueued;
  e->stamp = stamp;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Event* e = reinterpret_cast<Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(mu);
  if (e->in_capture) return fail(cudaErrorStreamCaptureUnsupported);
  return !e->stream || e->stream->completed >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Event* e = reinterpret_cast<Event*>(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock<std::mutex> l(mu);
  if (e->in_capture) return fail(cudaErrorStreamCaptureUnsupported);
  if (e->stream) cv.wait(l, [&] { return e->stream->completed >= e->seq; });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Event* a = reinterpret_cast<Event*>(start);
  Event* b = reinterpret_cast<Event*>(end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(mu);
  // Two devices' clocks have no common time: CUDA refuses the elapsed time between their events.
  if ((a->flags | b->flags) & cudaEventDisableTiming || !a->stream || !b->stream || a->in_capture || b->in_capture ||
      a->device != b->device)
    return fail(cudaErrorInvalidResourceHandle);
  if (a->stream->completed < a->seq || b->stream->completed < b->seq) return fail(cudaErrorNotReady);
  const double injected_us = rt().elapsed_us;
  *ms = injected_us >= 0 ? static_cast<float>(injected_us / 1000)
                         : std::chrono::duration<float, std::milli>(*b->stamp - *a->stamp).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  if (const cudaError_t rc = ready()) return fail(rc);
  std::lock_guard<std::mutex> l(mu);
  Stream* s = resolve(handle);
  if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported);
  if (s->capture) return fail(cudaErrorIllegalState);
  s->capture = new Graph;
  s->capture_broken = false;
  s->mode = mode;
  s->capturer = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  *graph = nullptr;
  std::lock_guard<std::mutex> l(mu);
  Stream* s = resolve(handle);
  if (!s->capture) return fail(cudaErrorIllegalState);
  Graph* g = s->capture;
  s->capture = nullptr;
  if (s->capture_broken) {
    delete g;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}

// An instance shares its nodes with the launches still queued, which keep them (and the holds)
// alive after cudaGraphExecDestroy, as CUDA lets a graph finish after its instance is destroyed.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return fail(cudaErrorInvalidValue);
  auto* instance = new std::shared_ptr<Graph>(std::make_shared<Graph>(*reinterpret_cast<Graph*>(graph)));
  *exec = reinterpret_cast<cudaGraphExec_t>(instance);
  return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t) { return exec ? cudaSuccess : fail(cudaErrorInvalidValue); }

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t handle) {
  if (!exec) return fail(cudaErrorInvalidValue);
  std::shared_ptr<Graph> g = *reinterpret_cast<std::shared_ptr<Graph>*>(exec);
  // COMMBENCH_EMU_SKIP_LAUNCH="graph launch": a replay that does nothing, for the checks to catch.
  const std::string& skip = rt().skip_launch;
  if (!skip.empty() && std::strstr("graph launch", skip.c_str())) return cudaSuccess;
  std::lock_guard<std::mutex> l(mu);
  const cudaError_t rc = enqueue_locked(resolve(handle), [g] {
    for (auto& node : g->nodes) node();
  }, nullptr);
  return fail(rc);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return fail(cudaErrorInvalidValue);
  delete reinterpret_cast<std::shared_ptr<Graph>*>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}

cudaError_t emu_launch_grid(const char* name, unsigned blocks, unsigned threads, cudaStream_t stream,
                            std::function<void()> grid) {
  if (const cudaError_t rc = ready()) return fail(rc);
  if (blocks == 0 || threads == 0 || threads > 1024) return fail(cudaErrorInvalidConfiguration);
  const Runtime& r = rt();
  if (!r.fail_launch.empty() && std::strstr(name, r.fail_launch.c_str())) return fail(cudaErrorLaunchFailure);
  if (!r.skip_launch.empty() && std::strstr(name, r.skip_launch.c_str())) return cudaSuccess;
  if (r.launch_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(r.launch_delay_us));
  // The timing gate reads mapped host memory alone: device memory stays closed while it holds the
  // stream, so that host code which reads device memory while it enqueues still faults.
  const bool opens = std::strcmp(name, "gate kernel") != 0;
  std::unique_lock<std::mutex> l(mu);
  // CUDA launches a kernel on the current device: into a stream of another device it is refused.
  if (resolve(stream)->device != current) return fail(cudaErrorInvalidResourceHandle);
  return fail(enqueue_locked(room_for_launch(l, stream), std::move(grid), nullptr, opens));
}
