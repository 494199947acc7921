// A host-memory runtime for PyTorch's built-in HPU device type.
//
// HPU tensors live in ordinary host memory, so every op without a dedicated kernel here runs
// its CPU kernel on zero-copy CPU views of the HPU tensors (the boxed fallback below). The
// dedicated kernels are the structural ones the dispatcher needs before any data exists
// (allocation, views, copies across devices, storage swaps).

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/op_registration/op_registration.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/HPUHooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace hpu_emu {

// ---------------------------------------------------------------- configuration

constexpr int kMaxDevices = 8;

struct Config {
  int device_count = 0;
  int64_t memory_limit = 0;  // bytes per device
  bool int64_supported = true;
  bool fp16_supported = true;
  std::string generation = "GAUDI2";
};

Config g_config;
thread_local c10::DeviceIndex t_current_device = 0;
thread_local c10::StreamId t_current_stream = 0;  // the default stream
std::atomic<c10::StreamId> g_next_stream{1};
std::atomic<uint64_t> g_fallback_calls{0};

// The emulator's own counters (the bridge has none of these; packages/hpu-emulator/hpu_emulator/counters.py
// reads them): work a real device would launch, and the points where the host waits for it.
// An op inside a counted launch (a graph replay, a fused kernel: Python raises the depth of
// its thread around it) is inner work of that one launch, not a launch of its own.
std::atomic<uint64_t> g_eager_ops{0};
std::atomic<uint64_t> g_inner_ops{0};
std::atomic<uint64_t> g_copies_d2d{0};
std::atomic<uint64_t> g_copies_h2d{0};
std::atomic<uint64_t> g_copies_d2h{0};
std::atomic<uint64_t> g_scalar_reads{0};
thread_local int t_launch_depth = 0;

// ---------------------------------------------------------------- lazy-mode graph trace
// In lazy mode the bridge accumulates ops until mark_step and compiles each distinct graph
// once. The emulator runs ops at once; it keeps a running hash of the ops (name, overload,
// tensor sizes, strides, dtypes, scalar arguments) since the last step so that mark_step can
// key the recipe cache on the graph (packages/hpu-emulator/hpu_emulator/lazy.py). Off in eager mode.
std::atomic<bool> g_lazy_trace{false};
// PT_HPU_LAZY_MODE=1: the bridge's lazy ops take CPU tensors as inputs (LazyOp::set_inputs
// moves each one to the device), where eager ops refuse them as CUDA does.
std::atomic<bool> g_lazy_mode{false};
std::mutex g_lazy_mutex;
constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
uint64_t g_lazy_hash = kFnvOffset;
uint64_t g_lazy_ops = 0;

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v;
  return h * 1099511628211ULL;
}

// The signature of one op as a recipe key: name, overload, and per argument its dtype,
// sizes and strides (tensors) or its value (scalars, integer lists).
uint64_t op_signature(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                      size_t begin, size_t count) {
  uint64_t h = std::hash<std::string>{}(schema.name());
  h = mix(h, std::hash<std::string>{}(schema.overload_name()));
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& iv = stack[begin + i];
    if (iv.isTensor()) {
      const at::Tensor& t = iv.toTensor();
      if (!t.defined()) {
        h = mix(h, 0);
        continue;
      }
      h = mix(h, static_cast<uint64_t>(t.scalar_type()) + 1);
      for (auto n : t.sizes()) h = mix(h, static_cast<uint64_t>(n));
      for (auto n : t.strides()) h = mix(h, static_cast<uint64_t>(n));
    } else if (iv.isInt()) {
      h = mix(h, static_cast<uint64_t>(iv.toInt()));
    } else if (iv.isDouble()) {
      double d = iv.toDouble();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof(bits));
      h = mix(h, bits);
    } else if (iv.isBool()) {
      h = mix(h, iv.toBool() ? 2 : 3);
    } else if (iv.isIntList()) {
      for (auto n : iv.toIntVector()) h = mix(h, static_cast<uint64_t>(n));
    }
  }
  return h;
}

void trace_lazy(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                size_t begin, size_t count) {
  uint64_t h = op_signature(schema, stack, begin, count);
  std::lock_guard<std::mutex> guard(g_lazy_mutex);
  g_lazy_hash = mix(g_lazy_hash, h);
  ++g_lazy_ops;
}

// A host read in lazy mode runs the graph accumulated so far (the bridge's
// _local_scalar_dense and copies to the host call StepMarker): the graph is closed here and
// handed to Python (lazy.py) with the next mark_step or counter read, which account it.
std::vector<std::pair<uint64_t, uint64_t>> g_lazy_closed;

void close_lazy_graph() {
  if (!g_lazy_trace.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> guard(g_lazy_mutex);
  if (g_lazy_ops == 0) return;
  g_lazy_closed.emplace_back(g_lazy_hash, g_lazy_ops);
  g_lazy_hash = kFnvOffset;
  g_lazy_ops = 0;
}

// Eager mode: the bridge compiles a small recipe the first time it launches an op with a
// new signature and finds it in its recipe cache after (not published as GRAPH_COMPILE:
// synapse_helpers/graph.cpp emits that for non-eager graphs only). The emulator's own
// counter of them (counters.py: eager_recipes), per process.
std::atomic<bool> g_eager_recipes_on{false};
std::atomic<uint64_t> g_eager_recipes{0};
std::mutex g_eager_mutex;
std::unordered_set<uint64_t> g_eager_signatures;

void note_eager_recipe(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                       size_t begin, size_t count) {
  if (schema.name() == "aten::_local_scalar_dense") return;  // a copy, not a kernel
  uint64_t h = op_signature(schema, stack, begin, count);
  std::lock_guard<std::mutex> guard(g_eager_mutex);
  if (g_eager_signatures.insert(h).second) {
    g_eager_recipes.fetch_add(1, std::memory_order_relaxed);
  }
}

[[noreturn]] void refuse_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index < 0 || index >= g_config.device_count,
      // The real stack's text, word for word (gaudi-pytorch-bridge HPUGuardImpl): a process
      // drives the one module it acquired, always hpu:0. What to do is the plugin's note.
      "habana active device: ", static_cast<int>(index), " != 0");
  TORCH_CHECK(
      false, "Invalid device hpu:", static_cast<int>(index), ": the process sees ",
      g_config.device_count,
      " Gaudi device(s) (HABANA_VISIBLE_MODULES / HABANA_VISIBLE_DEVICES / "
      "HPU_PLUGIN_EMULATE_DEVICES)");
}

// Every device index that enters the runtime: only the acquired device, hpu:0, is usable.
inline void check_index(c10::DeviceIndex index) {
  if (C10_UNLIKELY(index != 0)) {
    refuse_index(index);
  }
}

c10::DeviceIndex resolve(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) {
    check_index(device->index());
    return device->index();
  }
  return t_current_device;
}

// ---------------------------------------------------------------- memory statistics

struct DeviceStats {
  std::atomic<int64_t> in_use{0};
  std::atomic<int64_t> max_in_use{0};
  std::atomic<int64_t> num_allocs{0};
  std::atomic<int64_t> num_frees{0};
  std::atomic<int64_t> total_allocated{0};
  // The bridge's other keys: the largest single allocation, and allocations and frees since
  // the start, which reset_accumulated_memory_stats does not clear.
  std::atomic<int64_t> max_alloc_size{0};
  std::atomic<int64_t> total_allocs{0};
  std::atomic<int64_t> total_frees{0};
};

DeviceStats g_stats[kMaxDevices];

// A Gaudi fused kernel keeps its intermediate values in the chip's local memory (a TPC kernel
// streams its inputs through), where the emulator computes them as device tensors of their
// own. Inside one (Python raises this depth of its thread around it), an allocation counts
// towards the device's memory in use but not towards its peak or its limit; when the kernel
// returns, what is still allocated (its outputs) is checked against both.
thread_local int t_workspace_depth = 0;
thread_local int64_t t_workspace_entry[kMaxDevices] = {};

void raise_out_of_memory(c10::DeviceIndex device, int64_t nbytes, int64_t before) {
  TORCH_CHECK_WITH(
      OutOfMemoryError, false,
      "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::", nbytes, " (",
      nbytes / (1024.0 * 1024.0), ")MB on hpu:", static_cast<int>(device), ": ",
      before, " bytes in use of ", g_config.memory_limit,
      " (HPU_PLUGIN_EMULATE_MEMORY)");
}

void raise_peak(DeviceStats& s, int64_t now) {
  int64_t peak = s.max_in_use.load();
  while (now > peak && !s.max_in_use.compare_exchange_weak(peak, now)) {
  }
}

void account_alloc(c10::DeviceIndex device, int64_t nbytes) {
  auto& s = g_stats[device];
  int64_t now = s.in_use.fetch_add(nbytes) + nbytes;
  if (t_workspace_depth == 0) {
    if (g_config.memory_limit > 0 && now > g_config.memory_limit) {
      s.in_use.fetch_sub(nbytes);
      raise_out_of_memory(device, nbytes, now - nbytes);
    }
    raise_peak(s, now);
  }
  s.num_allocs.fetch_add(1);
  s.total_allocs.fetch_add(1);
  s.total_allocated.fetch_add(nbytes);
  int64_t largest = s.max_alloc_size.load();
  while (nbytes > largest && !s.max_alloc_size.compare_exchange_weak(largest, nbytes)) {
  }
}

