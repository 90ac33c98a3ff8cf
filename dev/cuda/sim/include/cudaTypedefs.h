/* cudaTypedefs.h (host simulator) - the driver entry point's type that
 * src/scan_window.cu looks up. */
#ifndef PRNN_SIM_CUDA_TYPEDEFS_H
#define PRNN_SIM_CUDA_TYPEDEFS_H

#include "cuda.h"

typedef CUresult (*PFN_cuTensorMapEncodeTiled_v12000)(
    CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *base,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *element_strides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion, CUtensorMapFloatOOBfill fill);

#endif /* PRNN_SIM_CUDA_TYPEDEFS_H */
