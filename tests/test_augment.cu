// tests/test_augment.cu — lesson 08's augmentation (common/augment.h, kernels/augment.cuh) and its loader workers:
// the kernel equals the host bit for bit; the identity reproduces an image; the parameters are a pure function of
// (seed, epoch, sample), whatever the number of workers or the delivery order; the sampler agrees with a float64
// implementation of torchvision's transform, edges and fill included; the rotation and translation go the way
// torchvision's affine() says.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "common/augment.h"
#include "common/memory_ledger.h"
#include "common/reference_mlp.h"  // epoch_order
#include "kernels/augment.cuh"
#include "lessons/batch_loader.h"

using test_support::DeviceBuffer;

namespace {

constexpr int kSide = kAugmentSide;

// MNIST-like images (a dark border, ink in the middle) or dense noise (ink up to the edges: exercises the fill).
std::vector<uint8_t> random_images(std::mt19937_64& rng, size_t count, bool dense) {
    std::vector<uint8_t> images(count * kMnistPixels, 0);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < count; ++i) {
        for (int y = 0; y < kSide; ++y) {
            for (int x = 0; x < kSide; ++x) {
                const bool inside = dense || (x >= 4 && x < 24 && y >= 4 && y < 24 && byte(rng) % 3 == 0);
                if (inside) images[i * kMnistPixels + size_t(y * kSide + x)] = uint8_t(byte(rng));
            }
        }
    }
    return images;
}

// torchvision's RandomAffine on a uint8 tensor, in float64 with the library's sine and cosine: the value before
// rounding (grid_sample of the image times grid_sample of the all-ones mask).
double reference_value(const uint8_t* image, const AffineParams& p, int x, int y) {
    const double pi = 3.14159265358979323846;
    const double rot = double(p.angle_degrees) * pi / 180.0;
    const double a = std::cos(rot) / double(p.scale), b = std::sin(rot) / double(p.scale);
    // _get_inverse_affine_matrix (centre 0, no shear): [a, b, −a·tx − b·ty; −b, a, b·tx − a·ty].
    const double m[6] = {a, b, -a * p.translate_x - b * p.translate_y, -b, a, b * p.translate_x - a * p.translate_y};
    // _gen_affine_grid: pixel centres −13.5 … 13.5, then ÷ 14; grid_sample (align_corners=False): ((g + 1)·28 − 1)/2.
    const double xc = x - 13.5, yc = y - 13.5;
    const double gx = (m[0] * xc + m[1] * yc + m[2]) / 14.0, gy = (m[3] * xc + m[4] * yc + m[5]) / 14.0;
    const double ix = ((gx + 1.0) * kSide - 1.0) / 2.0, iy = ((gy + 1.0) * kSide - 1.0) / 2.0;
    const double x0 = std::floor(ix), y0 = std::floor(iy);
    double value = 0, mask = 0;
    for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
            const int xi = int(x0) + dx, yi = int(y0) + dy;
            if (xi < 0 || xi >= kSide || yi < 0 || yi >= kSide) continue;
            const double w = (dx ? ix - x0 : 1.0 - (ix - x0)) * (dy ? iy - y0 : 1.0 - (iy - y0));
            value += w * image[yi * kSide + xi];
            mask += w;
        }
    }
    return value * mask;  // fill 0: value·mask + (1 − mask)·0
}

// The brightness-weighted mean row of columns [x_begin, x_end).
double mean_row(const uint8_t* image, int x_begin, int x_end) {
    double sum = 0, weighted = 0;
    for (int y = 0; y < kSide; ++y) {
        for (int x = x_begin; x < x_end; ++x) {
            sum += image[y * kSide + x];
            weighted += double(y) * image[y * kSide + x];
        }
    }
    return weighted / sum;
}

}  // namespace