void account_free(c10::DeviceIndex device, int64_t nbytes) {
  g_stats[device].in_use.fetch_sub(nbytes);
  g_stats[device].num_frees.fetch_add(1);
  g_stats[device].total_frees.fetch_add(1);
}

// ---------------------------------------------------------------- allocator

struct AllocContext {
  void* data;
  int64_t nbytes;
  c10::DeviceIndex device;
};

void delete_owned(void* ctx) {
  auto* c = static_cast<AllocContext*>(ctx);
  account_free(c->device, c->nbytes);
  c10::free_cpu(c->data);
  delete c;
}

// Memory the CPU kernel allocated and an HPU tensor now owns: the CPU storage stays alive
// until the HPU storage dies, so adopting it costs no copy.
struct AdoptContext {
  c10::intrusive_ptr<c10::StorageImpl> cpu;
  int64_t nbytes;
  c10::DeviceIndex device;
};

void delete_adopted(void* ctx) {
  auto* c = static_cast<AdoptContext*>(ctx);
  account_free(c->device, c->nbytes);
  delete c;
}

struct HPUAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = t_current_device;
    check_index(device);
    account_alloc(device, static_cast<int64_t>(nbytes));
    void* data = nullptr;
    try {
      data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    } catch (...) {
      account_free(device, static_cast<int64_t>(nbytes));
      throw;
    }
    auto* ctx = new AllocContext{data, static_cast<int64_t>(nbytes), device};
    return {data, ctx, &delete_owned, c10::Device(c10::DeviceType::HPU, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

HPUAllocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::HPU, &g_allocator)

// Pinned host memory: host memory is all there is, so pinning only records the pointer
// for is_pinned().
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void delete_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(data);
    }
    return {data, data, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// ---------------------------------------------------------------- device guard

struct RecordedEvent {
  std::chrono::steady_clock::time_point at;
};

struct HPUGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return c10::DeviceType::HPU;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != t_current_device) {
      setDevice(d);
    }
    return old;
  }
  c10::Device getDevice() const override {
    return {c10::DeviceType::HPU, t_current_device};
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.is_hpu(), "expected an hpu device, got ", d);
    if (d.has_index()) {
      check_index(d.index());
      t_current_device = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index() && d.index() == 0) {
      t_current_device = 0;
    }
  }
  // Streams as the bridge's (HPUStream.cpp): the default stream is id 0, each new stream
  // gets an id of its own, the current stream is per thread (the default one at first), and
  // a device without an index is the current device. Work runs at once on every stream.
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, indexed(d), t_current_stream);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(d));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, indexed(d), g_next_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream old = getStream(s.device());
    t_current_stream = s.id();
    return old;
  }
  static c10::Device indexed(c10::Device d) {
    return d.has_index() ? d : c10::Device(c10::DeviceType::HPU, t_current_device);
  }
  // One device in play, as the real guard reports: torch (the autograd engine's device
  // threads, for one) then never switches a thread to another index.
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_config.device_count > 0 ? 1 : 0;
  }
  // Work is synchronous: an event is complete when it is recorded, so the time of its
  // record is its time, and torch.Event(device="hpu", enable_timing=True).elapsed_time
  // gives milliseconds between two, as the bridge's guard does.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", device_index,
                " does not match recording stream's device index ", stream.device_index(),
                ".");
    auto* recorded = static_cast<RecordedEvent*>(*event);
    if (recorded == nullptr) {
      recorded = new RecordedEvent();
    }
    recorded->at = std::chrono::steady_clock::now();
    *event = recorded;
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/)
      const noexcept override {
    delete static_cast<RecordedEvent*>(event);
  }
  double elapsedTime(void* first, void* second,
                     const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(first != nullptr && second != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    auto span = static_cast<RecordedEvent*>(second)->at - static_cast<RecordedEvent*>(first)->at;
    return std::chrono::duration<double, std::milli>(span).count();
  }
  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(HPU, HPUGuardImpl)


// ---------------------------------------------------------------- generators

// An HPU generator wraps a CPU (mt19937) generator: the CPU kernels
// that the fallback runs need a CPUGeneratorImpl, so they get the inner one.
struct HPUGeneratorImpl final : c10::GeneratorImpl {
  explicit HPUGeneratorImpl(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::HPU, index),
                           c10::DispatchKeySet(c10::DispatchKey::HPU)),
        inner(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  void set_current_seed(uint64_t seed) override {
    inner.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    inner.set_offset(offset);
  }
  uint64_t get_offset() const override {
    return inner.get_offset();
  }
  uint64_t current_seed() const override {
    return inner.current_seed();
  }
  uint64_t seed() override {
    return inner.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    inner.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return inner.unsafeGetGeneratorImpl()->get_state();
  }
  HPUGeneratorImpl* clone_impl() const override {
    auto* copy = new HPUGeneratorImpl(device_.index());
    copy->inner = inner.clone();
    return copy;
  }
  static c10::DeviceType device_type() {
    return c10::DeviceType::HPU;
  }
  at::Generator inner;
};

std::once_flag g_generators_once;
std::vector<at::Generator> g_default_generators;

const at::Generator& default_generator(c10::DeviceIndex index) {
  // As the bridge's createHPUGenerator (backend/random.cpp): seeded from the CPU default
  // generator's seed at first use, which torch draws afresh in each process.
  std::call_once(g_generators_once, [] {
    const uint64_t seed = at::detail::getDefaultCPUGenerator().current_seed();
    for (int i = 0; i < kMaxDevices; ++i) {
      g_default_generators.push_back(
          at::make_generator<HPUGeneratorImpl>(static_cast<c10::DeviceIndex>(i), seed));
    }
  });
  if (index < 0) {
    index = t_current_device;
  }
  check_index(index);
  return g_default_generators[index];
}

// The CPU generator one random op on hpu draws from. As the bridge
// (backend/random.cpp, get_seed_hpu), the op takes one 32-bit number from the
// HPU generator, a mt19937 whose state equals the CPU's after the same seed, and
// seeds its kernel with it: the generator's state moves by one draw an op, and
// the values drawn are another stream than the CPU's for the same seed.
at::Generator cpu_generator_for(const at::Generator& gen) {
  auto* cpu = static_cast<HPUGeneratorImpl*>(gen.unsafeGetGeneratorImpl())
                  ->inner.get<at::CPUGeneratorImpl>();
  uint32_t seed = 0;
  {
    std::lock_guard<std::mutex> lock(cpu->mutex_);
    seed = cpu->random();
  }
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace hpu_emu

// ---------------------------------------------------------------- hooks

namespace at {
// The registry looks the class up by this exact name.
struct HPUHooks final : HPUHooksInterface {
  explicit HPUHooks(HPUHooksArgs /*unused*/) {}
  void init() const override {}
  bool hasHPU() const override {
    return hpu_emu::g_config.device_count > 0;
  }
  // torch picks one built-in accelerator and refuses a second ("Cannot have both HPU and
  // cuda."); a CUDA build counts as built, GPU or not. HPU is built when CUDA is not: on a
  // CPU build, as on a Gaudi, and on a CUDA build once stand_down_absent_cuda() ran.
  bool isBuilt() const override {
    return !at::detail::getCUDAHooks().isBuilt();
  }
  bool isAvailable() const override {
    return hpu_emu::g_config.device_count > 0;
  }
  bool hasPrimaryContext(DeviceIndex /*device_index*/) const override {
    return true;
  }
  DeviceIndex deviceCount() const override {
    return static_cast<DeviceIndex>(hpu_emu::g_config.device_count);
  }
  void setCurrentDevice(DeviceIndex device) const override {
    hpu_emu::check_index(device);
    hpu_emu::t_current_device = device;
  }
  DeviceIndex getCurrentDevice() const override {
    return hpu_emu::t_current_device;
  }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    auto old = hpu_emu::t_current_device;
    setCurrentDevice(device);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(hpu_emu::g_pinned_mutex);
    return hpu_emu::g_pinned.count(data) > 0;
  }
  Allocator* getPinnedMemoryAllocator() const override {
    return &hpu_emu::g_pinned_allocator;
  }
  Device getDeviceFromPtr(void* /*data*/) const override {
    return {DeviceType::HPU, hpu_emu::t_current_device};
  }
  const Generator& getDefaultGenerator(DeviceIndex device_index) const override {
    return hpu_emu::default_generator(device_index);
  }
  Generator getNewGenerator(DeviceIndex device_index) const override {
    if (device_index < 0) {
      device_index = hpu_emu::t_current_device;
    }
    return make_generator<hpu_emu::HPUGeneratorImpl>(device_index);
  }
};
REGISTER_HPU_HOOKS(HPUHooks);
}  // namespace at

namespace hpu_emu {

// ---------------------------------------------------------------- restrictions of hardware

void check_dtype(at::ScalarType dtype) {
  if (!g_config.fp16_supported && dtype == at::kHalf) {
    TORCH_CHECK(false, "float16 is not supported on ", g_config.generation,
                " (first-generation Gaudi has no fp16); use torch.bfloat16");
  }
}

// Without int64 support the real stack holds int64 as int32 on the device.
void check_int64_fits(const at::Tensor& cpu_src) {
  if (g_config.int64_supported || cpu_src.scalar_type() != at::kLong || cpu_src.numel() == 0) {
    return;
  }
  auto mn = cpu_src.min().item<int64_t>();
  auto mx = cpu_src.max().item<int64_t>();
  if (mn < std::numeric_limits<int32_t>::min() || mx > std::numeric_limits<int32_t>::max()) {
    TORCH_CHECK(false, "Error when trying to cast Long to Int, Input values range [", mn, ", ",
                mx, "] exceeds Int range [", std::numeric_limits<int32_t>::min(), ", ",
                std::numeric_limits<int32_t>::max(),
                "] (int64 is held as int32 on the device while PT_ENABLE_INT64_SUPPORT is off;"
                " set PT_ENABLE_INT64_SUPPORT=1)");
  }
}

// ---------------------------------------------------------------- zero-copy views

void release_hpu_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// A CPU storage over the bytes of an HPU storage, keeping the HPU storage alive. Resizable
// with the CPU allocator, so an out= kernel that grows its output still works; the new bytes
// are adopted back afterwards.
c10::Storage cpu_storage_over(const c10::Storage& hpu) {
  c10::StorageImpl* impl = hpu.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  c10::DataPtr dp(impl->_mutable_data_ptr_no_checks().get(), impl, &release_hpu_storage,
                  c10::Device(c10::DeviceType::CPU));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), impl->nbytes(), std::move(dp),
      c10::GetCPUAllocator(), /*resizable=*/true));
}

