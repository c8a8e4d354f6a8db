// The `moejit` command line: inspect generated kernels, compile ahead into the cache, manage the
// cache, and run the demo. Logic lives in the library; this only parses and prints.
#include <fmt/format.h>

#include <cstring>

#include "common/error.h"
#include "tools/cli_util.h"

namespace {
constexpr const char* kUsage = R"(moejit — run-time generated Mixture-of-Experts kernels

usage: moejit <command> [options]     (moejit <command> --help for details)

commands:
  inspect   render, compile and show a kernel: source, PTX, resources, SASS
  compile   compile kernels ahead into the cache (--spec file.json or --model config.json)
  cache     manage the kernel cache: ls, verify, prune, clear, stats
  demo      compile a top_k=6 MoE layer's kernels, show them, and run + verify the layer on a GPU
  tune      time tile configs of a model's MoE layer on this GPU and write the fastest to a tuned DB

exit status: 0 ok, 1 usage error, 2 failure
)";
}  // namespace

int main(int argc, char** argv) {
  using namespace moejit::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    fmt::print("{}", kUsage);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  std::string command = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  try {
    if (command == "inspect") return cmd_inspect(rest);
    if (command == "compile") return cmd_compile(rest);
    if (command == "cache") return cmd_cache(rest);
    if (command == "demo") return cmd_demo(rest);
    if (command == "tune") return cmd_tune(rest);
    fmt::print(stderr, "moejit: unknown command '{}'\n\n{}", command, kUsage);
    return kExitUsage;
  } catch (const UsageError& e) {
    fmt::print(stderr, "moejit {}: {}\n(see moejit {} --help)\n", command, e.what(), command);
    return kExitUsage;
  } catch (const moejit::Error& e) {
    // Bad parameters are the user's to fix: usage error; anything else is a failure.
    fmt::print(stderr, "{}\n", e.what());
    return e.phase() == moejit::Phase::Validate ? kExitUsage : kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "moejit {}: {}\n", command, e.what());
    return kExitFailure;
  }
}
