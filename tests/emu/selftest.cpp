// Checks that the emulation is strict where CUDA and NCCL are (tests/test_emulation.py runs each case
// as its own process): `selftest CASE` exits 0 when the case behaves as on hardware, and says what
// differed otherwise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

namespace {

int failures = 0;

#define EXPECT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A one-thread kernel that runs `body` on the stream's worker.
void kernel(cudaStream_t s, std::function<void()> body) {
  EXPECT(emu_launch("selftest kernel", 1, 1, s, std::move(body)) == cudaSuccess);
}

int* device_int() {
  void* p = nullptr;
  EXPECT(cudaMalloc(&p, sizeof(int)) == cudaSuccess);
  return static_cast<int*>(p);
}

// Work runs on its stream while the host goes on; a stream's work runs in order.
void streams_are_asynchronous() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int* x = device_int();
  kernel(s, [x] {
    sleep_ms(200);
    *x = 1;
  });
  kernel(s, [x] { *x = *x * 10 + 2; });
  EXPECT(cudaStreamQuery(s) == cudaErrorNotReady);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  int host = 0;
  EXPECT(cudaMemcpy(&host, x, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  EXPECT(host == 12);
  EXPECT(cudaStreamQuery(s) == cudaSuccess);
}

// Two non-blocking streams are unordered unless an event orders them.
void streams_need_events() {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  int* x = device_int();
  std::atomic<int> seen{-1};
  kernel(a, [x] {
    *x = 0;
    sleep_ms(200);
    *x = 1;
  });
  sleep_ms(50);
  kernel(b, [x, &seen] { seen = *x; });
  cudaStreamSynchronize(b);
  EXPECT(seen == 0);  // the race shows
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  kernel(a, [x] {
    sleep_ms(200);
    *x = 2;
  });
  cudaEventRecord(e, a);
  cudaStreamWaitEvent(b, e, 0);
  kernel(b, [x, &seen] { seen = *x; });
  cudaStreamSynchronize(b);
  EXPECT(seen == 2);
}

// The legacy stream waits for blocking streams' earlier work, not for non-blocking streams'.
void legacy_stream_rules() {
  cudaStream_t blocking, nonblocking;
  cudaStreamCreate(&blocking);
  cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking);
  std::atomic<int> order{0}, legacy_saw{-1};
  kernel(blocking, [&] {
    sleep_ms(150);
    order = 1;
  });
  kernel(nullptr, [&] { legacy_saw = order.load(); });
  cudaStreamSynchronize(nullptr);
  EXPECT(legacy_saw == 1);
  kernel(nonblocking, [&] {
    sleep_ms(150);
    order = 2;
  });
  kernel(nullptr, [&] { legacy_saw = order.load(); });
  cudaStreamSynchronize(nullptr);
  EXPECT(legacy_saw == 1);
  cudaDeviceSynchronize();
}

// Host code that touches device memory faults, as on a GPU.
void device_memory_faults() {
  int* x = device_int();
  const pid_t child = fork();
  if (child == 0) {
    volatile int v = *x;
    (void)v;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  int host = 5;
  EXPECT(cudaMemcpy(x, &host, sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  EXPECT(cudaMemcpy(x, &host, sizeof(int), cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection);
  EXPECT(cudaMemcpy(&host, x, 2 * sizeof(int) + 4096, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
}

// A host destination reads as poison until its copy completes, so that a read that races the copy
// reads garbage, not the old contents; one that another queued copy still reads keeps its contents.
void copies_poison_their_host_destination() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int* x = device_int();
  int value = 42;
  EXPECT(cudaMemcpy(x, &value, sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  kernel(s, [] { sleep_ms(100); });
  int host = 0;
  EXPECT(cudaMemcpyAsync(&host, x, sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  EXPECT(static_cast<unsigned>(host) == 0x7F7F7F7Fu);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  EXPECT(host == 42);
  // A staging slot: the copy out of it (queued first) must still read 7, not poison.
  int slot = 7, back = 0;
  kernel(s, [] { sleep_ms(100); });
  EXPECT(cudaMemcpyAsync(x, &slot, sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);
  EXPECT(cudaMemcpyAsync(&slot, x, sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  EXPECT(cudaMemcpy(&back, x, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  EXPECT(slot == 7 && back == 7);
}

// Events complete when reached, and time what lies between them.
void events_time_the_stream() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  kernel(s, [] { sleep_ms(100); });
  cudaEventRecord(b, s);
  float ms = 0;
  EXPECT(cudaEventQuery(b) == cudaErrorNotReady);
  EXPECT(cudaEventElapsedTime(&ms, a, b) == cudaErrorNotReady);
  cudaGetLastError();
  EXPECT(cudaEventSynchronize(b) == cudaSuccess);
  EXPECT(cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 95);
}

// Three calls CUDA refuses across devices (cudaErrorInvalidResourceHandle): a kernel launched into a
// stream of another device than the current one, an event recorded on another device's stream than
// the one current at its creation, and the elapsed time between two devices' events.
void cross_device_calls_are_refused() {
  cudaSetDevice(1);
  cudaStream_t on1;
  cudaStreamCreateWithFlags(&on1, cudaStreamNonBlocking);
  cudaEvent_t e1;
  cudaEventCreate(&e1);
  EXPECT(cudaEventRecord(e1, on1) == cudaSuccess);
  cudaSetDevice(0);
  cudaStream_t on0;
  cudaStreamCreateWithFlags(&on0, cudaStreamNonBlocking);
  cudaEvent_t e0;
  cudaEventCreate(&e0);
  EXPECT(emu_launch("selftest kernel", 1, 1, on1, [] {}) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT(cudaEventRecord(e0, on1) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT(cudaEventRecord(e0, on0) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(on0) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
  cudaSetDevice(1);
  EXPECT(cudaStreamSynchronize(on1) == cudaSuccess);
  float ms = 0;
  EXPECT(cudaEventElapsedTime(&ms, e0, e1) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT(cudaEventElapsedTime(&ms, e1, e1) == cudaSuccess);
  // Each device's own calls still run.
  kernel(on1, [] {});
  EXPECT(cudaStreamSynchronize(on1) == cudaSuccess);
}

// A capture records the stream's work for replay; what CUDA forbids during a capture fails and
// invalidates it.
void graphs() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::atomic<int> runs{0};
  cudaGraph_t g;
  EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  kernel(s, [&] { ++runs; });
  EXPECT(cudaStreamEndCapture(s, &g) == cudaSuccess);
  EXPECT(runs == 0);
  cudaGraphExec_t exec;
  EXPECT(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  cudaGraphLaunch(exec, s);
  cudaGraphLaunch(exec, s);
  cudaStreamSynchronize(s);
  EXPECT(runs == 2);
  for (int forbidden = 0; forbidden < 3; ++forbidden) {
    EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    if (forbidden == 0) EXPECT(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    if (forbidden == 1) EXPECT(cudaStreamQuery(s) == cudaErrorStreamCaptureUnsupported);
    void* p = nullptr;
    if (forbidden == 2) EXPECT(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t broken;
    EXPECT(cudaStreamEndCapture(s, &broken) == cudaErrorStreamCaptureInvalidated && broken == nullptr);
  }
  cudaGetLastError();
}

// Launch failures are injectable (COMMBENCH_EMU_FAIL_LAUNCH names the kernel).
void launch_failure() {
  EXPECT(emu_launch("selftest kernel", 1, 1, nullptr, [] {}) == cudaErrorLaunchFailure);
  EXPECT(cudaGetLastError() == cudaErrorLaunchFailure);
  EXPECT(cudaGetLastError() == cudaSuccess);
}

// ---- NCCL: two processes, rank 0 the parent ---------------------------------------------------------

// Runs `body(rank, comm, stream)` in this process (rank 0) and a child (rank 1) on `devices[rank]`;
// the child's failures become its exit status.
void two_ranks(const int devices[2], const std::function<void(int, ncclComm_t, cudaStream_t)>& body,
               bool expect_init = true) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  cudaSetDevice(devices[rank]);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, 2, id, rank);
  if (expect_init) {
    EXPECT(rc == ncclSuccess);
    body(rank, comm, s);
  } else {
    EXPECT(rc == ncclInvalidUsage && std::strstr(ncclGetLastError(nullptr), "Duplicate GPU"));
  }
  if (child == 0) _exit(failures ? 1 : 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

const int kTwoGpus[2] = {0, 1};

// A group completes only once the peer's matching group is posted.
void nccl_groups_wait_for_peers() {
  two_ranks(kTwoGpus, [](int rank, ncclComm_t comm, cudaStream_t s) {
    int* buf = device_int();
    if (rank == 1) sleep_ms(300);
    ncclGroupStart();
    if (rank == 0)
      ncclSend(buf, 1, ncclInt32, 1, comm, s);
    else
      ncclRecv(buf, 1, ncclInt32, 0, comm, s);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    if (rank == 0) {
      sleep_ms(100);
      EXPECT(cudaStreamQuery(s) == cudaErrorNotReady);
    }
    cudaStreamSynchronize(s);
    ncclCommDestroy(comm);
  });
}

// A call on a buffer or a stream of another device than the communicator's is refused (NCCL's kernel
// cannot launch into another device's stream; NCCL_CHECK_POINTERS=1 refuses the buffer), and the
// communicator's own still run.
void nccl_cross_device_calls_are_refused() {
  two_ranks(kTwoGpus, [](int rank, ncclComm_t comm, cudaStream_t s) {
    const int other = 1 - rank;
    cudaSetDevice(other);
    int* elsewhere = device_int();
    cudaStream_t other_stream;
    cudaStreamCreateWithFlags(&other_stream, cudaStreamNonBlocking);
    cudaSetDevice(rank);
    int* own = device_int();
    EXPECT(ncclAllReduce(elsewhere, own, 1, ncclInt32, ncclSum, comm, s) == ncclInvalidArgument);
    EXPECT(std::strstr(ncclGetLastError(comm), "mismatchs with NCCL device"));
    EXPECT(ncclAllReduce(own, own, 1, ncclInt32, ncclSum, comm, other_stream) == ncclUnhandledCudaError);
    EXPECT(ncclAllReduce(own, own, 1, ncclInt32, ncclSum, comm, s) == ncclSuccess);
    EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
    ncclCommDestroy(comm);
  });
}

// Two ranks on one GPU of one host are refused, as NCCL does.
void nccl_duplicate_gpu() {
  const int same[2] = {0, 0};
  two_ranks(same, [](int, ncclComm_t, cudaStream_t) {}, false);
}

// ncclCommAbort ends work that waits for a peer; while a graph holds the communicator it waits for
// the graph to be destroyed.
void nccl_abort() {
  two_ranks(kTwoGpus, [](int rank, ncclComm_t comm, cudaStream_t s) {
    if (rank == 1) {
      sleep_ms(800);  // posts nothing: rank 0's receive can only end by the abort
      ncclCommDestroy(comm);
      return;
    }
    int* buf = device_int();
    cudaGraph_t g;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    ncclRecv(buf, 1, ncclInt32, 1, comm, s);
    EXPECT(cudaStreamEndCapture(s, &g) == cudaSuccess);
    cudaGraphExec_t exec;
    cudaGraphInstantiate(&exec, g, 0);
    cudaGraphLaunch(exec, s);
    sleep_ms(100);
    EXPECT(cudaStreamQuery(s) == cudaErrorNotReady);
    std::atomic<bool> returned{false};
    std::thread aborter([&] {
      ncclCommAbort(comm);
      returned = true;
    });
    sleep_ms(300);
    EXPECT(!returned);                         // the graph still holds the communicator
    EXPECT(cudaStreamQuery(s) == cudaSuccess);  // but its work ended
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    aborter.join();
    EXPECT(returned);
  });
}

// ncclCommDestroy of a communicator in error (rank 0's first group fails: COMMBENCH_EMU_NCCL_FAULT=
// error:0:1, set by the test for this case) returns the error and leaves a group open on the thread,
// as NCCL's does; ncclCommAbort frees it.
void nccl_destroy_in_error() {
  two_ranks(kTwoGpus, [](int rank, ncclComm_t comm, cudaStream_t s) {
    int* buf = device_int();
    ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, s);
    if (rank == 1) {
      sleep_ms(300);
      ncclCommAbort(comm);  // its peer never joins the call
      return;
    }
    cudaStreamSynchronize(s);
    ncclResult_t state = ncclSuccess;
    EXPECT(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSystemError);
    EXPECT(ncclCommDestroy(comm) == ncclSystemError);
    EXPECT(ncclGroupEnd() == ncclSuccess);  // the group the destroy left open
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  });
}

// ncclCommSplit: the members in key order, an allreduce among them alone.
void nccl_split() {
  two_ranks(kTwoGpus, [](int rank, ncclComm_t comm, cudaStream_t s) {
    ncclComm_t sub = nullptr;
    EXPECT(ncclCommSplit(comm, rank == 0 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &sub, nullptr) == ncclSuccess);
    EXPECT((rank == 0) == (sub != nullptr));
    if (sub) {
      int n = 0;
      ncclCommCount(sub, &n);
      EXPECT(n == 1);
      int* buf = device_int();
      int host = 7;
      cudaMemcpy(buf, &host, sizeof(int), cudaMemcpyHostToDevice);
      EXPECT(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, sub, s) == ncclSuccess);
      cudaStreamSynchronize(s);
      cudaMemcpy(&host, buf, sizeof(int), cudaMemcpyDeviceToHost);
      EXPECT(host == 7);
      ncclCommDestroy(sub);
    }
    ncclCommDestroy(comm);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, void (*)()> cases = {
      {"streams_are_asynchronous", streams_are_asynchronous}, {"streams_need_events", streams_need_events},
      {"legacy_stream_rules", legacy_stream_rules},           {"device_memory_faults", device_memory_faults},
      {"copies_poison_their_host_destination", copies_poison_their_host_destination},
      {"events_time_the_stream", events_time_the_stream},     {"graphs", graphs},
      {"launch_failure", launch_failure},                     {"nccl_groups_wait_for_peers", nccl_groups_wait_for_peers},
      {"nccl_duplicate_gpu", nccl_duplicate_gpu},             {"nccl_abort", nccl_abort},
      {"nccl_destroy_in_error", nccl_destroy_in_error},
      {"nccl_split", nccl_split},                             {"cross_device_calls_are_refused", cross_device_calls_are_refused},
      {"nccl_cross_device_calls_are_refused", nccl_cross_device_calls_are_refused}};
  if (argc != 2 || !cases.count(argv[1])) {
    for (const auto& c : cases) std::printf("%s\n", c.first.c_str());
    return argc == 1 ? 0 : 2;
  }
  cases.at(argv[1])();
  return failures ? 1 : 0;
}