// The bits that change what a tensor's bytes mean.
void copy_view_bits(const at::Tensor& from, c10::TensorImpl* to) {
  if (from.is_conj()) {
    to->_set_conj(true);
  }
  if (from.is_neg()) {
    to->_set_neg(true);
  }
}

// A zero tensor (autograd's _efficientzerotensor, e.g. the gradient of sign) has no bytes:
// without its ZeroTensor key an hpu tensor of 0 bytes claimed its full size and the next read
// ran off the allocation. The key can only be given at construction.
c10::DispatchKeySet keys_like(c10::DispatchKey backend, const at::Tensor& like) {
  c10::DispatchKeySet ks(backend);
  if (C10_UNLIKELY(like._is_zerotensor())) {
    ks = ks | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  }
  return ks;
}

// A tensor over `storage` dispatched to `key`, with `like`'s dtype, geometry and view bits.
at::Tensor tensor_like(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys_like(key, like),
                                                    like.dtype());
  auto* impl = t.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  copy_view_bits(like, impl);
  return t;
}

at::Tensor cpu_view_with(const at::Tensor& hpu, c10::Storage storage) {
  return tensor_like(std::move(storage), c10::DispatchKey::CPU, hpu);
}

at::Tensor cpu_view(const at::Tensor& hpu) {
  return cpu_view_with(hpu, cpu_storage_over(hpu.storage()));
}

// An HPU storage owning memory that a CPU kernel allocated.
c10::Storage adopt_storage(const c10::Storage& cpu, c10::DeviceIndex device) {
  auto nbytes = static_cast<int64_t>(cpu.nbytes());
  account_alloc(device, nbytes);
  auto* ctx = new AdoptContext{
      c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(cpu.unsafeGetStorageImpl()), nbytes,
      device};
  c10::DataPtr dp(cpu.unsafeGetStorageImpl()->_mutable_data_ptr_no_checks().get(), ctx, &delete_adopted,
                  c10::Device(c10::DeviceType::HPU, device));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), static_cast<size_t>(nbytes), std::move(dp),
      &g_allocator, /*resizable=*/true));
}

at::Tensor hpu_tensor_over(const c10::Storage& storage, const at::Tensor& like) {
  return tensor_like(c10::Storage(storage), c10::DispatchKey::HPU, like);
}

// ---------------------------------------------------------------- structural kernels

// The allocator charges the current device: an allocation runs with it set to its target,
// restored afterwards (also when the allocation throws).
class OnDevice {
 public:
  explicit OnDevice(c10::DeviceIndex index) : saved_(t_current_device) {
    t_current_device = index;
  }
  ~OnDevice() { t_current_device = saved_; }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  c10::DeviceIndex saved_;
};

// A factory's arguments, checked as the real stack checks them: the device and dtype.
std::pair<c10::DeviceIndex, at::ScalarType> checked_factory_args(
    std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
    std::optional<at::Device> device) {
  auto index = resolve(device);
  auto st = c10::dtype_or_default(dtype);
  check_dtype(st);
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided,
              "only strided tensors are supported on hpu");
  return {index, st};
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout,
                               std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  auto [index, st] = checked_factory_args(dtype, layout, device);
  OnDevice on(index);
  return at::detail::empty_generic(size, &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::HPU), st,
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> /*pin_memory*/) {
  auto [index, st] = checked_factory_args(dtype, layout, device);
  OnDevice on(index);
  return at::detail::empty_strided_generic(
      size, stride, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::HPU), st);
}

at::Tensor as_cpu_operand(const at::Tensor& t) {
  return t.is_hpu() ? cpu_view(t) : t;
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  // Host data entering an int64 device tensor: check the source when it is int64 already
  // (before writing), the converted values otherwise.
  bool entering_int64 = !g_config.int64_supported && self.is_hpu() && !src.is_hpu() &&
                        self.scalar_type() == at::kLong;
  if (entering_int64 && src.scalar_type() == at::kLong) {
    check_int64_fits(src);
    entering_int64 = false;
  }
  TORCH_CHECK(!self._is_zerotensor(), "ZeroTensors are immutable. Please materialize the "
              "tensor using `.clone()`, if you want a mutable zero tensor.");
  auto dst_cpu = as_cpu_operand(self);
  if (C10_UNLIKELY(src._is_zerotensor())) {
    dst_cpu.zero_();
    return self;
  }
  auto src_cpu = as_cpu_operand(src);
  if (self.is_hpu()) {
    if (!src.is_hpu()) {
      g_copies_h2d.fetch_add(1, std::memory_order_relaxed);
    } else if (t_launch_depth == 0) {
      g_copies_d2d.fetch_add(1, std::memory_order_relaxed);
    } else {
      g_inner_ops.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (src.is_hpu()) {
    g_copies_d2h.fetch_add(1, std::memory_order_relaxed);  // the host waits for the device
    close_lazy_graph();
  }
  if (self.scalar_type() == at::kBool && src.scalar_type() == at::kBool) {
    // As the bridge's copies (a DMA of the bytes): a bool byte other than 0 or 1 (a uint8
    // or float tensor viewed as bool) arrives as it left; the CPU's bool copy rewrites it
    // to 0/1, which a later view back to the first dtype would show.
    dst_cpu.view(at::kByte).copy_(src_cpu.view(at::kByte), non_blocking);
    return self;
  }
  dst_cpu.copy_(src_cpu, non_blocking);
  if (entering_int64 && !at::isIntegralType(src.scalar_type(), /*includeBool=*/true)) {
    check_int64_fits(dst_cpu);
  }
  return self;
}

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  copy_(out, self, non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  at::Tensor out = dst;
  copy_(out, self, false);
  return dst;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  auto size = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return at::native::set_storage_cpu_(self, std::move(source), 0, {size}, {});
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0, g_allocator.allocate(0), &g_allocator, true));
  return at::native::set_storage_cpu_(self, std::move(storage), 0, {0}, {});
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  OnDevice on(self.device().index());
  return at::native::resize_(self, size, memory_format);
}

// ---------------------------------------------------------------- c10d

// Collectives have no HPU kernels: the fallback runs their CPU kernels on CPU views, and
// those ask the process group for its CPU backend. An hccl group has only an HPU backend
// (so CPU tensors are refused, as real HCCL does); the fallback hands the CPU kernel a
// shadow group whose CPU backend is that HPU backend.
std::mutex g_shadow_mutex;
std::unordered_map<const c10d::ProcessGroup*, c10::intrusive_ptr<c10d::ProcessGroup>> g_shadows;

c10::intrusive_ptr<c10d::ProcessGroup> shadow_group(
    const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  std::lock_guard<std::mutex> lock(g_shadow_mutex);
  auto it = g_shadows.find(pg.get());
  if (it != g_shadows.end()) {
    return it->second;
  }
  bool has_hpu = false;
  for (const auto& d : pg->getDeviceTypes()) {
    has_hpu = has_hpu || d.type() == c10::DeviceType::HPU;
  }
  if (!has_hpu) {
    return pg;
  }
  auto backend = pg->getBackend(c10::DeviceType::HPU);
  auto shadow = c10::make_intrusive<c10d::ProcessGroup>(pg->getRank(), pg->getSize());
  shadow->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
  shadow->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
  g_shadows.emplace(pg.get(), shadow);
  return shadow;
}

// ---------------------------------------------------------------- the fallback

// The CPU view is held here, not only on the stack: the CPU kernel pops its arguments, so an
// op returning nothing (`_fused_adam_`, `_foreach_*_`) or returning a different tensor would
// leave a raw pointer to a freed TensorImpl for sync_back.
struct Converted {
  at::Tensor cpu;
  c10::StorageImpl* cpu_storage;  // kept alive by `cpu`
  at::Tensor hpu;
  void* original_data;
  bool written;  // an argument the schema marks (a!): its resizes are mirrored back
};

bool is_low_precision(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || at::isFloat8Type(t);
}

struct FallbackState {
  c10::SmallVector<Converted, 8> converted;
  c10::SmallVector<c10::StorageImpl*, 4> cpu_inputs;  // genuine CPU operands
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 4> adopted;
  c10::DeviceIndex device = -1;
  bool has_hpu = false;
  bool cpu_operand = false;  // a CPU tensor of one or more dims beside HPU ones
  int moved_inputs = 0;      // CPU inputs a lazy op takes to the device (copies to count)
  bool low_precision = false;  // an HPU operand in float8, bfloat16 or float16
  const char* op_name = nullptr;
};

