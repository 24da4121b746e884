// common/mnist.cpp — see mnist.h.
#include "common/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kImagesMagic = 0x00000803;  // 2051
constexpr uint32_t kLabelsMagic = 0x00000801;  // 2049
// Far beyond any IDX data set of 28x28 images (MNIST has 60000, EMNIST byclass 697932), and small enough that
// even a header that is honest about a huge payload (a gzip bomb) cannot make the reader hold more than
// 2M × 784 bytes ≈ 1.5 GiB. The payload buffer grows only with data actually decompressed.
constexpr uint32_t kMaxItems = 2'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": " + what);
}

// A file starting with the gzip magic (1f 8b) is decompressed with zlib's inflate(); anything else is read
// as is. inflate() rather than gzread(): gzread silently ignores non-gzip bytes after the last member, and a
// file with junk appended must be rejected like any other trailing garbage.
class IdxStream {
  public:
    explicit IdxStream(const std::string& path) : path_(path), in_(kInputBytes), out_(kOutputBytes) {
        if (!fs::is_regular_file(path)) fail(path, "no such file");
        file_.reset(std::fopen(path.c_str(), "rb"));
        if (file_ == nullptr) fail(path, "cannot open");
        refill();
        gzip_ = available() >= 2 && next_[0] == 0x1f && next_[1] == 0x8b;
        if (gzip_) {
            // 16 + MAX_WBITS: expect a gzip header and trailer (CRC-32 and length are checked at the end).
            if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) fail(path, "zlib could not be initialized");
            z_ready_ = true;
        }
    }
    ~IdxStream() {
        if (z_ready_) inflateEnd(&z_);
    }
    IdxStream(const IdxStream&) = delete;
    IdxStream& operator=(const IdxStream&) = delete;

    // Reads up to `bytes`; returns how many were read (fewer only at the end of the data). A damaged gzip
    // stream (bad data, a bad CRC, a truncated member, bytes after the last member that are not another member)
    // throws.
    size_t read(void* dst, size_t bytes) {
        unsigned char* out = static_cast<unsigned char*>(dst);
        size_t got = 0;
        while (got < bytes) {
            if (!gzip_) {  // a plain file: copy out of the input buffer
                if (available() == 0 && (eof_ || !refill())) break;
                const size_t n = std::min(available(), bytes - got);
                std::copy_n(next_, n, out + got);
                next_ += n;
                got += n;
                continue;
            }
            if (out_pos_ == out_end_ && !inflate_ahead()) break;
            const size_t n = std::min(out_end_ - out_pos_, bytes - got);
            std::copy_n(out_.data() + out_pos_, n, out + got);
            out_pos_ += n;
            got += n;
        }
        return got;
    }

  private:
    // Decompresses up to kOutputBytes ahead of what read() has handed out, so damage close to the start of the
    // stream is reported as damage, before a garbled header could be taken for a wrong (but intact) file.
    bool inflate_ahead() {
        out_pos_ = out_end_ = 0;
        while (out_end_ < out_.size()) {
            if (member_done_ && !start_next_member()) break;
            if (available() == 0 && !eof_) refill();
            z_.next_in = next_;
            z_.avail_in = static_cast<uInt>(std::min<size_t>(available(), UINT_MAX));
            z_.next_out = out_.data() + out_end_;
            z_.avail_out = static_cast<uInt>(out_.size() - out_end_);
            const int code = inflate(&z_, Z_NO_FLUSH);
            const size_t produced = static_cast<size_t>(z_.next_out - (out_.data() + out_end_));
            const bool consumed = z_.next_in != next_;
            out_end_ += produced;
            next_ = z_.next_in;
            if (code == Z_STREAM_END) {
                member_done_ = true;
            } else if (code != Z_OK && code != Z_BUF_ERROR) {
                gzip_error(z_.msg != nullptr ? z_.msg : "inflate error " + std::to_string(code));
            } else if (produced == 0 && !consumed && available() == 0 && eof_) {
                gzip_error("unexpected end of file: the gzip stream is cut short");
            }
        }
        return out_end_ > 0;
    }

    static constexpr size_t kInputBytes = size_t{1} << 17;
    static constexpr size_t kOutputBytes = size_t{1} << 20;

    size_t available() const { return static_cast<size_t>(end_ - next_); }

    // Moves what is left to the front of the buffer and reads more after it. False at the end of the file.
    bool refill() {
        const size_t left = available();
        std::memmove(in_.data(), next_ == nullptr ? in_.data() : next_, left);
        const size_t n = std::fread(in_.data() + left, 1, in_.size() - left, file_.get());
        if (n == 0 && std::ferror(file_.get())) fail(path_, "read error");
        if (n == 0) eof_ = true;
        next_ = in_.data();
        end_ = in_.data() + left + n;
        return n > 0;
    }

    // After a member's trailer: the end of the file, or another gzip member (gzip -c a b > c makes those).
    // False at the end of the file; anything else throws.
    bool start_next_member() {
        while (available() < 2 && !eof_) refill();
        if (available() == 0) return false;
        if (available() < 2 || next_[0] != 0x1f || next_[1] != 0x8b) {
            fail(path_,
                 "unexpected bytes after the end of the gzip data (not another gzip member): the file is "
                 "damaged; delete it and download it again (make data)");
        }
        if (inflateReset(&z_) != Z_OK) gzip_error("inflateReset failed");
        member_done_ = false;
        return true;
    }

    [[noreturn]] void gzip_error(const std::string& message) {
        fail(path_, "damaged gzip data (zlib: " + message + "); delete the file and download it again (make data)");
    }

    std::string path_;
    // A unique_ptr, so the file is closed even when the constructor throws.
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
    std::vector<unsigned char> in_;
    unsigned char* next_ = nullptr;  // unread input: [next_, end_)
    unsigned char* end_ = nullptr;
    std::vector<unsigned char> out_;  // decompressed, not yet read: [out_pos_, out_end_)
    size_t out_pos_ = 0, out_end_ = 0;
    bool eof_ = false;  // fread found the end of the file
    bool gzip_ = false;
    z_stream z_{};
    bool z_ready_ = false;
    bool member_done_ = false;
};

