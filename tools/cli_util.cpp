#include "tools/cli_util.h"

namespace moejit::cli {

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values.find(name);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& Args::all(const std::string& name) const {
  static const std::vector<std::string> kNone;
  auto it = values.find(name);
  return it == values.end() ? kNone : it->second;
}

Args parse_args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
                const std::set<std::string>& flag_options) {
  Args a;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      a.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (flag_options.count(name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
      a.flags.insert(name);
    } else if (value_options.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      a.values[name].push_back(value);
    } else {
      throw UsageError("unknown option --" + name);
    }
  }
  return a;
}

Options options_from(const Args& args) {
  Options o = Options::from_env();
  if (args.has("cache-dir")) {
    o.cache_dir = args.get("cache-dir");
    o.disk_cache = true;
  }
  return o;
}

}  // namespace moejit::cli
