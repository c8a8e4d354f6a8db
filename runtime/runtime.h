// Runtime: owns the options, the templates, the kernel cache and (lazily) the driver and device.
// It composes the one-way flow: spec -> rendered source -> cache key -> cache hit or NVRTC compile
// -> (on a GPU) module per context. No global state: engines pass a Runtime around.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autotune/tuned_db.h"
#include "cache/disk_cache.h"
#include "common/options.h"
#include "jit/cuda_paths.h"
#include "jit/kernel_spec.h"
#include "jit/nvrtc_compiler.h"
#include "jit/source_render.h"
#include "jit/template_store.h"
#include "runtime/device.h"
#include "runtime/module.h"

namespace moejit {

// What a compile (or cache hit) produced: source, PTX, cubin, entry points and their resources.
struct CompiledKernel {
  KernelSpec spec;
  std::string key;
  bool cache_hit = false;
  std::shared_ptr<const CacheEntry> entry;  // source, ptx, cubin, manifest
  std::vector<CompiledEntry> entries;
  double compile_seconds = 0;               // of the compile that produced it
  std::map<std::string, std::string> lowered_names() const;
};

class Runtime {
 public:
  explicit Runtime(Options options = Options::from_env());
  ~Runtime();

  const Options& options() const { return options_; }
  const TemplateStore& templates() const { return templates_; }
  KernelCache& cache() { return *cache_; }

  // --- no GPU needed ---
  RenderedKernel render(const KernelSpec& spec) const;  // completes the spec first
  std::string cache_key(const RenderedKernel& rendered) const;
  // Cache hit, or NVRTC compile + publish. Thread-safe; concurrent requests for one key compile once.
  std::shared_ptr<const CompiledKernel> compile(const KernelSpec& spec);
  // Compiles many specs in parallel (Options::compile_threads). Every spec is attempted; the first
  // failure is rethrown after all finish.
  std::vector<std::shared_ptr<const CompiledKernel>> compile_all(const std::vector<KernelSpec>& specs);

  // --- GPU ---
  bool gpu_available(std::string* why = nullptr);
  // The driver, with device 0's primary context current on the calling thread. Throws Error(Driver)
  // saying plainly when there is no driver or GPU.
  DriverApi& driver();
  Device& device();  // device 0, primary context retained; made current on the calling thread
  std::string device_arch();  // the arch to compile for on this machine's device 0
  // Compiled and loaded into the device's context; cached per (context, key). A cached cubin the
  // driver rejects is dropped from the cache and rebuilt once.
  std::shared_ptr<const Module> load(const KernelSpec& spec);

  // --- tuned configs ---
  // What a DB written on this machine would carry (needs the GPU for the device fields).
  DbMetadata db_metadata();
  // The user's DB file: Options::tuned_db, else <cache_dir>/tuned/<device>.json (empty without a
  // disk cache and without MOEJIT_TUNED_DB).
  std::filesystem::path user_db_path();
  // Tuned buckets for a layer shape on this device, ascending M: the shipped DBs (embedded), then
  // the user's files, later ones replacing earlier buckets. Files are read once per Runtime; DBs of
  // another device or arch are ignored, stale ones used with one warning.
  std::vector<TunedEntry> tuned_entries(const std::string& shape_key);
  void reload_tuned_dbs();  // after writing a DB

 private:
  const CudaHeaders& cuda_headers() const;
  std::shared_ptr<DriverApi> load_driver();
  std::shared_ptr<const CompiledKernel> compile_uncached(const RenderedKernel& rendered, const std::string& key);

  Options options_;
  TemplateStore templates_;
  std::unique_ptr<KernelCache> cache_;
  mutable std::mutex mutex_;
  mutable std::optional<CudaHeaders> cuda_headers_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>> in_flight_;
  std::shared_ptr<DriverApi> driver_;
  std::unique_ptr<Device> device_;
  std::map<std::pair<CUcontext, std::string>, std::shared_ptr<const Module>> modules_;
  std::optional<std::vector<std::pair<std::string, TunedDb>>> tuned_dbs_;  // (origin, DB), in priority order
  std::set<std::string> stale_db_warned_;
};

}  // namespace moejit
