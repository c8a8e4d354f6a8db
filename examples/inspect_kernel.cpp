// Example: build a kernel spec with the C++ API, compile it (through the cache) and print its
// generated source, the head of its PTX and its resource report. Runs without a GPU.
//
//   build/examples/inspect_kernel [top_k] [arch]
#include <fmt/format.h>

#include <string>

#include "jit/families.h"
#include "runtime/runtime.h"

int main(int argc, char** argv) {
  const std::string top_k = argc > 1 ? argv[1] : "6";
  const std::string arch = argc > 2 ? argv[2] : "sm_90a";
  try {
    moejit::Runtime runtime{moejit::Options::from_env()};
    moejit::KernelSpec spec = moejit::make_spec("routing_sort", arch, {{"top_k", top_k}});
    fmt::print("spec: {}\n\n--- generated source ---\n{}\n", spec.to_json().dump(), runtime.render(spec).source);

    auto compiled = runtime.compile(spec);
    const std::string& ptx = compiled->entry->ptx;
    fmt::print("--- PTX (first 12 lines of {} bytes) ---\n", ptx.size());
    std::size_t pos = 0;
    for (int line = 0; line < 12 && pos < ptx.size(); ++line) {
      std::size_t end = ptx.find('\n', pos);
      fmt::print("{}\n", ptx.substr(pos, end - pos));
      pos = end == std::string::npos ? ptx.size() : end + 1;
    }
    fmt::print("\n--- resources ({}; key {}) ---\n", compiled->cache_hit ? "from cache" : "compiled now",
               compiled->key.substr(0, 16));
    for (const auto& e : compiled->entries)
      fmt::print("{:<8} registers={:<4} stack={}B spills={}/{}B static smem={}B  {}\n", e.name, e.resources.registers,
                 e.resources.stack_bytes, e.resources.spill_store_bytes, e.resources.spill_load_bytes,
                 e.resources.static_shared_bytes, e.lowered_name);
    return 0;
  } catch (const moejit::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
