// The LAPACK routines nmsparse_prune calls, from OpenBLAS (which bundles LAPACK; Debian's
// libopenblas-dev ships no LAPACKE header for it). Fortran calling convention: column-major
// arrays, every argument by pointer, hidden string-length arguments after the others.
#pragma once

#include <cblas.h>

#include <cstddef>

extern "C" {
// Cholesky factor of a symmetric positive-definite matrix: uplo 'L' leaves L (A = L Lᵀ) in the
// lower triangle. info > 0: the leading minor of that order is not positive definite.
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
// Inverse of a triangular matrix in place; diag 'N' = non-unit diagonal. info > 0: singular.
void dtrtri_(const char* uplo, const char* diag, const int* n, double* a, const int* lda, int* info,
             size_t, size_t);
}
