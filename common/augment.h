// common/augment.h — lesson 08's data augmentation, written once for the host (the loader's workers) and the device
// (kernels/augment.cuh): torchvision's RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1),
// interpolation=InterpolationMode.BILINEAR) on one 28×28 uint8 image, fill 0 (the default), as torchvision computes
// it on a uint8 tensor. (RandomAffine's default interpolation is NEAREST; bilinear is the smoother, costlier one.)
//
// defines: AffineParams, AffineMatrix, augment_params(key, epoch, sample), inverse_affine(params),
//          affine_pixel(image, matrix, x, y), augment_image(in, params, out), augment_images(...) (a batch).
//
// The transform, step by step (torchvision.transforms.v2.functional.affine on a tensor; one image, one channel):
//   * parameters (RandomAffine.get_params): angle uniform in [-10, 10) degrees; a translation of
//     round(uniform(-2.8, 2.8)) whole pixels in x and in y (0.1 · 28, rounded half to even as Python's round);
//     a scale uniform in [0.9, 1.1). Here the four uniforms are the four words of one Philox4x32 block for counter
//     {sample, 0, kPhiloxStreamAugment, epoch}: the augmented image is a pure function of (seed, epoch, sample), so
//     neither the number of loader workers, nor timing, nor where it is computed (host or device) can change it.
//   * the inverse map (_get_inverse_affine_matrix, no shear): output pixel (x, y), centred as x − 13.5, y − 13.5,
//     reads input pixel  ix = ( cos·(x−13.5) + sin·(y−13.5) − cos·tx − sin·ty) / scale + 13.5
//                        iy = (−sin·(x−13.5) + cos·(y−13.5) + sin·tx − cos·ty) / scale + 13.5.
//     A positive angle turns the image clockwise on the screen (y points down), as torchvision's affine() says.
//   * bilinear sampling with zero padding (grid_sample, align_corners=False): the four neighbours of (ix, iy) that
//     fall inside the image, weighted by the usual (1−fx)(1−fy), fx(1−fy), ...;
//   * fill 0 (_apply_grid_transform): grid_sample also samples an all-ones mask, and the value is multiplied by it,
//     so a pixel whose neighbours lie partly outside is dimmed twice (mask · value). That is what torchvision does;
//     MNIST's 4-pixel empty border makes it rare.
//   * back to uint8: rounded half to even (torch.round), as a uint8 tensor comes back from torchvision.
//
// Why the arithmetic is spelled out (fmaf, our own sine): the host and the device must produce the same bits.
//   * A compiler may contract a·b + c into one fused multiply-add (nvcc does by default; g++ does only where the
//     target has FMA instructions, not for plain x86-64). Contracted and uncontracted results differ in the last
//     bit, and a last bit can move a value across .5 and change the rounded pixel. So every multiply-add below is
//     an explicit fmaf — one rounding, the same everywhere — and no product is left where it could be contracted.
//   * sinf/cosf are not correctly rounded: CUDA's are within 2 ulp, glibc's within 1, and they differ. A degree-7
//     and degree-8 Taylor polynomial (|angle| ≤ 10° = 0.175 rad: truncation error < 1e-12) evaluated with fmaf is
//     the same function on both.
//   * Division is IEEE (correctly rounded) on both, unless nvcc is given -use_fast_math or -prec-div=false; this
//     project passes neither.
// On the CPU backend the same compiler compiles both, and the tests check the equality bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/launch.h"
#include "common/philox.h"

inline constexpr int kAugmentSide = 28;  // MNIST: 28 × 28 pixels, one channel

struct AffineParams {
    float angle_degrees = 0;  // clockwise on the screen
    int translate_x = 0;      // whole pixels: right
    int translate_y = 0;      // whole pixels: down
    float scale = 1;
};

// Input coordinates of output pixel (x, y): ix = m00·x + m01·y + c0, iy = m10·x + m11·y + c1 (pixel centres at
// integer coordinates, the 13.5 of the centring already folded into c0 and c1).
struct AffineMatrix {
    float m00, m01, c0, m10, m11, c1;
};

// RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1)).get_params for training sample `sample` of
// epoch `epoch`: one Philox block, its four words mapped as torch's uniform_(a, b) maps them, a + (b − a)·u.
__host__ __device__ inline AffineParams augment_params(PhiloxKey key, int epoch, uint32_t sample) {
    const PhiloxBlock words =
        philox4x32_10(PhiloxBlock{{sample, 0u, kPhiloxStreamAugment, static_cast<uint32_t>(epoch)}}, key);
    constexpr float kMaxShift = 0.1f * kAugmentSide;  // 2.8 pixels
    AffineParams p;
    p.angle_degrees = fmaf(philox_to_unit_float(words.v[0]), 20.0f, -10.0f);
    // rintf rounds half to even (the default rounding mode), as Python's round() does.
    p.translate_x = static_cast<int>(rintf(fmaf(philox_to_unit_float(words.v[1]), 2.0f * kMaxShift, -kMaxShift)));
    p.translate_y = static_cast<int>(rintf(fmaf(philox_to_unit_float(words.v[2]), 2.0f * kMaxShift, -kMaxShift)));
    p.scale = fmaf(philox_to_unit_float(words.v[3]), 0.2f, 0.9f);
    return p;
}

