// Arguments of the fused small-batch routing kernel. Plain C++: the host includes this header too.
#pragma once

#include "routing/routing_sort_args.cuh"
#include "routing/routing_topk_args.cuh"

namespace moejit {

struct RoutingFusedArgs {
  RoutingTopkArgs topk;  // its topk_ids / topk_weights are what sort.topk_ids reads
  RoutingSortArgs sort;  // num_ctas = 1; error_flags zeroed by the kernel
};

}  // namespace moejit
