// Renders a complete KernelSpec into the tiny generated source: one #include of the family's template
// and one explicit instantiation per entry point. No kernel bodies live in strings.
#pragma once

#include <string>
#include <vector>

#include "jit/kernel_spec.h"
#include "jit/template_store.h"

namespace moejit {

struct RenderedEntry {
  std::string name;             // "count"
  std::string name_expression;  // "moejit::routing_count_kernel<6, 32, 256, 128>": NVRTC lowers it
};

struct RenderedKernel {
  KernelSpec spec;  // complete
  std::string source;
  std::string source_name;                // "routing_sort.cu"
  std::vector<std::string> template_paths;  // the header and what it includes, for NVRTC and the key
  std::vector<RenderedEntry> entries;
};

// `spec` must be complete (complete_spec); throws Error(Render) otherwise.
RenderedKernel render_kernel(const KernelSpec& spec, const TemplateStore& templates);

}  // namespace moejit