TEST_CASE("augment: the kernel's normalized pixels are the host's augment_image + normalize_pixel bit for bit",
          "[augment][kernels]") {
    REQUIRE_DEVICE();
    auto rng = test_support::rng_for_test();
    const size_t dataset = 300;
    const std::vector<uint8_t> images = random_images(rng, dataset, false);
    const std::vector<uint8_t> dense = random_images(rng, dataset, true);
    for (const uint64_t seed : {uint64_t{1}, uint64_t{2}, uint64_t{0x9E3779B97F4A7C15}}) {
        for (const int rows : {1, 13, 128}) {
            // misaligned: the batch 4 bytes and `out` 1 float past 16-byte alignment (the uchar4 loads and float
            // stores); aligned: the uint4 loads and float4 stores.
            for (const bool misaligned : {false, true}) {
                for (const bool dense_images : {false, true}) {
                    const std::vector<uint8_t>& set = dense_images ? dense : images;
                    const int epoch = 1 + int(seed % 5);
                    std::vector<uint32_t> samples(static_cast<size_t>(rows));
                    for (uint32_t& s : samples) s = uint32_t(rng() % dataset);
                    // The batch as the loader would gather it (originals), and the host's augmented batch.
                    std::vector<uint8_t> batch(size_t(rows) * kMnistPixels), augmented(batch.size());
                    for (int r = 0; r < rows; ++r)
                        std::copy_n(set.data() + samples[size_t(r)] * kMnistPixels, kMnistPixels,
                                    batch.data() + size_t(r) * kMnistPixels);
                    augment_images(set.data(), samples.data(), size_t(rows), seed, epoch, augmented.data());
                    const size_t shift = misaligned ? 1 : 0;
                    std::vector<uint8_t> staged(4 * shift, 0);
                    staged.insert(staged.end(), batch.begin(), batch.end());
                    DeviceBuffer<uint8_t> d_pixels(staged);
                    DeviceBuffer<uint32_t> d_samples(samples);
                    // poisoned (NaN), one guard element (and one in front when misaligned)
                    DeviceBuffer<float> out(shift + size_t(rows) * kMnistPixels + 1);
                    augment_normalize(d_pixels.get() + 4 * shift, d_samples.get(), rows, seed, epoch,
                                      out.get() + shift);
                    std::vector<float> got = out.download();
                    if (shift != 0) {
                        uint32_t front;
                        std::memcpy(&front, &got.front(), sizeof front);
                        CHECK(front == 0xFFFFFFFFu);  // nothing written before the batch
                        got.erase(got.begin());
                    }
                    INFO("seed " << seed << ", rows " << rows << (dense_images ? ", dense" : ", MNIST-like")
                                 << (misaligned ? ", misaligned" : ""));
                    size_t differ = 0, changed = 0;
                    for (size_t i = 0; i < augmented.size(); ++i) {
                        const float want = normalize_pixel(augmented[i]);
                        differ += std::memcmp(&got[i], &want, sizeof want) != 0;
                        changed += augmented[i] != batch[i];
                    }
                    CHECK(differ == 0);
                    CHECK(changed > augmented.size() / 50);  // the transform did something
                    uint32_t guard;
                    std::memcpy(&guard, &got.back(), sizeof guard);
                    CHECK(guard == 0xFFFFFFFFu);  // nothing written past the batch
                }
            }
        }
    }
    DeviceBuffer<uint8_t> pixels(2 * kMnistPixels + 4);
    DeviceBuffer<uint32_t> samples(2);
    DeviceBuffer<float> out(2 * kMnistPixels);
    REQUIRE_THROWS_AS(augment_normalize(pixels.get() + 1, samples.get(), 2, 1, 1, out.get()), std::invalid_argument);
    REQUIRE_THROWS_AS(augment_normalize(pixels.get(), samples.get(), -1, 1, 1, out.get()), std::invalid_argument);
    augment_normalize(pixels.get(), samples.get(), 0, 1, 1, out.get());  // rows 0: nothing to do, no launch
}

TEST_CASE("augment: the identity transform reproduces the image exactly, edges included", "[augment]") {
    auto rng = test_support::rng_for_test();
    for (const bool dense : {false, true}) {
        const std::vector<uint8_t> image = random_images(rng, 1, dense);
        std::vector<uint8_t> out(kMnistPixels, 0xAB);
        augment_image(image.data(), AffineParams{0.0f, 0, 0, 1.0f}, out.data());
        CHECK(out == image);
    }
}