[[noreturn]] void device_mismatch(const FallbackState& st, const std::string& other) {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, "
              "hpu:", static_cast<int>(st.device), " and ", other, "! (when checking arguments"
              " for ", st.op_name, ")");
}

at::Tensor to_cpu_arg(const at::Tensor& t, FallbackState& st, bool strict,
                      bool written = false, bool lazy_input = false) {
  if (!t.defined()) {
    return t;
  }
  if (t.is_hpu()) {
    auto index = t.device().index();
    if (st.device < 0) {
      st.device = index;
    } else if (index != st.device) {
      device_mismatch(st, "hpu:" + std::to_string(index));
    }
    st.has_hpu = true;
    st.low_precision |= is_low_precision(t.scalar_type());
    // The same HPU storage may appear several times (x + x, views): one CPU storage each.
    c10::StorageImpl* hpu_storage = t.storage().unsafeGetStorageImpl();
    for (auto& c : st.converted) {
      if (c.hpu.storage().unsafeGetStorageImpl() == hpu_storage) {
        auto cpu = cpu_view_with(t, c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::
                                                     reclaim_copy(c.cpu_storage)));
        st.converted.push_back({cpu, c.cpu_storage, t, c.original_data, written});
        return cpu;
      }
    }
    auto cpu = cpu_view(t);
    st.converted.push_back({cpu, cpu.storage().unsafeGetStorageImpl(), t,
                            hpu_storage->_mutable_data_ptr_no_checks().get(), written});
    return cpu;
  }
  if (t.device().is_cpu()) {
    if (strict && t.dim() != 0) {
      if (lazy_input) {
        ++st.moved_inputs;  // the bridge copies it to the device; its CPU kernel reads it
      } else {
        st.cpu_operand = true;  // an error once an HPU operand is seen
      }
    }
    if (t.has_storage()) {
      st.cpu_inputs.push_back(t.storage().unsafeGetStorageImpl());
    }
  }
  return t;
}

// `Tensor(a!)` and `Tensor(a!)[]` (whose write annotation sits on the element type).
bool is_written(const c10::Argument& arg) {
  const auto* alias = arg.alias_info();
  if (alias == nullptr) {
    return false;
  }
  if (alias->isWrite()) {
    return true;
  }
  for (const auto& inner : alias->containedTypes()) {
    if (inner.isWrite()) {
      return true;
    }
  }
  return false;
}

bool is_generator_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::OptionalType) {
    return type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

at::Tensor from_cpu_result(const at::Tensor& t, FallbackState& st) {
  if (!t.defined() || !t.device().is_cpu()) {
    return t;
  }
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (auto& c : st.converted) {
    if (c.cpu.unsafeGetTensorImpl() == impl) {
      return c.hpu;
    }
  }
  c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  if (storage == nullptr) {
    return t;
  }
  for (auto& c : st.converted) {
    if (c.cpu_storage == storage) {
      return hpu_tensor_over(c.hpu.storage(), t);
    }
  }
  for (auto* s : st.cpu_inputs) {
    if (s == storage) {
      return t;  // the op handed back a CPU operand
    }
  }
  for (auto& a : st.adopted) {
    if (a.first == storage) {
      return hpu_tensor_over(a.second, t);
    }
  }
  if (g_lazy_mode.load(std::memory_order_relaxed) && at::isComplexType(t.scalar_type())) {
    // Gaudi has no complex dtypes: the bridge's lazy ops run a complex op on the host and
    // its result stays there (its lazy test_complex: torch.complex of hpu parts is a CPU
    // tensor).
    return t;
  }
  check_dtype(t.scalar_type());
  auto device = st.device < 0 ? t_current_device : st.device;
  auto hpu_storage = adopt_storage(t.storage(), device);
  st.adopted.emplace_back(storage, hpu_storage);
  return hpu_tensor_over(hpu_storage, t);
}

// An out= or in-place operand whose CPU kernel resized it: mirror the change on the HPU side.
void sync_back(const Converted& c) {
  c10::TensorImpl* hpu_impl = c.hpu.unsafeGetTensorImpl();
  c10::TensorImpl* cpu_impl = c.cpu.unsafeGetTensorImpl();
  auto& cpu_storage = cpu_impl->unsafe_storage();
  void* cpu_data = cpu_storage.unsafeGetStorageImpl()->_mutable_data_ptr_no_checks().get();
  if (cpu_data != c.original_data && cpu_storage.unsafeGetStorageImpl() == c.cpu_storage &&
      cpu_data != c.hpu.storage().unsafeGetStorageImpl()->_mutable_data_ptr_no_checks().get()) {
    auto device = c.hpu.device().index();
    auto adopted = adopt_storage(cpu_storage, device);
    auto* hpu_storage = c.hpu.storage().unsafeGetStorageImpl();
    hpu_storage->set_data_ptr_noswap(std::move(adopted.unsafeGetStorageImpl()->mutable_data_ptr()));
    hpu_storage->set_nbytes(cpu_storage.nbytes());
  }
  if (hpu_impl->sizes() != cpu_impl->sizes() || hpu_impl->strides() != cpu_impl->strides() ||
      hpu_impl->storage_offset() != cpu_impl->storage_offset()) {
    hpu_impl->set_sizes_and_strides(cpu_impl->sizes(), cpu_impl->strides(),
                                    cpu_impl->storage_offset());
  }
}

// all_gather_into_tensor / reduce_scatter_tensor: HCCL (like NCCL) only needs the large
// tensor to hold world_size times the elements of the small one, in any shape (Accelerate's
// gather hands a flat output for a 2-D input; a stacked (world, ...) output is documented).
// Gloo accepts only a concatenation along dim 0 (and aborts the process on a bad
// reduce_scatter shape), so both contiguous operands are handed to it flat.
void flatten_tensor_collective(torch::jit::Stack* stack, size_t begin, FallbackState& st,
                               int64_t world, bool gather) {
  auto flatten_pair = [&](c10::IValue& big_iv, c10::IValue& small_iv) -> std::pair<at::Tensor, at::Tensor> {
    at::Tensor big = big_iv.toTensor();
    at::Tensor small = small_iv.toTensor();
    TORCH_CHECK(big.numel() == small.numel() * world,
                gather ? "all_gather_into_tensor: output_tensor" : "reduce_scatter_tensor: input",
                " has ", big.numel(), " elements (shape ", big.sizes(), "); it must hold world_size (",
                world, ") times the ", small.numel(), " elements of ",
                gather ? "input_tensor" : "output", " (shape ", small.sizes(), ")");
    if (!big.is_contiguous() || !small.is_contiguous() || (big.dim() == 1 && small.dim() == 1)) {
      return {big, small};
    }
    auto flat_big = big.view({-1});
    auto flat_small = small.view({-1});
    // Results map back to the caller's tensors, not to the flat views.
    for (auto& c : st.converted) {
      if (c.cpu.unsafeGetTensorImpl() == big.unsafeGetTensorImpl()) {
        st.converted.push_back({flat_big, c.cpu_storage, c.hpu, c.original_data, false});
        break;
      }
    }
    for (auto& c : st.converted) {
      if (c.cpu.unsafeGetTensorImpl() == small.unsafeGetTensorImpl()) {
        st.converted.push_back({flat_small, c.cpu_storage, c.hpu, c.original_data, false});
        break;
      }
    }
    return {flat_big, flat_small};
  };
  // gather: (output, input); reduce_scatter: (output, input) with the input the large one
  c10::IValue& out_iv = (*stack)[begin];
  c10::IValue& in_iv = (*stack)[begin + 1];
  if (out_iv.isTensor() && in_iv.isTensor()) {
    auto r = gather ? flatten_pair(out_iv, in_iv) : flatten_pair(in_iv, out_iv);
    out_iv = gather ? r.first : r.second;
    in_iv = gather ? r.second : r.first;
  } else if (out_iv.isTensorList() && in_iv.isTensorList()) {
    auto outs = out_iv.toTensorList();
    auto ins = in_iv.toTensorList();
    TORCH_CHECK(outs.size() == ins.size(), "coalesced collective: ", outs.size(),
                " outputs for ", ins.size(), " inputs");
    c10::List<at::Tensor> new_outs;
    c10::List<at::Tensor> new_ins;
    for (size_t k = 0; k < outs.size(); ++k) {
      c10::IValue o = outs.get(k);
      c10::IValue in = ins.get(k);
      auto r = gather ? flatten_pair(o, in) : flatten_pair(in, o);
      new_outs.push_back(gather ? r.first : r.second);
      new_ins.push_back(gather ? r.second : r.first);
    }
    out_iv = std::move(new_outs);
    in_iv = std::move(new_ins);
  }
}

// ---------------------------------------------------------------- dtypes the CPU kernel lacks
// Gaudi runs float8, bfloat16 and float16 where many CPU kernels have no such dtype ("aminmax_cpu"
// not implemented for 'Float8_e4m3fn', add_relu's "Unsupported datatype" on bf16). The bridge
// itself answers an op it cannot run in a dtype by casting the floating arguments to float32,
// running the op again and casting the result back to the dtype it expected
// (hpu_ops/cpu_fallback_internal.h, _dispatch_fallback with unsupported_dtype); the emulator
// does the same when the CPU kernel underneath refuses such a dtype: the low-precision floating
// operands go in as float32 copies, written operands get the float32 result cast back, and a
// float32 result comes back in the dtype the op promises (its `dtype` argument, else the
// promotion of its floating inputs).

// The CPU kernel's refusal of a dtype (and only that: other errors keep their meaning).
bool is_dtype_gap(const c10::Error& e) {
  const std::string& what = e.msg();
  if (what.find("Unsupported datatype") != std::string::npos) {
    return true;
  }
  auto at = what.find("not implemented for '");
  if (at == std::string::npos) {
    return false;
  }
  auto name = what.substr(at + 21);
  return name.rfind("Half'", 0) == 0 || name.rfind("BFloat16'", 0) == 0 ||
         name.rfind("Float8_", 0) == 0;
}

struct Upcast {
  at::Tensor original;  // the CPU view the op was given
  at::Tensor wide;      // its float32 copy
  bool written;
};

struct UpcastState {
  c10::SmallVector<Upcast, 4> upcasts;
  bool have_dtype = false;
  at::ScalarType promoted = at::kFloat;  // of the floating tensor inputs, original dtypes
  bool promotable = true;
  bool retry = true;
};

void note_input_dtype(UpcastState& u, at::ScalarType t) {
  if (!at::isFloatingType(t) || !u.promotable) {
    return;
  }
  if (!u.have_dtype) {
    u.promoted = t;
    u.have_dtype = true;
  } else if (u.promoted != t) {
    if (at::isFloat8Type(u.promoted) || at::isFloat8Type(t)) {
      u.promotable = false;  // torch promotes no float8 pair; the result stays float32
    } else {
      u.promoted = at::promoteTypes(u.promoted, t);
    }
  }
}

at::Tensor widen_arg(const at::Tensor& t, bool written, UpcastState& u) {
  if (!t.defined()) {
    return t;
  }
  note_input_dtype(u, t.scalar_type());
  if (!is_low_precision(t.scalar_type())) {
    return t;
  }
  for (const auto& up : u.upcasts) {
    if (up.original.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
      return up.wide;
    }
  }
  auto wide = t.to(at::kFloat);
  u.upcasts.push_back({t, wide, written});
  return wide;
}

// The arguments again, their low-precision floating tensors as float32 copies.
void widen_args(const c10::FunctionSchema& schema, std::vector<c10::IValue>& args,
                UpcastState& u) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& iv = args[i];
    if (iv.isTensor()) {
      iv = widen_arg(iv.toTensor(), is_written(arguments[i]), u);
    } else if (iv.isTensorList()) {
      bool written = is_written(arguments[i]);
      auto list = iv.toTensorList();
      if (written) {
        // A list op may have written the tensors before the one it refused: retried only
        // when every tensor has one dtype, so the refusal came before any write.
        for (const at::Tensor& t : list) {
          if (t.defined() && t.scalar_type() != list.get(0).scalar_type()) {
            u.retry = false;
          }
        }
      }
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : list) {
        out.push_back(widen_arg(t, written, u));
      }
      iv = std::move(out);
    } else if (iv.isInt() && arguments[i].name() == "dtype") {
      u.promoted = iv.toScalarType();
      u.have_dtype = true;
      u.promotable = false;  // the op's own dtype argument decides
    }
  }
}

