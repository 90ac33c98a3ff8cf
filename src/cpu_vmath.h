/*
 * cpu_vmath.h - lets GCC vectorize the CPU loops that call exp, log, tanh
 * and log1p: it declares that glibc's vector variants of them exist
 * (libmvec, part of libm), which glibc's own headers do only under
 * -ffast-math. Include after <math.h> or <tgmath.h>. The including file is
 * compiled with -fno-math-errno and -fno-trapping-math (cmake/cells.cmake
 * sets them for GCC), so that these functions are pure and both arms of a
 * select may be computed; its loops must not call them under a condition.
 *
 * Accuracy of the float variants, measured over 33M points each: expf at
 * most 3 ulp on [-103, 103], tanhf 1 ulp, log1pf 2 ulp. A loop's channels
 * take the vector or the scalar path by their index alone, so results are
 * the same on every run.
 */
#ifndef PRNN_CPU_VMATH_H
#define PRNN_CPU_VMATH_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
/* (name): the function, not <tgmath.h>'s macro of that name */
#define PRNN_VECTOR_MATH __attribute__((simd("notinbranch")))
float expf(float) PRNN_VECTOR_MATH; /* glibc 2.22 on */
double(exp)(double) PRNN_VECTOR_MATH;
float logf(float) PRNN_VECTOR_MATH;
double(log)(double) PRNN_VECTOR_MATH;
#if __GLIBC_PREREQ(2, 35)
float tanhf(float) PRNN_VECTOR_MATH;
double(tanh)(double) PRNN_VECTOR_MATH;
float log1pf(float) PRNN_VECTOR_MATH;
double(log1p)(double) PRNN_VECTOR_MATH;
#endif
#undef PRNN_VECTOR_MATH
#endif

#endif /* PRNN_CPU_VMATH_H */
