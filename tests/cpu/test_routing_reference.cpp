// The CPU reference of routing_sort against hand-worked cases.
#include <doctest/doctest.h>

#include "runtime/routing_reference.h"

using namespace moejit;

TEST_CASE("reference routing: sorted by expert, stable by position, padded to block_m") {
  // 3 tokens, top_k 2, 4 experts, block_m 2.
  std::vector<int> ids = {2, 0,   // token 0
                          0, 3,   // token 1
                          2, 1};  // token 2
  auto r = reference_routing_sort(ids, 3, 2, 4, 4, {}, 2);
  CHECK(r.expert_counts == std::vector<int>{2, 1, 2, 1});
  CHECK(r.expert_offsets == std::vector<int>{0, 2, 3, 5, 6});
  CHECK(r.padded_offsets == std::vector<int>{0, 2, 4, 6, 8});
  CHECK(r.gather_index == std::vector<int>{1, 2, 5, -1, 0, 4, 3, -1});
  CHECK(r.scatter_index == std::vector<int>{4, 0, 1, 6, 5, 2});
  CHECK(r.tile_expert == std::vector<int>{0, 1, 2, 3});
  CHECK(r.tile_rows == std::vector<int>{2, 1, 2, 1});
  CHECK(r.tiles == 4);
  CHECK(!r.bad_ids);
}

TEST_CASE("reference routing: expert_map drops remote experts; bad ids are flagged and dropped") {
  std::vector<int> ids = {0, 1, 2, 3};
  auto r = reference_routing_sort(ids, 2, 2, 4, 2, {-1, 0, -1, 1}, 4);
  CHECK(r.expert_counts == std::vector<int>{1, 1});
  CHECK(r.scatter_index == std::vector<int>{-1, 0, -1, 4});
  CHECK(r.gather_index == std::vector<int>{1, -1, -1, -1, 3, -1, -1, -1});
  auto bad = reference_routing_sort({0, 9}, 1, 2, 4, 4, {}, 1);
  CHECK(bad.bad_ids);
  CHECK(bad.scatter_index == std::vector<int>{0, -1});
}
