// Element types of the GEMM operands (template parameter DTYPE). Plain C++: the host includes it.
#pragma once

namespace moejit {

enum MoeDType : int { kDTypeBF16 = 0, kDTypeF16 = 1 };

}  // namespace moejit
