/*
 * cuda.h (host simulator) - the driver API types that src/scan_window.cu
 * names: tensor maps (CUtensorMap) and their encoding's arguments. The
 * simulator's cuTensorMapEncodeTiled (dev/cuda/sim/sim.cpp) keeps the
 * base, element size, dims, strides and box in the map's opaque bytes.
 */
#ifndef PRNN_SIM_CUDA_H
#define PRNN_SIM_CUDA_H

#include <stdint.h>

typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
typedef int CUresult;
#define CUDA_SUCCESS 0

typedef enum CUtensorMapDataType {
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
} CUtensorMapDataType;
typedef enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 } CUtensorMapInterleave;
typedef enum CUtensorMapSwizzle { CU_TENSOR_MAP_SWIZZLE_NONE = 0 } CUtensorMapSwizzle;
typedef enum CUtensorMapL2promotion {
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
} CUtensorMapL2promotion;
typedef enum CUtensorMapFloatOOBfill {
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0
} CUtensorMapFloatOOBfill;

typedef struct CUtensorMap {
    alignas(64) cuuint64_t opaque[16];
} CUtensorMap;

#endif /* PRNN_SIM_CUDA_H */