at::Tensor narrow_result(const at::Tensor& t, const UpcastState& u) {
  if (!t.defined()) {
    return t;
  }
  for (const auto& up : u.upcasts) {
    if (up.wide.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
      return up.original;
    }
  }
  if (t.scalar_type() == at::kFloat && u.have_dtype && is_low_precision(u.promoted)) {
    return t.to(u.promoted);
  }
  return t;
}

// Ops whose CPU kernel refuses a dtype or an argument the bridge's kernel takes, answered in
// Python (hpu_emulator/aten_gaps.py) from the bridge's own definition of the op: integer lerp
// as its sub, mult and add nodes, rounding of integers as identity, int32 indices. The
// handler is called only after the CPU kernel refused, with the arguments as CPU tensors
// over the device's bytes; NotImplemented from it lets the refusal stand.
std::unordered_set<c10::OperatorHandle> g_gap_ops;
PyObject* g_gap_handler = nullptr;  // kept for the process's life
std::mutex g_gap_mutex;

// Filled once at start, before any op runs; read without a lock afterwards.
bool is_gap_op(const c10::OperatorHandle& op) {
  return !g_gap_ops.empty() && g_gap_ops.count(op) != 0;
}

// The handler's answer pushed as the op's returns; false when it declined.
bool call_gap_handler(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t begin,
                      const std::vector<c10::IValue>& args) {
  const auto& schema = op.schema();
  py::gil_scoped_acquire gil;
  py::tuple py_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    py_args[i] = torch::jit::toPyObject(args[i]);
  }
  py::object result = py::reinterpret_borrow<py::object>(g_gap_handler)(
      schema.name(), schema.overload_name(), py_args);
  if (result.is(py::reinterpret_borrow<py::object>(Py_NotImplemented))) {
    return false;
  }
  stack->resize(begin);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].type()));
  } else if (returns.size() > 1) {
    auto items = result.cast<py::tuple>();
    TORCH_CHECK(items.size() == returns.size(), schema.name(), ": the emulator's kernel gave ",
                items.size(), " results for ", returns.size());
    for (size_t i = 0; i < returns.size(); ++i) {
      stack->push_back(torch::jit::toIValue(items[i], returns[i].type()));
    }
  }
  return true;
}

// Runs the op's CPU kernel. Where it refuses, a gap op goes to the Python handler and a
// low-precision floating dtype is run in float32 as the bridge's unsupported-dtype path does.
void redispatch_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t begin,
                    bool low_precision) {
  bool gap_op = is_gap_op(op);
  if (C10_LIKELY(!low_precision && !gap_op)) {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  std::vector<c10::IValue> args(stack->begin() + static_cast<std::ptrdiff_t>(begin), stack->end());
  std::exception_ptr refusal;
  bool dtype_gap = false;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  } catch (const c10::Error& e) {
    dtype_gap = low_precision && is_dtype_gap(e);
    if (!dtype_gap && !gap_op) {
      throw;
    }
    refusal = std::current_exception();
  }
  if (gap_op && call_gap_handler(op, stack, begin, args)) {
    return;
  }
  if (!dtype_gap) {
    std::rethrow_exception(refusal);
  }
  const auto& schema = op.schema();
  UpcastState u;
  widen_args(schema, args, u);
  if (u.upcasts.empty() || !u.retry) {
    std::rethrow_exception(refusal);  // nothing to widen, or not safely: the refusal stands
  }
  stack->resize(begin);
  stack->insert(stack->end(), args.begin(), args.end());
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (const auto& up : u.upcasts) {
    if (up.written) {
      at::Tensor original = up.original;
      if (original.sizes() != up.wide.sizes()) {
        original.resize_(up.wide.sizes());
      }
      original.copy_(up.wide);
    }
  }
  const auto num_returns = schema.returns().size();
  const auto rbegin = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    c10::IValue& iv = (*stack)[rbegin + i];
    if (iv.isTensor()) {
      iv = narrow_result(iv.toTensor(), u);
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : iv.toTensorList()) {
        out.push_back(narrow_result(t, u));
      }
      iv = std::move(out);
    }
  }
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const auto num_args = arguments.size();
  const auto begin = stack->size() - num_args;
  // A host read of a value (item()) moves data, it is not part of a compiled graph.
  if (g_lazy_trace.load(std::memory_order_relaxed) &&
      schema.name() != "aten::_local_scalar_dense") {
    trace_lazy(schema, *stack, begin, num_args);
  }
  FallbackState st;
  st.op_name = schema.name().c_str();

  bool has_generator_slot = false;
  c10::SmallVector<size_t, 2> generator_slots;
  c10::SmallVector<size_t, 2> pg_slots;

  bool any_written = false;

  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& iv = (*stack)[begin + i];
    if (iv.isTensor()) {
      bool written = is_written(arguments[i]);
      any_written |= written;
      // The bridge's lazy ops move a Tensor argument (not a list's) from the host; one
      // they write stays refused (the write would reach a copy, never the caller's tensor).
      bool lazy_input = !written && g_lazy_mode.load(std::memory_order_relaxed);
      iv = to_cpu_arg(iv.toTensor(), st, /*strict=*/true, written, lazy_input);
    } else if (iv.isTensorList()) {
      bool written = is_written(arguments[i]);
      any_written |= written;
      auto list = iv.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) {
        out.push_back(to_cpu_arg(t, st, /*strict=*/true, written));
      }
      iv = std::move(out);
    } else if (iv.isList()) {
      auto list = iv.toList();
      const auto& elem = list.elementType();
      if (elem->kind() == c10::TypeKind::OptionalType &&
          elem->containedType(0)->kind() == c10::TypeKind::TensorType) {
        // Tensor?[] (indices): like CUDA, CPU index tensors are accepted
        c10::List<std::optional<at::Tensor>> out;
        out.reserve(list.size());
        for (const c10::IValue& e : list) {
          if (e.isTensor()) {
            out.push_back(to_cpu_arg(e.toTensor(), st, /*strict=*/false));
          } else {
            out.push_back(std::nullopt);
          }
        }
        iv = std::move(out);
      } else if (elem->kind() == c10::TypeKind::ListType) {
        c10::impl::GenericList out(elem);
        out.reserve(list.size());
        for (const c10::IValue& inner : list) {
          if (inner.isTensorList()) {
            c10::List<at::Tensor> converted;
            for (const at::Tensor& t : inner.toTensorList()) {
              converted.push_back(to_cpu_arg(t, st, /*strict=*/true));
            }
            out.push_back(std::move(converted));
          } else {
            out.push_back(inner);
          }
        }
        iv = std::move(out);
      }
    } else if (iv.isDevice()) {
      auto d = iv.toDevice();
      if (d.is_hpu()) {
        auto index = resolve(d);
        if (st.device < 0) {
          st.device = index;
        }
        st.has_hpu = true;
        iv = c10::Device(c10::DeviceType::CPU);
      }
    } else if (iv.isNone()) {
      if (is_generator_type(arguments[i].type())) {
        generator_slots.push_back(i);
        has_generator_slot = true;
      }
    } else if (iv.isGenerator()) {
      const auto& gen = iv.toGenerator();
      if (gen.device().is_hpu()) {
        iv = cpu_generator_for(gen);
      }
    } else if (iv.isCustomClass()) {
      pg_slots.push_back(i);
    }
  }

  if (st.device < 0) {
    st.device = t_current_device;
  }
  if (st.has_hpu && st.cpu_operand) {
    device_mismatch(st, "cpu");
  }
  if (st.has_hpu && st.moved_inputs > 0) {
    g_copies_h2d.fetch_add(st.moved_inputs, std::memory_order_relaxed);
  }
  if (has_generator_slot) {
    for (auto i : generator_slots) {
      (*stack)[begin + i] = cpu_generator_for(default_generator(st.device));
    }
  }
  for (auto i : pg_slots) {
    c10::IValue& iv = (*stack)[begin + i];
    auto obj = iv.toObjectRef().type();
    if (obj->name() && obj->name()->qualifiedName() ==
                           "__torch__.torch.classes.c10d.ProcessGroup") {
      auto pg = iv.toCustomClass<c10d::ProcessGroup>();
      if (st.has_hpu && num_args >= 2) {
        const auto& name = schema.name();
        bool gather = name == "c10d::_allgather_base_" ||
                      name == "c10d::allgather_into_tensor_coalesced_";
        if (gather || name == "c10d::_reduce_scatter_base_" ||
            name == "c10d::reduce_scatter_tensor_coalesced_") {
          flatten_tensor_collective(stack, begin, st, pg->getSize(), gather);
        }
      }
      iv = shadow_group(pg);
    }
  }

  redispatch_cpu(op, stack, begin, st.low_precision);

  if (any_written) {
    for (auto& c : st.converted) {
      if (c.written) {
        sync_back(c);
      }
    }
  }

  const auto num_returns = schema.returns().size();
  const auto rbegin = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    c10::IValue& iv = (*stack)[rbegin + i];
    if (iv.isTensor()) {
      iv = from_cpu_result(iv.toTensor(), st);
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) {
        out.push_back(from_cpu_result(t, st));
      }
      iv = std::move(out);
    } else if (iv.isList() && st.has_hpu) {
      // Tensor[][] (allgather_'s output_tensors): hand back the caller's hpu tensors
      auto list = iv.toList();
      if (list.elementType()->kind() == c10::TypeKind::ListType) {
        c10::impl::GenericList out(list.elementType());
        out.reserve(list.size());
        for (const c10::IValue& inner : list) {
          if (inner.isTensorList()) {
            c10::List<at::Tensor> mapped;
            for (const at::Tensor& t : inner.toTensorList()) {
              mapped.push_back(from_cpu_result(t, st));
            }
            out.push_back(std::move(mapped));
          } else {
            out.push_back(inner);
          }
        }
        iv = std::move(out);
      }
    }
  }
}

