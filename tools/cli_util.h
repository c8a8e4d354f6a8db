// Argument parsing shared by the `moejit` subcommands. Exit codes: 0 ok, 1 usage error, 2 failure.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace moejit::cli {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 1;
constexpr int kExitFailure = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // --name value (repeatable)
  std::set<std::string> flags;                               // --name (no value)

  bool has(const std::string& name) const { return values.count(name) || flags.count(name); }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& all(const std::string& name) const;
};

// `value_options` take a value, `flag_options` do not; anything else is a UsageError.
Args parse_args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                const std::set<std::string>& flag_options);

// Options from the environment, with --cache-dir applied.
Options options_from(const Args& args);

int cmd_inspect(const std::vector<std::string>& argv);
int cmd_compile(const std::vector<std::string>& argv);
int cmd_cache(const std::vector<std::string>& argv);
int cmd_demo(const std::vector<std::string>& argv);
int cmd_tune(const std::vector<std::string>& argv);

}  // namespace moejit::cli
