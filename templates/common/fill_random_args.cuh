// Arguments of fill_random. Plain C++: the host includes this header too.
#pragma once

namespace moejit {

// Element type of fill_random (template parameter OUT_TYPE); the 16-bit codes equal MoeDType's.
enum FillType : int { kFillBF16 = 0, kFillF16 = 1, kFillF32 = 2 };

struct FillRandomArgs {
  void* out;
  unsigned long long count;
  unsigned long long seed;
  float scale;
};

}  // namespace moejit