uint32_t big_endian(const unsigned char* bytes) {
    return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | bytes[3];
}

void check_magic(const std::string& path, uint32_t magic, uint32_t expected, const char* kind) {
    if (magic == expected) return;
    const int rank = static_cast<int>(magic & 0xFF), type = static_cast<int>((magic >> 8) & 0xFF);
    char text[256];
    if (magic == kImagesMagic || magic == kLabelsMagic) {
        std::snprintf(text, sizeof text, "is an IDX %s file (magic %u), expected an IDX %s file (magic %u)",
                      magic == kImagesMagic ? "image" : "label", magic, kind, expected);
    } else if ((magic >> 16) == 0 && type == 0x08) {
        std::snprintf(text, sizeof text, "IDX rank %d, expected rank %u for %s (magic %u)", rank, expected & 0xFF, kind,
                      expected);
    } else {
        std::snprintf(text, sizeof text, "not an IDX %s file: magic 0x%08x, expected %u (0x%08x)", kind, magic,
                      expected, expected);
    }
    fail(path, text);
}

// Reads `expected` payload bytes in chunks (memory grows with the data actually present, never with what the
// header claims), then makes sure nothing follows.
std::vector<uint8_t> read_payload(IdxStream& in, const std::string& path, size_t expected, const char* what) {
    std::vector<uint8_t> payload;
    payload.reserve(std::min<size_t>(expected, size_t{64} << 20));
    constexpr size_t kChunk = size_t{4} << 20;
    while (payload.size() < expected) {
        const size_t old_size = payload.size();
        const size_t want = std::min(kChunk, expected - old_size);
        payload.resize(old_size + want);
        const size_t got = in.read(payload.data() + old_size, want);
        payload.resize(old_size + got);
        if (got < want) {
            fail(path, "truncated: the header announces " + std::string(what) + " (" + std::to_string(expected) +
                           " bytes after the header) but the file holds only " + std::to_string(payload.size()));
        }
    }
    unsigned char extra[64];
    const size_t trailing = in.read(extra, sizeof extra);
    if (trailing > 0) {
        fail(path, "unexpected bytes after the " + std::to_string(expected) +
                       "-byte payload announced by the header (" + std::string(what) +
                       "): the file is longer than its header says");
    }
    return payload;
}