// scaled_dot_product_attention (a composite kernel) asks the device which fused kernel to
// run: _fused_sdp_choice_meta redispatches straight to HPU, past the fake-tensor mode of a
// trace. The CPU kernel's answer reads only sizes, strides and dtypes, so it is asked with
// the tensors as they are: through the fallback it needed their bytes, which a trace with
// symbolic sizes has not (torch.compile of attention after a dynamo recompile failed).
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), query, key, value, attn_mask, dropout_p,
      is_causal, scale, enable_gqa);
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/,
              torch::jit::Stack* stack) {
  g_fallback_calls.fetch_add(1, std::memory_order_relaxed);
  if (C10_LIKELY(t_launch_depth == 0)) {
    g_eager_ops.fetch_add(1, std::memory_order_relaxed);
    if (g_eager_recipes_on.load(std::memory_order_relaxed)) {
      const auto count = op.schema().arguments().size();
      note_eager_recipe(op.schema(), *stack, stack->size() - count, count);
    }
  } else {
    g_inner_ops.fetch_add(1, std::memory_order_relaxed);
  }
  run_on_cpu(op, stack);
}

// convolution_overrideable is the hook ATen leaves for an accelerator's convolution; the
// bridge registers its HPU kernel there (hpu_op.yaml: convolution_overrideable and its
// backward). Here both run the CPU's convolution on the CPU views; the backward's bias
// sizes, which its schema does not carry, are the gradient's channels.
void convolution_overrideable(const c10::OperatorHandle& /*op*/, c10::DispatchKeySet ks,
                              torch::jit::Stack* stack) {
  static const auto conv =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  fallback(conv, ks, stack);
}

void convolution_backward_overrideable(const c10::OperatorHandle& /*op*/,
                                       c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  static const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  // (grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
  //  groups, output_mask): bias_sizes goes in after weight.
  const size_t begin = stack->size() - 10;
  auto mask = (*stack)[begin + 9].toBoolList();
  c10::IValue bias_sizes;
  if (mask.size() == 3 && mask.get(2)) {
    bias_sizes = std::vector<int64_t>{(*stack)[begin].toTensor().size(1)};
  }
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(begin + 3), std::move(bias_sizes));
  fallback(backward, ks, stack);
}

// _resize_output_ has kernels for Meta and each device, none for the CPU the fallback would
// reach: resize an out= tensor on its own device, as ATen's (with its warning when a tensor
// holding elements changes shape).
void resize_output_(const c10::OperatorHandle& /*op*/, c10::DispatchKeySet /*ks*/,
                    torch::jit::Stack* stack) {
  auto device = (*stack)[stack->size() - 1].toDevice();
  auto size = (*stack)[stack->size() - 2].toIntVector();
  at::Tensor self = (*stack)[stack->size() - 3].toTensor();
  TORCH_CHECK(self.device() == device, "out Tensor doesn't have the correct device set");
  at::native::resize_output(self, size);
  torch::jit::drop(*stack, 3);
  stack->emplace_back(std::move(self));
}

// _unique2(self, sorted, return_inverse, return_counts): the bridge's HPU kernels (eager
// habana_eager/ops/unique2.cpp, lazy lazy_kernels.cpp) return an undefined tensor (None in
// Python) for an output not asked for, where the CPU's returns an empty one.
void unique2(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const size_t begin = stack->size() - 4;
  const bool return_inverse = (*stack)[begin + 2].toBool();
  const bool return_counts = (*stack)[begin + 3].toBool();
  fallback(op, ks, stack);
  const size_t results = stack->size() - 3;
  if (!return_inverse) {
    (*stack)[results + 1] = at::Tensor();
  }
  if (!return_counts) {
    (*stack)[results + 2] = at::Tensor();
  }
}

// _unique(self, sorted, return_inverse): as _unique2, no inverse unless asked for
// (habana_eager/ops/unique.cpp).
void unique(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const bool return_inverse = (*stack)[stack->size() - 1].toBool();
  fallback(op, ks, stack);
  if (!return_inverse) {
    (*stack)[stack->size() - 1] = at::Tensor();
  }
}

// Faults of the Gaudi stack the emulator models (gaudi_faults.py says which, with sources).
// They are C++ kernels, as the bridge's are, so a Python kernel a library registers over
// them (Transformers' workarounds) is an override of a C++ kernel, which every torch
// allows. An empty message turns a fault off.
std::mutex g_fault_mutex;
std::string g_gather_int64_fault;
std::string g_masked_fill_int64_fault;

std::string fault_message(const std::string& fault) {
  std::lock_guard<std::mutex> guard(g_fault_mutex);
  return fault;
}

// gather(self, dim, index, *, sparse_grad): self is the first of four arguments.
void gather(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& self = torch::jit::peek(*stack, 0, 4).toTensor();
  if (self.scalar_type() == at::kLong) {
    auto message = fault_message(g_gather_int64_fault);
    TORCH_CHECK(message.empty(), message);
  }
  fallback(op, ks, stack);
}

// masked_fill_(self, mask, value), both overloads.
void masked_fill_(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                  torch::jit::Stack* stack) {
  const auto& self = torch::jit::peek(*stack, 0, 3).toTensor();
  if (self.scalar_type() == at::kLong) {
    auto message = fault_message(g_masked_fill_int64_fault);
    TORCH_CHECK(message.empty(), message);
  }
  fallback(op, ks, stack);
}

// .item(), bool(t), a Python number from an hpu tensor: a copy to the host that waits for
// the device, not a kernel launch.
void local_scalar_dense(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/,
                        torch::jit::Stack* stack) {
  g_scalar_reads.fetch_add(1, std::memory_order_relaxed);
  close_lazy_graph();
  run_on_cpu(op, stack);
}

// One synchronous stream per device: a tensor has no other stream to be recorded on.
// (DeepSpeed ZeRO-3 calls record_stream before freeing a partitioned parameter.)
void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {}

}  // namespace hpu_emu

