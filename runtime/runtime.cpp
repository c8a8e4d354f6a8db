#include "runtime/runtime.h"

#include <cctype>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "cache/cache_key.h"
#include "common/log.h"
#include "jit/families.h"

namespace moejit {

std::map<std::string, std::string> CompiledKernel::lowered_names() const {
  std::map<std::string, std::string> out;
  for (const auto& e : entries) out[e.name] = e.lowered_name;
  return out;
}

Runtime::Runtime(Options options)
    : options_(std::move(options)), templates_(options_.template_dir) {
  set_log_level(options_.log_level);
  cache_ = std::make_unique<KernelCache>(options_.disk_cache ? options_.cache_dir : std::filesystem::path(),
                                         options_.cache_max_bytes);
}

Runtime::~Runtime() {
  modules_.clear();  // unload modules before the device releases its context
  device_.reset();
}

const CudaHeaders& Runtime::cuda_headers() const {
  std::lock_guard lock(mutex_);
  if (!cuda_headers_) cuda_headers_ = find_cuda_headers(options_.cuda_home);
  return *cuda_headers_;
}

RenderedKernel Runtime::render(const KernelSpec& spec) const { return render_kernel(complete_spec(spec), templates_); }

std::string Runtime::cache_key(const RenderedKernel& r) const {
  CacheKeyInputs in;
  in.source = r.source;
  for (const auto& path : r.template_paths) in.templates.emplace_back(path, templates_.sha256(path));
  in.options = nvrtc_options(r.spec.arch);
  in.nvrtc_version = nvrtc_version();
  in.cuda_headers_version = cuda_headers().cuda_version;
  in.arch = r.spec.arch;
  in.moejit_version = MOEJIT_VERSION_STRING;
  in.schema = KernelCache::kSchema;
  return compute_cache_key(in);
}

namespace {
std::shared_ptr<const CompiledKernel> from_entry(const KernelSpec& spec, std::shared_ptr<const CacheEntry> entry,
                                                 bool hit) {
  auto k = std::make_shared<CompiledKernel>();
  k->spec = spec;
  k->key = entry->key;
  k->cache_hit = hit;
  k->compile_seconds = entry->manifest.value("compile_seconds", 0.0);
  for (const auto& e : entry->manifest.at("entries")) {
    k->entries.push_back({e.at("name").get<std::string>(), e.at("name_expression").get<std::string>(),
                          e.at("lowered_name").get<std::string>(), ResourceUsage::from_json(e.at("resources"))});
  }
  k->entry = std::move(entry);
  return k;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

std::shared_ptr<const CompiledKernel> Runtime::compile_uncached(const RenderedKernel& r, const std::string& key) {
  CompileOutput out = nvrtc_compile(r, templates_, cuda_headers(), cache_->failed_sources_dir());
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : out.entries)
    entries.push_back({{"name", e.name}, {"name_expression", e.name_expression}, {"lowered_name", e.lowered_name},
                       {"resources", e.resources.to_json()}});
  nlohmann::json templates = nlohmann::json::object();
  for (const auto& path : r.template_paths) templates[path] = templates_.sha256(path);
  CacheEntry entry;
  entry.key = key;
  entry.source = r.source;
  entry.ptx = std::move(out.ptx);
  entry.cubin = std::move(out.cubin);
  entry.manifest = {{"spec", r.spec.to_json()},
                    {"entries", entries},
                    {"arch", r.spec.arch},
                    {"options", out.options},
                    {"nvrtc_version", nvrtc_version()},
                    {"cuda_headers_version", cuda_headers().cuda_version},
                    {"moejit_version", MOEJIT_VERSION_STRING},
                    {"templates", templates},
                    {"template_origin", templates_.origin()},
                    {"compile_seconds", out.seconds},
                    {"created", utc_now()}};
  cache_->record_compile(out.seconds);
  log(LogLevel::Info, "compiled {} in {:.3f} s", r.spec.to_string(), out.seconds);
  return from_entry(r.spec, cache_->publish(std::move(entry)), false);
}

std::shared_ptr<const CompiledKernel> Runtime::compile(const KernelSpec& spec) {
  RenderedKernel r = render(spec);
  const std::string key = cache_key(r);
  if (auto entry = cache_->find(key)) return from_entry(r.spec, std::move(entry), true);

  // One compile per key at a time in this process: later callers wait for the first one's result.
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> future;
  bool owner = false;
  {
    std::lock_guard lock(mutex_);
    auto it = in_flight_.find(key);
    if (it == in_flight_.end()) {
      future = promise.get_future().share();
      in_flight_.emplace(key, future);
      owner = true;
    } else {
      future = it->second;
    }
  }
  if (owner) {
    try {
      promise.set_value(compile_uncached(r, key));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
    std::lock_guard lock(mutex_);
    in_flight_.erase(key);
  }
  return future.get();
}

std::vector<std::shared_ptr<const CompiledKernel>> Runtime::compile_all(const std::vector<KernelSpec>& specs) {
  std::vector<std::shared_ptr<const CompiledKernel>> results(specs.size());
  std::vector<std::exception_ptr> errors(specs.size());
  std::atomic<std::size_t> next{0};
  unsigned threads = options_.compile_threads > 0 ? static_cast<unsigned>(options_.compile_threads)
                                                  : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(std::max<std::size_t>(1, specs.size())));
  auto worker = [&] {
    for (std::size_t i = next++; i < specs.size(); i = next++) {
      try {
        results[i] = compile(specs[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

bool Runtime::gpu_available(std::string* why) {
  try {
    driver();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

std::shared_ptr<DriverApi> Runtime::load_driver() {
  std::lock_guard lock(mutex_);
  if (!driver_) driver_ = DriverApi::load();
  return driver_;
}

DriverApi& Runtime::driver() { return device().api(); }

Device& Runtime::device() {
  load_driver();
  std::lock_guard lock(mutex_);
  if (!device_) device_ = std::make_unique<Device>(driver_, 0);
  device_->make_current();
  return *device_;
}

std::string Runtime::device_arch() { return device().info().arch(); }

std::shared_ptr<const Module> Runtime::load(const KernelSpec& spec) {
  Device& dev = device();
  auto compiled = compile(spec);
  auto module_key = std::make_pair(dev.context(), compiled->key);
  {
    std::lock_guard lock(mutex_);
    if (auto it = modules_.find(module_key); it != modules_.end()) return it->second;
  }
  std::shared_ptr<const Module> module;
  try {
    module = std::make_shared<const Module>(driver_, compiled->entry->cubin, compiled->lowered_names());
  } catch (const Error& e) {
    if (!compiled->cache_hit) throw;
    cache_->invalidate(compiled->key, fmt::format("the driver rejected its cubin: {}", e.message()));
    compiled = compile(spec);
    module = std::make_shared<const Module>(driver_, compiled->entry->cubin, compiled->lowered_names());
  }
  std::lock_guard lock(mutex_);
  return modules_.emplace(module_key, std::move(module)).first->second;
}

DbMetadata Runtime::db_metadata() {
  DbMetadata m;
  m.moejit_version = MOEJIT_VERSION_STRING;
  m.schema = TunedDb::kSchema;
  m.nvrtc_version = nvrtc_version();
  const DeviceInfo& info = device().info();
  m.device_name = info.name;
  m.sm_count = info.sm_count;
  m.arch = info.arch();
  return m;
}

std::filesystem::path Runtime::user_db_path() {
  if (!options_.tuned_db.empty()) return options_.tuned_db;
  if (!options_.disk_cache || options_.cache_dir.empty()) return {};
  std::string name = device().info().name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return options_.cache_dir / "tuned" / (name + ".json");
}

void Runtime::reload_tuned_dbs() {
  std::lock_guard lock(mutex_);
  tuned_dbs_.reset();
}

std::vector<TunedEntry> Runtime::tuned_entries(const std::string& shape_key) {
  if (!options_.use_tuned_dbs) return {};  // MOEJIT_TUNED_DBS=0: comparing against the heuristic
  const DbMetadata current = db_metadata();
  const std::filesystem::path user = user_db_path();
  std::lock_guard lock(mutex_);
  if (!tuned_dbs_) {
    tuned_dbs_.emplace();
    std::string warning;
    for (const auto& f : detail::embedded_tuned_dbs()) {
      TunedDb db = TunedDb::parse(f.text, std::string("shipped ") + f.path, &warning);
      tuned_dbs_->emplace_back(std::string("shipped ") + f.path, std::move(db));
    }
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    if (options_.disk_cache && !options_.cache_dir.empty())
      for (const auto& e : std::filesystem::directory_iterator(options_.cache_dir / "tuned", ec))
        if (e.path().extension() == ".json" && e.path() != user) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (!user.empty()) files.push_back(user);  // the user's own DB wins
    for (const auto& path : files) {
      std::string w;
      TunedDb db = TunedDb::load(path, &w);
      if (!w.empty()) log(LogLevel::Warn, "{}", w);
      tuned_dbs_->emplace_back(path.string(), std::move(db));
    }
    if (!warning.empty()) log(LogLevel::Warn, "{}", warning);
  }
  std::map<int, TunedEntry> merged;
  for (const auto& [origin, db] : *tuned_dbs_) {
    const auto buckets = db.buckets(shape_key);
    if (buckets.empty()) continue;
    const DbMatch match = db.match(current);
    if (match == DbMatch::OtherDevice) continue;
    if (match == DbMatch::Stale && stale_db_warned_.insert(origin).second)
      log(LogLevel::Warn, "tuned DB {} was made by moejit {} / NVRTC {} on {} SMs; using it, re-tune with `moejit tune`",
          origin, db.metadata().moejit_version, db.metadata().nvrtc_version, db.metadata().sm_count);
    for (const auto& e : buckets) merged[e.m] = e;
  }
  std::vector<TunedEntry> out;
  for (const auto& [m, e] : merged) out.push_back(e);
  return out;
}

}  // namespace moejit