bool directory_has_mnist(const std::string& dir) {
    for (const char* name : {kTrainImagesFile, kTrainLabelsFile, kTestImagesFile, kTestLabelsFile}) {
        if (idx_file_in(dir, name).empty()) return false;
    }
    return true;
}

std::string missing_files(const std::string& dir) {
    std::string missing;
    for (const char* name : {kTrainImagesFile, kTrainLabelsFile, kTestImagesFile, kTestLabelsFile}) {
        if (idx_file_in(dir, name).empty()) missing += std::string(missing.empty() ? "" : ", ") + name + "[.gz]";
    }
    return missing;
}

// The repository this file was compiled from: CMake passes absolute source paths, so __FILE__ is
// <repo>/common/mnist.cpp. (A relative __FILE__ yields a relative path, which then is just checked from the
// current directory.)
std::string repository_data_dir() {
    const fs::path source(__FILE__);
    return (source.parent_path().parent_path() / "data" / "mnist").string();
}

// A relative --data or $MNIST_DIR is taken from the current directory, or else from the repository root (so
// MNIST_DIR=../shared/data/mnist, relative to the repository, also works from a build directory).
std::string resolve_directory(const std::string& dir) {
    if (fs::is_directory(dir) || fs::path(dir).is_absolute()) return dir;
    const fs::path from_repo = fs::path(repository_data_dir()).parent_path().parent_path() / dir;
    return fs::is_directory(from_repo) ? from_repo.lexically_normal().string() : dir;
}

std::string how_to_get_data() {
    return std::string(
               "To get MNIST: run `make data` in the repository (downloads the four files into data/mnist/); "
               "or "
               "pass --data DIR (or set MNIST_DIR=DIR) naming a directory that holds "
               "train-images-idx3-ubyte, "
               "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each may be "
               ".gz); or "
               "`apt-get install dataset-fashion-mnist` (Fashion-MNIST, used automatically from ") +
           kDebianFashionMnistDir + ").";
}

// Fashion-MNIST is recognized by where it is, not by its name: the IDX files are indistinguishable in format,
// and a path that merely contains "fashion" (or not) says nothing. Debian's package directory, reached by any
// path (a symlink, --data, $MNIST_DIR), is Fashion-MNIST.
bool is_debian_fashion_dir(const std::string& dir) {
    std::error_code ignored;
    return fs::equivalent(dir, kDebianFashionMnistDir, ignored);
}

void keep_first(MnistSplit& split, size_t limit) {
    if (limit == 0 || limit >= split.count) return;
    split.count = limit;
    split.images.resize(limit * kMnistPixels);
    split.labels.resize(limit);
    split.images.shrink_to_fit();
    split.labels.shrink_to_fit();
}

}  // namespace

std::string idx_file_in(const std::string& dir, const std::string& name) {
    const fs::path plain = fs::path(dir) / name;
    std::error_code ignored;
    if (fs::is_regular_file(plain, ignored)) return plain.string();
    const fs::path gz = fs::path(dir) / (name + ".gz");
    if (fs::is_regular_file(gz, ignored)) return gz.string();
    return "";
}

// Reads an IDX header of `size` bytes (magic, item count, then dimensions) and checks the magic and the item count.
// Returns the item count; the dimensions stay in `header` for the caller.
uint32_t read_idx_header(IdxStream& in, const std::string& path, unsigned char* header, size_t size, uint32_t magic,
                         const char* kind) {
    const size_t got = in.read(header, size);
    if (got < 4) {
        fail(path,
             "truncated: " + std::to_string(got) + " bytes, an IDX " + kind + " header needs " + std::to_string(size));
    }
    check_magic(path, big_endian(header), magic, kind);
    if (got < size) fail(path, "truncated header: " + std::to_string(got) + " bytes, expected " + std::to_string(size));
    const uint32_t n = big_endian(header + 4);
    if (n == 0) fail(path, std::string("the header announces 0 ") + kind + "s");
    if (n > kMaxItems) {
        fail(path, "the header announces " + std::to_string(n) + " " + kind + "s: not a plausible IDX file");
    }
    return n;
}

