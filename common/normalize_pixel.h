// common/normalize_pixel.h — the one formula that turns an MNIST pixel into a network input, shared by the host
// (mnist.h, the CPU reference) and the device (kernels/normalize.cuh), so both produce bitwise the same floats.
//
// defines: kMnistMean, kMnistStd, normalize_pixel().
//
// x = (p / 255 − mean) / std in float32: one IEEE division, one subtraction, one IEEE division. There is no
// multiply-add for a compiler to contract into an FMA, and nvcc compiles `/` in device code as a correctly
// rounded division (unless --use_fast_math or -prec-div=false, which this project does not use), so the host
// and every device compute the same bits. (Folding it into p·scale + shift would be one instruction cheaper,
// but rounds differently for 142 of the 256 pixel values.)
#pragma once

#include <cstdint>

// Mean and standard deviation of the MNIST training pixels scaled to [0, 1]: after normalizing, the inputs
// have roughly zero mean and unit variance.
inline constexpr float kMnistMean = 0.1307f;
inline constexpr float kMnistStd = 0.3081f;

#if defined(__CUDACC__)
#define NORMALIZE_PIXEL_HD __host__ __device__
#else
#define NORMALIZE_PIXEL_HD
#endif

NORMALIZE_PIXEL_HD inline float normalize_pixel(uint8_t pixel, float mean = kMnistMean, float std = kMnistStd) {
    return (static_cast<float>(pixel) / 255.0f - mean) / std;
}

#undef NORMALIZE_PIXEL_HD
