// common/mnist.h — MNIST in memory: the IDX file reader (raw or .gz) and where to find the files.
//
// defines: MnistSplit, MnistDataset, load_mnist(), load_mnist_or_exit(), find_mnist(), read_idx_images(),
//          read_idx_labels(), read_idx_split(); normalize_pixel(), kMnistMean and kMnistStd come from
//          common/normalize_pixel.h.
//
// The IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header, then the payload as unsigned bytes.
//   images: magic 2051 (0x00000803: type 0x08 = unsigned byte, rank 3), count, rows (28), cols (28), pixels
//   labels: magic 2049 (0x00000801: rank 1), count, labels (0..9)
// Every check a corrupt or wrong file can fail (magic, rank, 28×28, counts that disagree, a truncated payload,
// trailing bytes — also after the gzip data —, a damaged gzip stream, a label above 9, an absurd count) throws
// std::runtime_error with one message naming the file and what was expected. The payload is read in chunks, so a
// header that claims millions of images allocates nothing before the bytes are actually there, and no count above
// 2 million (≈ 1.5 GiB of pixels) is accepted at all.
//
// Where the files are looked for, first match wins (each file as `name` or `name.gz`):
//   1. --data DIR          (if given, only there)
//   2. $MNIST_DIR          (if set, only there)
//   3. ./data/mnist/       (relative to the current directory)
//   4. <repo>/data/mnist/  (the repository this file was compiled from; `make data` downloads into it)
//   5. /usr/share/datasets/fashion-mnist/  (Debian's `dataset-fashion-mnist`: Fashion-MNIST, same format)
// A relative DIR in 1 or 2 is taken from the current directory, or else from the repository root (CI sets
// MNIST_DIR=../shared/data/mnist relative to the repository, and tests run in the build directory).
// The data counts as Fashion-MNIST when its directory is Debian's package directory (by any path to it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/normalize_pixel.h"

inline constexpr int kMnistRows = 28;
inline constexpr int kMnistCols = 28;
inline constexpr int kMnistPixels = kMnistRows * kMnistCols;  // 784 inputs
inline constexpr int kMnistClasses = 10;

// Normalization every lesson and the reference use: normalize_pixel(p) = (p / 255 − kMnistMean) / kMnistStd in
// float32, one function for host and device (common/normalize_pixel.h).

struct MnistSplit {
    std::vector<uint8_t> images;  // count × 784, row-major, one byte per pixel (0 = background, 255 = ink)
    std::vector<uint8_t> labels;  // count, each 0..9
    size_t count = 0;

    const uint8_t* image(size_t i) const { return images.data() + i * kMnistPixels; }
};

struct MnistDataset {
    MnistSplit train;       // 60000 images unless --limit
    MnistSplit test;        // 10000 images, always the whole test set
    std::string directory;  // where the files were found
    std::string found_by;   // "--data", "$MNIST_DIR", "./data/mnist", "repository data/mnist", "Debian package"
    bool fashion = false;   // Fashion-MNIST (found in Debian's package directory) rather than handwritten digits

    // One line for the program's output, e.g. "MNIST from data/mnist (--data): 60000 train, 10000 test".
    std::string describe() const;
};

// The directory holding the four files and how it was found. Throws std::runtime_error when none qualifies,
// with a message saying exactly how to get the data. `data_flag` is the value of --data ("" when not given).
struct DataLocation {
    std::string directory;
    std::string found_by;
    bool fashion = false;  // the directory is Debian's Fashion-MNIST package directory (however it was named)
};
DataLocation find_mnist(const std::string& data_flag);

// Finds and reads all four files. `limit` > 0 keeps only the first `limit` training images and `test_limit` > 0 the
// first `test_limit` test images (quick runs; the report says so).
MnistDataset load_mnist(const std::string& data_flag, size_t limit = 0, size_t test_limit = 0);

// load_mnist(), but a failure prints "<program>: <message>" to stderr and exits with code 1.
MnistDataset load_mnist_or_exit(const char* program, const std::string& data_flag, size_t limit = 0,
                                size_t test_limit = 0);

// The single-file readers (each throws std::runtime_error naming the file).
std::vector<uint8_t> read_idx_images(const std::string& path, size_t* count);
std::vector<uint8_t> read_idx_labels(const std::string& path);
MnistSplit read_idx_split(const std::string& images_path, const std::string& labels_path);

// `dir/name` if it exists, else `dir/name.gz` if that exists, else "".
std::string idx_file_in(const std::string& dir, const std::string& name);

// The standard file names.
inline constexpr const char* kTrainImagesFile = "train-images-idx3-ubyte";
inline constexpr const char* kTrainLabelsFile = "train-labels-idx1-ubyte";
inline constexpr const char* kTestImagesFile = "t10k-images-idx3-ubyte";
inline constexpr const char* kTestLabelsFile = "t10k-labels-idx1-ubyte";
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";