// ---------------------------------------------------------------- registrations

TORCH_LIBRARY_IMPL(_, HPU, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hpu_emu::fallback>());
}

TORCH_LIBRARY_IMPL(aten, HPU, m) {
  m.impl("empty.memory_format", TORCH_FN(hpu_emu::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(hpu_emu::empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("copy_", TORCH_FN(hpu_emu::copy_));
  m.impl("_copy_from", TORCH_FN(hpu_emu::_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(hpu_emu::_copy_from_and_resize));
  m.impl("set_.source_Storage", TORCH_FN(hpu_emu::set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_cpu_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(hpu_emu::set_empty));
  m.impl("resize_", TORCH_FN(hpu_emu::resize_));
  m.impl("record_stream", TORCH_FN(hpu_emu::record_stream));
  m.impl("_fused_sdp_choice", TORCH_FN(hpu_emu::fused_sdp_choice));
  m.impl("_local_scalar_dense",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::local_scalar_dense>());
  m.impl("gather", torch::CppFunction::makeFromBoxedFunction<&hpu_emu::gather>());
  m.impl("masked_fill_.Scalar",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::masked_fill_>());
  m.impl("masked_fill_.Tensor",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::masked_fill_>());
  // Composite kernels that pick a backend by device: on hpu they would choose
  // convolution_overrideable, which has no kernel. Run them on the CPU views instead.
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&hpu_emu::fallback>());
  m.impl("convolution_backward",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::fallback>());
  m.impl("_unique2", torch::CppFunction::makeFromBoxedFunction<&hpu_emu::unique2>());
  m.impl("_unique", torch::CppFunction::makeFromBoxedFunction<&hpu_emu::unique>());
  m.impl("_resize_output_",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::resize_output_>());
  m.impl("convolution_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&hpu_emu::convolution_overrideable>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<
             &hpu_emu::convolution_backward_overrideable>());
}

// bf16 autocast with the bridge's policy (hpu_ops/autocast_helpers.h): its own op lists,
// not CUDA's. Every functional overload of an op named in a list gets the list's policy: the
// lower-precision list casts floating HPU inputs to the autocast dtype (the norms only their
// first input), the fp32 list to float, the promote list to the widest floating input. A list
// is checked in that order, so mul, in the lower list, runs in bf16 and is not promoted. The
// lower and fp32 lists are read from the files PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST and
// PT_HPU_AUTOCAST_FP32_OPS_LIST name (one op a line), at start, as there. Casts are not
// cached, as the bridge disables autocast's cast cache.
namespace hpu_emu {

enum class CastPolicy { lower, lower_first_arg, fp32, promote };

const std::unordered_set<std::string> kDefaultLowerOps{
    "addmm", "addbmm", "batch_norm", "baddbmm", "bmm", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "dot", "dropout",
    "feature_dropout", "group_norm", "instance_norm", "layer_norm", "leaky_relu", "linear",
    "matmul", "mean", "mm", "mul", "mv", "softmax", "log_softmax",
    "scaled_dot_product_attention"};
const std::unordered_set<std::string> kDefaultFp32Ops{
    "acos", "addcdiv", "asin", "atan2", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cdist", "cosh", "cosine_embedding_loss",
    "cosine_similarity", "cross_entropy_loss", "dist", "div", "divide", "embedding",
    "embedding_bag", "erfinv", "exp", "expm1", "hinge_embedding_loss", "huber_loss", "kl_div",
    "l1_loss", "log", "log10", "log1p", "log2", "logsumexp", "margin_ranking_loss", "mse_loss",
    "multi_margin_loss", "multilabel_margin_loss", "nll_loss", "pdist", "poisson_nll_loss",
    "pow", "reciprocal", "renorm", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss",
    "softplus", "tan", "topk", "triplet_margin_loss", "truediv", "true_divide"};
const std::unordered_set<std::string> kLowerFirstOps{"layer_norm", "group_norm",
                                                     "instance_norm", "batch_norm"};
const std::unordered_set<std::string> kPromoteOps{"add", "addcmul", "addcdiv", "cat", "div",
                                                  "exp", "mul", "pow", "sub", "iadd",
                                                  "truediv", "stack"};

std::unordered_set<std::string> autocast_list(const char* variable,
                                              const std::unordered_set<std::string>& defaults) {
  const char* path = std::getenv(variable);
  if (path == nullptr) {
    return defaults;
  }
  std::ifstream file(path);
  if (!file.is_open()) {
    TORCH_WARN("Failed to open file with ops to autocast: ", path, ". Default list loaded.");
    return defaults;
  }
  std::unordered_set<std::string> ops;
  for (std::string line; std::getline(file, line);) {
    ops.insert(line);
  }
  return ops;
}

bool autocast_eligible(const at::Tensor& t) {
  return t.defined() && t.is_hpu() && t.is_floating_point() && t.scalar_type() != at::kDouble;
}

// The widest floating type among the eligible inputs, starting from the autocast dtype
// (ATen's promote_type rule: any float32 input makes it float32).
void widen(at::ScalarType& current, const at::Tensor& t) {
  if (!autocast_eligible(t)) {
    return;
  }
  if (current != t.scalar_type()) {
    current = at::kFloat;
  }
}

at::Tensor autocast_cast(const at::Tensor& t, at::ScalarType to) {
  return autocast_eligible(t) && t.scalar_type() != to ? t.to(to) : t;
}

template <typename F>
void for_each_tensor_arg(torch::jit::Stack* stack, size_t first, size_t count, F&& f) {
  for (size_t i = first; i < first + count; ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      f(value, -1);
    } else if (value.isTensorList() || value.isList()) {
      f(value, 0);
    }
  }
}

template <CastPolicy P>
void autocast_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet /*ks*/,
                     torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastHPU);
  const size_t count = op.schema().arguments().size();
  const size_t first = stack->size() - count;
  at::ScalarType to = at::autocast::get_autocast_dtype(at::kHPU);
  if constexpr (P == CastPolicy::fp32) {
    to = at::kFloat;
  }
  if constexpr (P == CastPolicy::promote) {
    for_each_tensor_arg(stack, first, count, [&](c10::IValue& value, int) {
      if (value.isTensor()) {
        widen(to, value.toTensor());
      } else {
        for (const c10::IValue& item : value.toListRef()) {
          if (item.isTensor()) {
            widen(to, item.toTensor());
          }
        }
      }
    });
  }
  const size_t cast_count = P == CastPolicy::lower_first_arg ? 1 : count;
  for_each_tensor_arg(stack, first, cast_count, [&](c10::IValue& value, int) {
    if (value.isTensor()) {
      value = autocast_cast(value.toTensor(), to);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> cast;
      for (const at::Tensor& t : value.toTensorVector()) {
        cast.push_back(autocast_cast(t, to));
      }
      value = c10::IValue(cast);
    }
  });
  op.callBoxed(stack);
}

}  // namespace hpu_emu

TORCH_LIBRARY_IMPL(_, AutocastHPU, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastHPU, m) {
  using hpu_emu::CastPolicy;
  const auto lower = hpu_emu::autocast_list("PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST",
                                            hpu_emu::kDefaultLowerOps);
  const auto fp32 =
      hpu_emu::autocast_list("PT_HPU_AUTOCAST_FP32_OPS_LIST", hpu_emu::kDefaultFp32Ops);
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    const std::string base = name.name.substr(6);
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle || handle->schema().is_mutable()) {  // out= overloads keep no policy
      continue;
    }
    std::string op = base;
    if (!name.overload_name.empty()) {
      op += "." + name.overload_name;
    }
    if (lower.count(base)) {
      if (hpu_emu::kLowerFirstOps.count(base)) {
        m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                               &hpu_emu::autocast_kernel<CastPolicy::lower_first_arg>>());
      } else {
        m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                               &hpu_emu::autocast_kernel<CastPolicy::lower>>());
      }
    } else if (fp32.count(base)) {
      m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                             &hpu_emu::autocast_kernel<CastPolicy::fp32>>());
    } else if (hpu_emu::kPromoteOps.count(base)) {
      m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                             &hpu_emu::autocast_kernel<CastPolicy::promote>>());
    }
  }
}

// ---------------------------------------------------------------- CPU kernels first

namespace hpu_emu {

// An op with both a CPU kernel and a CompositeExplicitAutograd one (native_layer_norm, ...)
// would take the composite decomposition on HPU, which is slower than the CPU kernel and
// differs from it in the last bits. Routing those ops through the fallback runs the very
// CPU kernel, so HPU results equal CPU results.
std::unique_ptr<torch::Library> g_cpu_routes;

int route_to_cpu_kernels() {
  if (g_cpu_routes) {
    return 0;
  }
  g_cpu_routes = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::HPU, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  int routed = 0;
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::HPU)) {
      continue;
    }
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(
            c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      continue;
    }
    std::string full = name.name.substr(6);
    if (!name.overload_name.empty()) {
      full += "." + name.overload_name;
    }
    g_cpu_routes->impl(full.c_str(),
                       torch::CppFunction::makeFromBoxedFunction<&fallback>());
    ++routed;
  }
  return routed;
}

}  // namespace hpu_emu

// ---------------------------------------------------------------- Python control surface

