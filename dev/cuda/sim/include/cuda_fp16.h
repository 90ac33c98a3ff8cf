/* cuda_fp16.h (host simulator): see cuda_runtime.h beside it. */
#include "cuda_runtime.h"