TEST_CASE("augment: the parameters are a pure function of (seed, epoch, sample) within RandomAffine's ranges",
          "[augment]") {
    const PhiloxKey key = philox_key(1);
    const uint32_t n = 20000;
    std::vector<AffineParams> forward(n);
    for (uint32_t s = 0; s < n; ++s) forward[s] = augment_params(key, 3, s);
    std::set<int> shifts;
    double angle_sum = 0;
    float min_angle = 100, max_angle = -100, min_scale = 100, max_scale = -100;
    for (uint32_t s = n; s-- > 0;) {  // drawn again in the other order: the same values
        const AffineParams p = augment_params(key, 3, s);
        REQUIRE(std::memcmp(&p, &forward[s], sizeof p) == 0);
        REQUIRE(p.angle_degrees >= -10.0f);
        REQUIRE(p.angle_degrees < 10.0f);
        REQUIRE(std::abs(p.translate_x) <= 3);  // round(uniform(−2.8, 2.8))
        REQUIRE(std::abs(p.translate_y) <= 3);
        REQUIRE(p.scale >= 0.9f);
        REQUIRE(p.scale < 1.1f);
        shifts.insert(p.translate_x);
        angle_sum += p.angle_degrees;
        min_angle = std::min(min_angle, p.angle_degrees), max_angle = std::max(max_angle, p.angle_degrees);
        min_scale = std::min(min_scale, p.scale), max_scale = std::max(max_scale, p.scale);
    }
    CHECK(shifts.size() == 7);             // −3 … 3 all drawn
    CHECK(std::abs(angle_sum / n) < 0.2);  // uniform around 0 (σ of the mean: 5.8/√20000 ≈ 0.04)
    CHECK(min_angle < -9.9f);
    CHECK(max_angle > 9.9f);
    CHECK(min_scale < 0.901f);
    CHECK(max_scale > 1.099f);
    // Another epoch or seed draws other parameters for the same sample.
    const AffineParams a = augment_params(key, 3, 7), b = augment_params(key, 4, 7),
                       c = augment_params(philox_key(2), 3, 7);
    CHECK(a.angle_degrees != b.angle_degrees);
    CHECK(a.angle_degrees != c.angle_degrees);
}

TEST_CASE("augment: the sampler agrees with a float64 torchvision RandomAffine, edges and fill included", "[augment]") {
    auto rng = test_support::rng_for_test();
    std::uniform_real_distribution<float> angle(-10.0f, 10.0f), scale(0.9f, 1.1f);
    std::uniform_int_distribution<int> shift(-3, 3);
    size_t compared = 0, near_ties = 0, partial_mask = 0;
    for (int trial = 0; trial < 200; ++trial) {
        const std::vector<uint8_t> image = random_images(rng, 1, /*dense=*/true);  // ink up to the edges
        AffineParams p{angle(rng), shift(rng), shift(rng), scale(rng)};
        if (trial < 8) {  // the extremes of the ranges
            p.angle_degrees = trial % 2 ? 10.0f : -10.0f;
            p.translate_x = trial % 4 < 2 ? 3 : -3;
            p.translate_y = trial < 4 ? -3 : 3;
            p.scale = trial % 3 ? 0.9f : 1.1f;
        }
        std::vector<uint8_t> out(kMnistPixels);
        augment_image(image.data(), p, out.data());
        for (int y = 0; y < kSide; ++y) {
            for (int x = 0; x < kSide; ++x) {
                const double exact = reference_value(image.data(), p, x, y);
                const double want = std::nearbyint(exact);  // torch.round: half to even
                const int got = out[size_t(y * kSide + x)];
                ++compared;
                // float32 coordinates are off by a few 1e-6 of a pixel, which moves the value by up to 255 times
                // that per axis across a 0-to-255 edge (dense noise has them everywhere), plus the blend's own
                // rounding: ~2e-3 at worst. The rounded pixel may differ only within 5e-3 of a .5.
                const bool near_tie = std::abs(exact - std::floor(exact) - 0.5) < 5e-3;
                near_ties += near_tie;
                INFO("trial " << trial << " angle " << p.angle_degrees << " t (" << p.translate_x << ", "
                              << p.translate_y << ") scale " << p.scale << " pixel (" << x << ", " << y << ") exact "
                              << exact);
                if (near_tie) {
                    REQUIRE(std::abs(got - want) <= 1);
                } else {
                    REQUIRE(got == want);
                }
                // Pixels whose neighbours lie partly outside: the value dimmed by the mask (the fill's rule).
                const AffineMatrix m = inverse_affine(p);
                const float ix = m.m00 * float(x) + m.m01 * float(y) + m.c0;
                partial_mask += ix < 0.0f || ix > float(kSide - 1);
            }
        }
    }
    CHECK(compared == 200u * kMnistPixels);
    CHECK(near_ties < compared / 100);
    CHECK(partial_mask > 1000);  // the edges were exercised
}

