// <cuda_fp16.h> for the cpu flavor: CUDA's own header (found next on the include path), then the CPU backend, which
// gives __half its arithmetic on the host. <memory> first: CUDA's __noinline__ macro breaks libstdc++'s shared_ptr.
#pragma once
#include <memory>
#include_next <cuda_fp16.h>
#include "../runtime.h"