namespace {

void configure(int device_count, int64_t memory_limit, bool int64_supported,
               bool fp16_supported, const std::string& generation) {
  TORCH_CHECK(device_count >= 1 && device_count <= hpu_emu::kMaxDevices,
              "device_count must be 1..8");
  hpu_emu::g_config.device_count = device_count;
  hpu_emu::g_config.memory_limit = memory_limit;
  hpu_emu::g_config.int64_supported = int64_supported;
  hpu_emu::g_config.fp16_supported = fp16_supported;
  hpu_emu::g_config.generation = generation;
}

std::unordered_map<std::string, int64_t> memory_stats(int device) {
  hpu_emu::check_index(static_cast<c10::DeviceIndex>(device));
  auto& s = hpu_emu::g_stats[device];
  return {{"InUse", s.in_use.load()},
          {"MaxInUse", s.max_in_use.load()},
          {"Limit", hpu_emu::g_config.memory_limit},
          {"NumAllocs", s.num_allocs.load()},
          {"NumFrees", s.num_frees.load()},
          {"ActiveAllocs", s.num_allocs.load() - s.num_frees.load()},
          {"MaxAllocSize", s.max_alloc_size.load()},
          {"TotalSystemAllocs", s.total_allocs.load()},
          {"TotalSystemFrees", s.total_frees.load()},
          {"TotalActiveAllocs", s.total_allocs.load() - s.total_frees.load()},
          {"TotalAllocated", s.total_allocated.load()}};
}

void reset_peak(int device) {
  hpu_emu::check_index(static_cast<c10::DeviceIndex>(device));
  auto& s = hpu_emu::g_stats[device];
  s.max_in_use.store(s.in_use.load());
}

void reset_accumulated(int device) {
  hpu_emu::check_index(static_cast<c10::DeviceIndex>(device));
  auto& s = hpu_emu::g_stats[device];
  s.num_allocs.store(0);
  s.num_frees.store(0);
  s.total_allocated.store(0);
}

}  // namespace

namespace hpu_emu {

// On a CUDA build torch's C++ takes CUDA for "the" accelerator, GPU or not, and
// device-generic code follows it: the autograd engine syncs every gradient of an hpu tensor
// on the accelerator's stream (torch 2.9 on), pin_memory() pins for the accelerator. With no
// GPU visible nothing CUDA can run, so CUDA's hooks are made to answer "not built", as on a
// CPU build: HPU is then the accelerator torch's C++ and Python see, as on a Gaudi. torch
// offers no switch for this, so the one virtual slot is rewritten in the CUDA hooks' table
// (Itanium C++ ABI, Linux). Returns "" when done, else why not.
bool cuda_not_built(const at::AcceleratorHooksInterface* /*self*/) {
  return false;
}

std::string stand_down_absent_cuda() {
  const at::AcceleratorHooksInterface& hooks = at::detail::getCUDAHooks();
  if (!hooks.isBuilt()) {
    return "";
  }
  using IsBuilt = bool (at::AcceleratorHooksInterface::*)() const;
  struct MemberPointer {
    uintptr_t ptr;
    ptrdiff_t adj;
  };
  static_assert(sizeof(IsBuilt) == sizeof(MemberPointer), "not the Itanium C++ ABI");
  IsBuilt member = &at::AcceleratorHooksInterface::isBuilt;
  MemberPointer raw;
  std::memcpy(&raw, &member, sizeof raw);
  if ((raw.ptr & 1) == 0 || raw.adj != 0) {
    return "isBuilt is not a virtual slot this emulator knows how to find";
  }
  void** slot = *reinterpret_cast<void** const*>(&hooks) + (raw.ptr - 1) / sizeof(void*);
  const auto page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page_size - 1));
  if (mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) {
    return std::string("mprotect: ") + std::strerror(errno);
  }
  *slot = reinterpret_cast<void*>(&cuda_not_built);
  mprotect(page, page_size, PROT_READ);
  if (hooks.isBuilt()) {
    return "the CUDA hooks still answer built";
  }
  return "";
}

}  // namespace hpu_emu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("configure", &configure);
  m.def("device_count", [] { return hpu_emu::g_config.device_count; });
  m.def("current_device", [] { return static_cast<int>(hpu_emu::t_current_device); });
  m.def("set_device", [](int index) {
    hpu_emu::check_index(static_cast<c10::DeviceIndex>(index));
    hpu_emu::t_current_device = static_cast<c10::DeviceIndex>(index);
  });
  m.def("current_stream", [] { return static_cast<int64_t>(hpu_emu::t_current_stream); });
  m.def("set_current_stream", [](int64_t id) {
    hpu_emu::t_current_stream = static_cast<c10::StreamId>(id);
  });
  m.def("memory_stats", &memory_stats);
  m.def("reset_peak_memory_stats", &reset_peak);
  m.def("reset_accumulated_memory_stats", &reset_accumulated);
  m.def("default_generator", [](int index) {
    return hpu_emu::default_generator(static_cast<c10::DeviceIndex>(index));
  });
  m.def("route_to_cpu_kernels", &hpu_emu::route_to_cpu_kernels);
  m.def("stand_down_absent_cuda", &hpu_emu::stand_down_absent_cuda);
  m.def("set_faults", [](const std::string& gather_int64, const std::string& masked_fill_int64) {
    std::lock_guard<std::mutex> guard(hpu_emu::g_fault_mutex);
    hpu_emu::g_gather_int64_fault = gather_int64;
    hpu_emu::g_masked_fill_int64_fault = masked_fill_int64;
  });
  m.def("fallback_calls", [] { return hpu_emu::g_fallback_calls.load(); });
  m.def("set_gap_handler", [](py::object handler, const std::vector<std::string>& names) {
    std::lock_guard<std::mutex> guard(hpu_emu::g_gap_mutex);
    if (hpu_emu::g_gap_handler == nullptr) {
      hpu_emu::g_gap_handler = handler.release().ptr();  // never released: lives to exit
    }
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : names) {
      auto dot = name.find('.');
      auto base = dot == std::string::npos ? name : name.substr(0, dot);
      auto overload = dot == std::string::npos ? std::string() : name.substr(dot + 1);
      auto op = dispatcher.findSchema({base, overload});
      TORCH_CHECK(op.has_value(), "hpu emulator: no operator ", name);
      hpu_emu::g_gap_ops.insert(*op);
    }
  });
  m.def("launch_counters", [] {
    return std::unordered_map<std::string, uint64_t>{
        {"eager_ops", hpu_emu::g_eager_ops.load()},
        {"inner_ops", hpu_emu::g_inner_ops.load()},
        {"copies_d2d", hpu_emu::g_copies_d2d.load()},
        {"copies_h2d", hpu_emu::g_copies_h2d.load()},
        {"copies_d2h", hpu_emu::g_copies_d2h.load()},
        {"scalar_reads", hpu_emu::g_scalar_reads.load()},
        {"eager_recipes", hpu_emu::g_eager_recipes.load()}};
  });
  m.def("eager_recipes", [](bool on) { hpu_emu::g_eager_recipes_on.store(on); });
  m.def("eager_recipes_forget", [] {
    std::lock_guard<std::mutex> guard(hpu_emu::g_eager_mutex);
    hpu_emu::g_eager_signatures.clear();
  });
  m.def("lazy_take_closed", [] {
    std::lock_guard<std::mutex> guard(hpu_emu::g_lazy_mutex);
    std::vector<std::pair<uint64_t, uint64_t>> closed;
    closed.swap(hpu_emu::g_lazy_closed);
    return closed;
  });
  m.def("enter_workspace", [] {
    if (hpu_emu::t_workspace_depth++ > 0) return;
    for (int d = 0; d < hpu_emu::kMaxDevices; ++d)
      hpu_emu::t_workspace_entry[d] = hpu_emu::g_stats[d].in_use.load();
  });
  // check: the kernel returned (its outputs are allocated); false when it raised. The
  // workspace is not capped: a kernel's intermediates are never checked against the limit.
  m.def("leave_workspace", [](bool check) {
    if (hpu_emu::t_workspace_depth == 0 || --hpu_emu::t_workspace_depth > 0) return;
    for (int d = 0; d < hpu_emu::kMaxDevices; ++d) {
      auto& s = hpu_emu::g_stats[d];
      int64_t now = s.in_use.load(), before = hpu_emu::t_workspace_entry[d];
      if (check && hpu_emu::g_config.memory_limit > 0 && now > hpu_emu::g_config.memory_limit &&
          now > before)
        hpu_emu::raise_out_of_memory(static_cast<c10::DeviceIndex>(d), now - before, before);
      // a kernel that raised returns nothing: what is still allocated is its workspace,
      // alive in the exception's frames
      if (check) hpu_emu::raise_peak(s, now);
    }
  });
  m.def("enter_launch", [] { ++hpu_emu::t_launch_depth; });
  m.def("leave_launch", [] {
    if (hpu_emu::t_launch_depth > 0) --hpu_emu::t_launch_depth;
  });
  m.def("lazy_trace", [](bool on) { hpu_emu::g_lazy_trace.store(on); });
  m.def("lazy_mode", [](bool on) { hpu_emu::g_lazy_mode.store(on); });
  m.def("lazy_take", [] {
    std::lock_guard<std::mutex> guard(hpu_emu::g_lazy_mutex);
    auto taken = std::make_pair(hpu_emu::g_lazy_hash, hpu_emu::g_lazy_ops);
    hpu_emu::g_lazy_hash = hpu_emu::kFnvOffset;
    hpu_emu::g_lazy_ops = 0;
    return taken;
  });
}