TEST_CASE(
    "augment: a positive angle turns the image clockwise on the screen, translations move right and down, "
    "and what comes in from outside is fill 0",
    "[augment]") {
    std::vector<uint8_t> bar(kMnistPixels, 0);  // a horizontal bar through the centre, rows 13 and 14
    for (int x = 4; x < 24; ++x) bar[13 * kSide + x] = bar[14 * kSide + x] = 200;
    std::vector<uint8_t> out(kMnistPixels);
    augment_image(bar.data(), AffineParams{10.0f, 0, 0, 1.0f}, out.data());
    // Clockwise with y pointing down: the right end goes down, the left end up (torchvision's affine() angle).
    CHECK(mean_row(out.data(), 18, 28) > 14.5);
    CHECK(mean_row(out.data(), 0, 10) < 12.5);

    auto rng = test_support::rng_for_test();
    const std::vector<uint8_t> image = random_images(rng, 1, /*dense=*/true);
    augment_image(image.data(), AffineParams{0.0f, 2, -1, 1.0f}, out.data());  // 2 right, 1 up
    for (int y = 0; y < kSide; ++y) {
        for (int x = 0; x < kSide; ++x) {
            const int sx = x - 2, sy = y + 1;
            const bool inside = sx >= 0 && sx < kSide && sy >= 0 && sy < kSide;
            INFO("pixel (" << x << ", " << y << ")");
            REQUIRE(out[size_t(y * kSide + x)] == (inside ? image[size_t(sy * kSide + sx)] : 0));
        }
    }
    // A scale above 1 zooms in: a centred 2×2 square grows.
    std::vector<uint8_t> square(kMnistPixels, 0);
    for (int y = 12; y < 16; ++y)
        for (int x = 12; x < 16; ++x) square[size_t(y * kSide + x)] = 255;
    auto ink = [](const std::vector<uint8_t>& img) {
        double sum = 0;
        for (const uint8_t p : img) sum += p;
        return sum;
    };
    augment_image(square.data(), AffineParams{0.0f, 0, 0, 1.1f}, out.data());
    CHECK(ink(out) > 1.1 * ink(square));
    augment_image(square.data(), AffineParams{0.0f, 0, 0, 0.9f}, out.data());
    CHECK(ink(out) < 0.9 * ink(square));
}

TEST_CASE("augment: loader workers deliver the same augmented batches in order, for 1, 2 and 4 workers",
          "[augment][loader]") {
    REQUIRE_DEVICE();  // the staging slots are pinned memory (cudaHostAlloc)
    auto rng = test_support::rng_for_test();
    MnistSplit train;
    train.count = 203;  // 6 batches of 32 and a partial one of 11
    train.images = random_images(rng, train.count, false);
    train.labels.resize(train.count);
    for (uint8_t& l : train.labels) l = uint8_t(rng() % 10);
    const uint64_t seed = 5;
    const BatchLoader::FillBatch fill = [seed](const MnistSplit& split, int epoch, const uint32_t* samples, size_t rows,
                                               uint8_t* pixels, uint8_t* labels) {
        augment_images(split.images.data(), samples, rows, seed, epoch, pixels);
        for (size_t r = 0; r < rows; ++r) labels[r] = split.labels[samples[r]];
    };
    const int batch = 32;
    std::vector<std::vector<uint8_t>> delivered;
    for (const int workers : {1, 2, 4}) {
        MemoryLedger ledger;
        BatchLoader loader(ledger, train, batch, workers + 1, nullptr, workers, fill);
        std::vector<uint8_t> bytes;
        for (const int epoch : {1, 2}) {
            loader.start_epoch(epoch_order(seed, epoch, train.count), epoch);
            for (size_t b = 0; b < batch_count(train.count, batch); ++b) {
                const BatchLoader::Batch got = loader.next();
                REQUIRE(got.index == b);
                bytes.insert(bytes.end(), got.pixels, got.pixels + size_t(got.rows) * kMnistPixels);
                bytes.insert(bytes.end(), got.labels, got.labels + got.rows);
                loader.release(got.slot, nullptr);  // nothing copies from it here: refill at once
                if (b == 0 && epoch == 1) {  // twice: refused (a worker could refill it under a copy still reading)
                    REQUIRE_THROWS_AS(loader.release(got.slot, nullptr), std::logic_error);
                }
            }
        }
        const BatchLoader::Throughput t = loader.throughput();
        CHECK(t.images == 2 * train.count);
        delivered.push_back(bytes);
    }
    // The same bytes as one thread computing them in order, for every worker count.
    std::vector<uint8_t> serial;
    for (const int epoch : {1, 2}) {
        const std::vector<uint32_t> order = epoch_order(seed, epoch, train.count);
        for (size_t first = 0; first < train.count; first += batch) {
            const size_t rows = std::min<size_t>(batch, train.count - first);
            std::vector<uint8_t> pixels(rows * kMnistPixels), labels(rows);
            fill(train, epoch, order.data() + first, rows, pixels.data(), labels.data());
            serial.insert(serial.end(), pixels.begin(), pixels.end());
            serial.insert(serial.end(), labels.begin(), labels.end());
        }
    }
    for (size_t i = 0; i < delivered.size(); ++i) {
        INFO("worker count #" << i);
        CHECK(delivered[i] == serial);
    }
    MemoryLedger ledger;
    REQUIRE_THROWS_AS(BatchLoader(ledger, train, batch, 2, nullptr, 2, fill),
                      std::invalid_argument);  // slots ≤ workers
}
