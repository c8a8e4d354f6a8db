// SHA-256, options, errors, logging, arch choice, and the driver loader on a machine without a GPU.
#include <doctest/doctest.h>

#include <cstdlib>

#include "common/error.h"
#include "common/options.h"
#include "common/sha256.h"
#include "jit/template_store.h"
#include "runtime/device.h"
#include "runtime/driver.h"

using namespace moejit;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Streaming in odd pieces gives the same digest as one update.
  Sha256 h;
  for (std::size_t i = 0; i < million.size(); i += 997) h.update(std::string_view(million).substr(i, 997));
  CHECK(h.hex() == sha256_hex(million));
}

TEST_CASE("embedded templates carry the hash CMake computed, and it matches ours") {
  const auto& embedded = detail::embedded_templates();
  REQUIRE(!embedded.empty());
  for (const auto& t : embedded) {
    INFO(t.path);
    CHECK(sha256_hex(t.text) == t.sha256);
  }
  TemplateStore store;
  auto closure = store.closure("routing/routing_sort.cuh");
  CHECK(closure == std::vector<std::string>{"common/block_scan.cuh", "common/dependent_launch.cuh",
                                            "common/host_device.cuh", "routing/routing_sort.cuh",
                                            "routing/routing_sort_args.cuh"});
}

TEST_CASE("options parse the environment and reject malformed values by name") {
  ::setenv("MOEJIT_CACHE_DIR", "/tmp/moejit-opts", 1);
  ::setenv("MOEJIT_CACHE_MAX_MB", "64", 1);
  ::setenv("MOEJIT_LOG", "debug", 1);
  Options o = Options::from_env();
  CHECK(o.cache_dir == "/tmp/moejit-opts");
  CHECK(o.cache_max_bytes == 64ull << 20);
  CHECK(o.log_level == LogLevel::Debug);
  ::setenv("MOEJIT_CACHE_MAX_MB", "lots", 1);
  try {
    Options::from_env();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.phase() == Phase::Validate);
    CHECK(std::string(e.what()).find("MOEJIT_CACHE_MAX_MB") != std::string::npos);
  }
  ::unsetenv("MOEJIT_CACHE_MAX_MB");
  ::setenv("MOEJIT_LOG", "loud", 1);
  CHECK_THROWS_AS(Options::from_env(), Error);
  ::unsetenv("MOEJIT_LOG");
  ::unsetenv("MOEJIT_CACHE_DIR");
  // The work queue: unset = the layer decides (-1), else forced on / off; not a boolean = error.
  CHECK(Options::from_env().work_queue == -1);
  ::setenv("MOEJIT_WORK_QUEUE", "0", 1);
  CHECK(Options::from_env().work_queue == 0);
  ::setenv("MOEJIT_WORK_QUEUE", "1", 1);
  CHECK(Options::from_env().work_queue == 1);
  ::setenv("MOEJIT_WORK_QUEUE", "sometimes", 1);
  CHECK_THROWS_AS(Options::from_env(), Error);
  ::unsetenv("MOEJIT_WORK_QUEUE");
}

TEST_CASE("errors carry their structured fields") {
  Error e(Phase::Compile, "boom", {"log text", {"-a", "-b"}, "/tmp/x.cu"});
  CHECK(e.phase() == Phase::Compile);
  CHECK(e.nvrtc_log() == "log text");
  CHECK(e.options().size() == 2);
  CHECK(e.saved_source_path() == "/tmp/x.cu");
  std::string what = e.what();
  CHECK(what.find("[compile]") != std::string::npos);
  CHECK(what.find("/tmp/x.cu") != std::string::npos);
  CHECK(what.find("log text") != std::string::npos);
}

TEST_CASE("arch choice: arch-specific targets on 9.0 and 10.0") {
  CHECK(arch_for_compute_capability(9, 0) == "sm_90a");
  CHECK(arch_for_compute_capability(10, 0) == "sm_100a");
  CHECK(arch_for_compute_capability(8, 0) == "sm_80");
  CHECK(arch_for_compute_capability(8, 9) == "sm_89");
  CHECK(arch_for_compute_capability(12, 0) == "sm_120");
}

TEST_CASE("the driver loader fails plainly, and only when asked, where there is no driver") {
  std::string why;
  bool available = DriverApi::available(&why);
  if (!available) {
    CHECK(!why.empty());
    try {
      DriverApi::load();
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.phase() == Phase::Driver);
      MESSAGE("no driver here, as expected on CI: " << e.message());
    }
  } else {
    MESSAGE("a CUDA driver is present on this machine");
  }
}
