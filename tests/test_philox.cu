// tests/test_philox.cu — Philox4x32-10 against the published known answers (Random123's kat_vectors), and the
// same bits from a kernel as from the host.
#include <cstring>
#include <vector>

#include "tests/test_support.h"

#include "common/philox.h"

namespace {

// out[i] = philox_uniform(key, stream, substream, i): what a kernel initializing parameter i would compute.
__global__ void philox_uniform_kernel(PhiloxKey key, uint32_t stream, uint32_t substream, int n, float* out,
                                      uint32_t* words) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = philox_uniform(key, stream, substream, static_cast<uint64_t>(i));
    words[i] = philox_uint32(key, stream, substream, static_cast<uint64_t>(i));
}

}  // namespace

TEST_CASE("philox: Philox4x32-10 reproduces the Random123 known-answer vectors", "[philox]") {
    struct Vector {
        PhiloxBlock counter;
        PhiloxKey key;
        PhiloxBlock expected;
    };
    const Vector vectors[] = {
        {{{0, 0, 0, 0}}, {0, 0}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
        {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
         {0xffffffff, 0xffffffff},
         {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
        {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
         {0xa4093822, 0x299f31d0},
         {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
    };
    for (const Vector& v : vectors) {
        const PhiloxBlock got = philox4x32_10(v.counter, v.key);
        for (int w = 0; w < 4; ++w) CHECK(got.v[w] == v.expected.v[w]);
    }
    CHECK(philox_key(0x0123456789abcdefull).k0 == 0x89abcdefu);
    CHECK(philox_key(0x0123456789abcdefull).k1 == 0x01234567u);
    CHECK(philox_to_unit_float(0) == 0.0f);
    CHECK(philox_to_unit_float(0xffffffffu) < 1.0f);
    CHECK(philox_to_unit_float(0x80000000u) == 0.5f);
}

TEST_CASE("philox: uniform floats are spread over 0..1 and streams differ", "[philox]") {
    const PhiloxKey key = philox_key(42);
    double sum = 0;
    int low = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
        const float u = philox_uniform(key, kPhiloxStreamInit, 0, i);
        REQUIRE(u >= 0.0f);
        REQUIRE(u < 1.0f);
        sum += u;
        low += u < 0.1f;
    }
    CHECK(std::abs(sum / n - 0.5) < 0.01);
    CHECK(std::abs(low / double(n) - 0.1) < 0.01);
    CHECK(philox_uint32(key, kPhiloxStreamInit, 0, 5) != philox_uint32(key, kPhiloxStreamInit, 1, 5));
    CHECK(philox_uint32(key, kPhiloxStreamInit, 0, 5) != philox_uint32(key, kPhiloxStreamShuffle, 0, 5));
    CHECK(philox_uint32(key, kPhiloxStreamInit, 0, 5) != philox_uint32(philox_key(43), kPhiloxStreamInit, 0, 5));
}

TEST_CASE("philox: a kernel computes the same bits as the host", "[philox][kernels]") {
    REQUIRE_DEVICE();
    const int n = 1000;  // not a multiple of the block size
    const PhiloxKey key = philox_key(0xfeedface12345678ull);
    test_support::DeviceBuffer<float> out(n);
    test_support::DeviceBuffer<uint32_t> words(n);
    launch(philox_uniform_kernel, dim3(ceil_div(n, 128)), dim3(128), 0, 0, key, uint32_t{kPhiloxStreamInit}, 3u, n,
           out.get(), words.get());
    const std::vector<float> got = out.download();
    const std::vector<uint32_t> got_words = words.download();
    size_t mismatches = 0;
    for (int i = 0; i < n; ++i) {
        const float expected = philox_uniform(key, kPhiloxStreamInit, 3, uint64_t(i));
        mismatches += std::memcmp(&got[i], &expected, sizeof(float)) != 0;
        mismatches += got_words[i] != philox_uint32(key, kPhiloxStreamInit, 3, uint64_t(i));
    }
    CHECK(mismatches == 0);
}