std::vector<uint8_t> read_idx_images(const std::string& path, size_t* count) {
    IdxStream in(path);
    unsigned char header[16];
    const uint32_t n = read_idx_header(in, path, header, sizeof header, kImagesMagic, "image");
    const uint32_t rows = big_endian(header + 8), cols = big_endian(header + 12);
    if (rows != kMnistRows || cols != kMnistCols) {
        fail(path, "images are " + std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28");
    }
    std::vector<uint8_t> images =
        read_payload(in, path, size_t{n} * kMnistPixels, (std::to_string(n) + " images of 28x28").c_str());
    *count = n;
    return images;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
    IdxStream in(path);
    unsigned char header[8];
    const uint32_t n = read_idx_header(in, path, header, sizeof header, kLabelsMagic, "label");
    std::vector<uint8_t> labels = read_payload(in, path, n, (std::to_string(n) + " labels").c_str());
    for (size_t i = 0; i < labels.size(); ++i) {
        if (labels[i] >= kMnistClasses) {
            fail(path, "label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                           ", expected a digit class 0..9");
        }
    }
    return labels;
}

MnistSplit read_idx_split(const std::string& images_path, const std::string& labels_path) {
    MnistSplit split;
    size_t image_count = 0;
    split.images = read_idx_images(images_path, &image_count);
    split.labels = read_idx_labels(labels_path);
    if (split.labels.size() != image_count) {
        throw std::runtime_error(images_path + " holds " + std::to_string(image_count) + " images but " + labels_path +
                                 " holds " + std::to_string(split.labels.size()) +
                                 " labels; expected the same count (are they from the same data set?)");
    }
    split.count = image_count;
    return split;
}

DataLocation find_mnist(const std::string& data_flag) {
    const auto only_here = [](const std::string& given, const std::string& how) {
        const std::string dir = resolve_directory(given);
        if (!fs::is_directory(dir)) {
            throw std::runtime_error(how + " names " + dir + ", which is not a directory. " + how_to_get_data());
        }
        if (!directory_has_mnist(dir)) {
            throw std::runtime_error(how + " names " + dir + ", which lacks " + missing_files(dir) + ". " +
                                     how_to_get_data());
        }
        return DataLocation{dir, how, is_debian_fashion_dir(dir)};
    };
    if (!data_flag.empty()) return only_here(data_flag, "--data");
    if (const char* env = std::getenv("MNIST_DIR"); env != nullptr && env[0] != '\0') {
        return only_here(env, "$MNIST_DIR");
    }
    if (directory_has_mnist("data/mnist")) return {"data/mnist", "./data/mnist", false};
    if (const std::string repo = repository_data_dir(); directory_has_mnist(repo)) {
        return {repo, "repository data/mnist", false};
    }
    if (directory_has_mnist(kDebianFashionMnistDir)) {
        return {kDebianFashionMnistDir, "Debian package", true};
    }
    throw std::runtime_error("MNIST not found (no --data, no $MNIST_DIR; looked in ./data/mnist, " +
                             repository_data_dir() + ", " + kDebianFashionMnistDir + "). " + how_to_get_data());
}

MnistDataset load_mnist(const std::string& data_flag, size_t limit, size_t test_limit) {
    const DataLocation where = find_mnist(data_flag);
    MnistDataset data;
    data.directory = where.directory;
    data.found_by = where.found_by;
    data.fashion = where.fashion;
    data.train =
        read_idx_split(idx_file_in(where.directory, kTrainImagesFile), idx_file_in(where.directory, kTrainLabelsFile));
    data.test =
        read_idx_split(idx_file_in(where.directory, kTestImagesFile), idx_file_in(where.directory, kTestLabelsFile));
    keep_first(data.train, limit);
    keep_first(data.test, test_limit);
    return data;
}

MnistDataset load_mnist_or_exit(const char* program, const std::string& data_flag, size_t limit, size_t test_limit) {
    try {
        return load_mnist(data_flag, limit, test_limit);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s: %s\n", program, error.what());
        std::exit(1);
    }
}

std::string MnistDataset::describe() const {
    std::string line = std::string(fashion ? "Fashion-MNIST (clothing images, not digits)" : "MNIST") + " from " +
                       directory + " (" + found_by + "): " + std::to_string(train.count) + " train, " +
                       std::to_string(test.count) + " test images";
    return line;
}
