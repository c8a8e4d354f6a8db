#include "autotune/timing.h"

#include <algorithm>

#include "common/error.h"
#include "runtime/event_timer.h"

namespace moejit {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double time_graph_us(DriverApi& api, CUstream stream, int inner, int reps, const std::function<void(int)>& body) {
  MOEJIT_CHECK_CU(api, Launch, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  try {
    for (int i = 0; i < inner; ++i) body(i);
  } catch (...) {
    CUgraph broken = nullptr;
    api.cuStreamEndCapture(stream, &broken);  // leave the stream usable
    if (broken) api.cuGraphDestroy(broken);
    throw;
  }
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  MOEJIT_CHECK_CU(api, Launch, cuStreamEndCapture(stream, &graph));
  MOEJIT_CHECK_CU(api, Launch, cuGraphInstantiate(&exec, graph, 0));
  EventTimer timer(api);
  std::vector<double> samples;
  for (int r = 0; r < reps + 3; ++r) {
    const double ms = timer.time_ms(stream, [&] { MOEJIT_CHECK_CU(api, Launch, cuGraphLaunch(exec, stream)); });
    if (r >= 3) samples.push_back(ms * 1e3 / inner);
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  return median(samples);
}

}  // namespace moejit