// sin and cos of |r| ≤ 0.2 rad by their Taylor series (Horner's rule, one fmaf per term): see the top of the file.
__host__ __device__ inline void small_angle_sincos(float r, float* sine, float* cosine) {
    const float r2 = r * r;
    float s = fmaf(r2, -1.0f / 5040.0f, 1.0f / 120.0f);
    s = fmaf(r2, s, -1.0f / 6.0f);
    s = fmaf(r2, s, 1.0f);
    *sine = r * s;
    float c = fmaf(r2, 1.0f / 40320.0f, -1.0f / 720.0f);
    c = fmaf(r2, c, 1.0f / 24.0f);
    c = fmaf(r2, c, -0.5f);
    *cosine = fmaf(r2, c, 1.0f);
}

// torchvision's _get_inverse_affine_matrix (centre 0, no shear), with the centring of _gen_affine_grid and
// grid_sample's align_corners=False folded in: the map from output pixel to input coordinates.
__host__ __device__ inline AffineMatrix inverse_affine(const AffineParams& p) {
    float sine, cosine;
    small_angle_sincos(p.angle_degrees * (3.14159265358979f / 180.0f), &sine, &cosine);
    const float a = cosine / p.scale, b = sine / p.scale;  // [[a, b], [−b, a]]: rotation⁻¹ / scale
    const float tx = static_cast<float>(p.translate_x), ty = static_cast<float>(p.translate_y);
    constexpr float kCentre = 0.5f * (kAugmentSide - 1);  // 13.5: pixel centres run from −13.5 to 13.5
    AffineMatrix m;
    m.m00 = a, m.m01 = b, m.m10 = -b, m.m11 = a;
    // ix = a·(x − 13.5) + b·(y − 13.5) − a·tx − b·ty + 13.5, collected into c0 once per image:
    // c0 = 13.5 − a·(13.5 + tx) − b·(13.5 + ty); c1 = 13.5 + b·(13.5 + tx) − a·(13.5 + ty).
    const float sx = kCentre + tx, sy = kCentre + ty;  // exact: small integers and halves
    m.c0 = fmaf(-a, sx, fmaf(-b, sy, kCentre));
    m.c1 = fmaf(b, sx, fmaf(-a, sy, kCentre));
    return m;
}

// One output pixel of the augmented image: bilinear, zero padding, the fill mask, rounded half to even to uint8.
// `image` is 28 × 28 row-major (global memory on the host, shared memory in the kernel).
__host__ __device__ inline uint8_t affine_pixel(const uint8_t* image, const AffineMatrix& m, int x, int y) {
    const float fx_out = static_cast<float>(x), fy_out = static_cast<float>(y);
    const float ix = fmaf(m.m00, fx_out, fmaf(m.m01, fy_out, m.c0));
    const float iy = fmaf(m.m10, fx_out, fmaf(m.m11, fy_out, m.c1));
    const float x0f = floorf(ix), y0f = floorf(iy);
    const float fx = ix - x0f, fy = iy - y0f;  // exact: the fraction of a float
    const float gx = 1.0f - fx, gy = 1.0f - fy;
    const int x0 = static_cast<int>(x0f), y0 = static_cast<int>(y0f);
    // The four neighbours in grid_sample's order (north-west, north-east, south-west, south-east); those outside
    // the image contribute 0 to the value (zero padding) and 0 to the mask.
    const int nx[4] = {x0, x0 + 1, x0, x0 + 1};
    const int ny[4] = {y0, y0, y0 + 1, y0 + 1};
    const float wx[4] = {gx, fx, gx, fx};
    const float wy[4] = {gy, gy, fy, fy};
    float value = 0.0f, mask = 0.0f;
    for (int k = 0; k < 4; ++k) {
        if (nx[k] < 0 || nx[k] >= kAugmentSide || ny[k] < 0 || ny[k] >= kAugmentSide) continue;
        const float weight = wx[k] * wy[k];
        value = fmaf(weight, static_cast<float>(image[ny[k] * kAugmentSide + nx[k]]), value);  // shared/global read
        mask = fmaf(wx[k], wy[k], mask);
    }
    // fill 0: value·mask + (1 − mask)·0. At most 255 (a convex combination of pixels, times at most 1).
    const float filled = fminf(value * mask, 255.0f);
    return static_cast<uint8_t>(rintf(filled));
}

// The whole image on the host: out[y·28 + x] = affine_pixel(in, inverse_affine(params), x, y).
inline void augment_image(const uint8_t* in, const AffineParams& params, uint8_t* out) {
    const AffineMatrix m = inverse_affine(params);
    for (int y = 0; y < kAugmentSide; ++y)
        for (int x = 0; x < kAugmentSide; ++x) out[y * kAugmentSide + x] = affine_pixel(in, m, x, y);
}

// A batch on the host, as lesson 08's loader workers make it: image r of `out` is sample samples[r] of the
// training set `images` (28·28 bytes each) augmented for epoch `epoch` of seed `seed`.
inline void augment_images(const uint8_t* images, const uint32_t* samples, size_t rows, uint64_t seed, int epoch,
                           uint8_t* out) {
    const PhiloxKey key = philox_key(seed);
    for (size_t r = 0; r < rows; ++r) {
        augment_image(images + size_t(samples[r]) * kAugmentSide * kAugmentSide, augment_params(key, epoch, samples[r]),
                      out + r * kAugmentSide * kAugmentSide);
    }
}
