// tests/test_mnist.cpp — the IDX reader on generated files (raw and gzip, good and every kind of bad),
// finding the data, the real MNIST files when MNIST_DIR is set, and data/download_mnist.sh without network.
#include <zlib.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "tests/test_support.h"

#include "common/mnist.h"

namespace fs = std::filesystem;
using test_support::mnist_dir_for_tests;

namespace {

using TempDir = test_support::TempDir;

void put_u32(std::vector<uint8_t>& bytes, uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
}

std::vector<uint8_t> image_file(const std::vector<uint8_t>& pixels, uint32_t count, uint32_t rows = 28,
                                uint32_t cols = 28, uint32_t magic = 2051) {
    std::vector<uint8_t> bytes;
    put_u32(bytes, magic);
    put_u32(bytes, count);
    put_u32(bytes, rows);
    put_u32(bytes, cols);
    bytes.insert(bytes.end(), pixels.begin(), pixels.end());
    return bytes;
}

std::vector<uint8_t> label_file(const std::vector<uint8_t>& labels, uint32_t count, uint32_t magic = 2049) {
    std::vector<uint8_t> bytes;
    put_u32(bytes, magic);
    put_u32(bytes, count);
    bytes.insert(bytes.end(), labels.begin(), labels.end());
    return bytes;
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
    gzFile file = gzopen(path.c_str(), "wb");
    REQUIRE(file != nullptr);
    if (!bytes.empty()) REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == int(bytes.size()));
    REQUIRE(gzclose(file) == Z_OK);
}

std::vector<uint8_t> read_raw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const std::runtime_error& error) {
        return error.what();
    }
    return "<no exception>";
}

struct Sample {
    std::vector<uint8_t> pixels, labels;
};

Sample random_sample(std::mt19937_64& rng, size_t count) {
    Sample s;
    s.pixels.resize(count * kMnistPixels);
    s.labels.resize(count);
    for (uint8_t& p : s.pixels) p = static_cast<uint8_t>(rng());
    for (uint8_t& l : s.labels) l = static_cast<uint8_t>(rng() % 10);
    return s;
}

// Writes the four standard files (gzip) for `train` and `test` into dir.
void write_dataset(const TempDir& dir, const Sample& train, const Sample& test) {
    write_gz(dir.file("train-images-idx3-ubyte.gz"), image_file(train.pixels, uint32_t(train.labels.size())));
    write_gz(dir.file("train-labels-idx1-ubyte.gz"), label_file(train.labels, uint32_t(train.labels.size())));
    write_raw(dir.file("t10k-images-idx3-ubyte"), image_file(test.pixels, uint32_t(test.labels.size())));
    write_raw(dir.file("t10k-labels-idx1-ubyte"), label_file(test.labels, uint32_t(test.labels.size())));
}

// Restores an environment variable when the test ends.
struct EnvGuard {
    std::string name;
    bool had;
    std::string old;
    explicit EnvGuard(std::string n) : name(std::move(n)) {
        const char* value = std::getenv(name.c_str());
        had = value != nullptr;
        if (had) old = value;
    }
    ~EnvGuard() {
        if (had)
            setenv(name.c_str(), old.c_str(), 1);
        else
            unsetenv(name.c_str());
    }
};

}  // namespace

TEST_CASE("mnist: reads generated IDX files, raw and gzip, byte for byte", "[mnist][idx]") {
    auto rng = test_support::rng_for_test();
    const Sample s = random_sample(rng, 7);
    TempDir dir;
    for (const bool gzip : {false, true}) {
        const std::string images = dir.file(gzip ? "img.gz" : "img"), labels = dir.file(gzip ? "lab.gz" : "lab");
        (gzip ? write_gz : write_raw)(images, image_file(s.pixels, 7));
        (gzip ? write_gz : write_raw)(labels, label_file(s.labels, 7));
        const MnistSplit split = read_idx_split(images, labels);
        CHECK(split.count == 7);
        CHECK(split.images == s.pixels);
        CHECK(split.labels == s.labels);
        CHECK(split.image(3)[5] == s.pixels[3 * 784 + 5]);
    }
}

TEST_CASE("mnist: every malformed image file is rejected with a message naming the file", "[mnist][idx]") {
    auto rng = test_support::rng_for_test();
    const Sample s = random_sample(rng, 5);
    std::vector<uint8_t> trailing = image_file(s.pixels, 5);
    trailing.push_back(0);
    std::vector<uint8_t> truncated = image_file(s.pixels, 5);
    truncated.resize(truncated.size() - 100);
    struct Case {
        const char* what;
        std::vector<uint8_t> bytes;
        const char* expected;
    };
    const std::vector<Case> cases = {
        {"empty file", {}, "truncated"},
        {"header cut short",
         [] {
             auto h = image_file({}, 5);
             h.resize(10);
             return h;
         }(),
         "truncated header"},
        {"label magic in an image file", image_file(s.pixels, 5, 28, 28, 2049), "expected an IDX image file"},
        {"rank 2", image_file(s.pixels, 5, 28, 28, 0x00000802), "rank 2"},
        {"not IDX at all", image_file(s.pixels, 5, 28, 28, 0x89504E47), "not an IDX image file"},
        {"32x32 images", image_file(s.pixels, 5, 32, 32), "expected 28x28"},
        {"28x27 images", image_file(s.pixels, 5, 28, 27), "expected 28x28"},
        {"zero images", image_file({}, 0), "0 images"},
        {"truncated payload", truncated, "truncated"},
        {"trailing garbage", trailing, "longer than its header says"},
        {"absurd count", image_file(s.pixels, 0xFFFFFFFFu), "not a plausible"},
        {"count just above the cap", image_file(s.pixels, 2'000'001u), "not a plausible"},
        {"large count, little data", image_file(s.pixels, 1'999'999u), "truncated"},  // allocates no 1.5 GB
    };
    TempDir dir;
    for (const Case& c : cases) {
        for (const bool gzip : {false, true}) {
            const std::string path = dir.file(std::string("bad") + (gzip ? ".gz" : ""));
            (gzip ? write_gz : write_raw)(path, c.bytes);
            size_t count = 0;
            const std::string message = error_of([&] { read_idx_images(path, &count); });
            INFO(c.what << (gzip ? " (gzip)" : " (raw)") << ": " << message);
            CHECK(message.find(path) != std::string::npos);
            CHECK(message.find(c.expected) != std::string::npos);
        }
    }
}

TEST_CASE("mnist: malformed label files, mismatched counts and missing files are rejected", "[mnist][idx]") {
    TempDir dir;
    const std::vector<uint8_t> labels = {3, 1, 10, 2};
    const std::string bad_label = dir.file("labels");
    write_raw(bad_label, label_file(labels, 4));
    std::string message = error_of([&] { read_idx_labels(bad_label); });
    INFO(message);
    CHECK(message.find("label 10 at index 2") != std::string::npos);

    write_raw(bad_label, label_file({1, 2}, 2, 2051));
    message = error_of([&] { read_idx_labels(bad_label); });
    CHECK(message.find("expected an IDX label file") != std::string::npos);

    write_raw(bad_label, label_file({1, 2}, 3));
    message = error_of([&] { read_idx_labels(bad_label); });
    CHECK(message.find("truncated") != std::string::npos);

    auto rng = test_support::rng_for_test();
    const Sample s = random_sample(rng, 3);
    write_raw(dir.file("images"), image_file(s.pixels, 3));
    write_raw(dir.file("labels"), label_file({1, 2, 3, 4}, 4));
    message = error_of([&] { read_idx_split(dir.file("images"), dir.file("labels")); });
    INFO(message);
    CHECK(message.find("holds 3 images but") != std::string::npos);
    CHECK(message.find("4 labels") != std::string::npos);

    message = error_of([&] { read_idx_labels(dir.file("missing")); });
    CHECK(message.find(dir.file("missing")) != std::string::npos);
    CHECK(message.find("no such file") != std::string::npos);
}

TEST_CASE("mnist: a damaged gzip stream is reported, not read as short data", "[mnist][idx][gzip]") {
    auto rng = test_support::rng_for_test();
    const Sample s = random_sample(rng, 40);
    TempDir dir;
    const std::string good = dir.file("good.gz");
    write_gz(good, image_file(s.pixels, 40));
    const std::vector<uint8_t> compressed = read_raw(good);
    REQUIRE(compressed.size() > 200);

    std::vector<uint8_t> corrupt = compressed;  // garble the deflate data after the 10-byte gzip header
    for (size_t i = 20; i < 60; ++i) corrupt[i] ^= 0x5A;
    write_raw(dir.file("corrupt.gz"), corrupt);
    size_t count = 0;
    std::string message = error_of([&] { read_idx_images(dir.file("corrupt.gz"), &count); });
    INFO(message);
    CHECK(message.find(dir.file("corrupt.gz")) != std::string::npos);
    CHECK((message.find("damaged gzip") != std::string::npos || message.find("truncated") != std::string::npos));

    std::vector<uint8_t> cut(compressed.begin(), compressed.begin() + compressed.size() / 2);
    write_raw(dir.file("cut.gz"), cut);
    message = error_of([&] { read_idx_images(dir.file("cut.gz"), &count); });
    INFO(message);
    CHECK(message.find(dir.file("cut.gz")) != std::string::npos);
    CHECK(message.find("damaged gzip") != std::string::npos);

    std::vector<uint8_t> bad_crc = compressed;  // payload intact, CRC-32 in the trailer wrong
    bad_crc[bad_crc.size() - 8] ^= 0xFF;
    write_raw(dir.file("crc.gz"), bad_crc);
    message = error_of([&] { read_idx_images(dir.file("crc.gz"), &count); });
    INFO(message);
    CHECK(message.find("damaged gzip") != std::string::npos);
}

TEST_CASE("mnist: bytes after the gzip data are rejected unless they are another gzip member", "[mnist][idx][gzip]") {
    auto rng = test_support::rng_for_test();
    const Sample s = random_sample(rng, 12);
    TempDir dir;
    const std::vector<uint8_t> labels = label_file(s.labels, 12);
    write_gz(dir.file("labels.gz"), labels);
    const std::vector<uint8_t> compressed = read_raw(dir.file("labels.gz"));

    // (gzip -c labels; printf garbage) > X.gz: gzread would stop at the end of the member and ignore the rest.
    const auto with_tail = [&](const std::string& name, const std::string& tail) {
        std::vector<uint8_t> bytes = compressed;
        bytes.insert(bytes.end(), tail.begin(), tail.end());
        write_raw(dir.file(name), bytes);
        return error_of([&] { read_idx_labels(dir.file(name)); });
    };
    for (const auto& [name, tail] : std::vector<std::pair<std::string, std::string>>{
             {"garbage.gz", "garbage"}, {"zeros.gz", std::string(8, '\0')}, {"half_magic.gz", "\x1f"}}) {
        const std::string message = with_tail(name, tail);
        INFO(name << ": " << message);
        CHECK(message.find(dir.file(name)) != std::string::npos);
        CHECK(message.find("unexpected bytes after the end of the gzip data") != std::string::npos);
    }
    if (std::system("command -v gzip > /dev/null 2>&1") == 0) {  // the same thing made by the gzip tool itself
        write_raw(dir.file("labels"), labels);
        const std::string cmd =
            "(gzip -c '" + dir.file("labels") + "'; printf garbage) > '" + dir.file("shell.gz") + "'";
        REQUIRE(std::system(cmd.c_str()) == 0);
        const std::string message = error_of([&] { read_idx_labels(dir.file("shell.gz")); });
        INFO(message);
        CHECK(message.find("unexpected bytes after the end of the gzip data") != std::string::npos);
    }

    // Two members (what `cat a.gz b.gz` makes) are one valid stream: the payload split across them reads whole.
    const std::vector<uint8_t> first_part(labels.begin(), labels.begin() + 5),
        second_part(labels.begin() + 5, labels.end());
    write_gz(dir.file("a.gz"), first_part);
    write_gz(dir.file("b.gz"), second_part);
    std::vector<uint8_t> two = read_raw(dir.file("a.gz"));
    const std::vector<uint8_t> b = read_raw(dir.file("b.gz"));
    two.insert(two.end(), b.begin(), b.end());
    write_raw(dir.file("two.gz"), two);
    CHECK(read_idx_labels(dir.file("two.gz")) == s.labels);
    // ...and a second member that is damaged is reported as damaged gzip data.
    std::vector<uint8_t> bad_second = two;
    bad_second[bad_second.size() - 8] ^= 0xFF;  // the second member's CRC-32
    write_raw(dir.file("bad_second.gz"), bad_second);
    const std::string message = error_of([&] { read_idx_labels(dir.file("bad_second.gz")); });
    INFO(message);
    CHECK(message.find("damaged gzip") != std::string::npos);
}

TEST_CASE("mnist: Fashion-MNIST is recognized by its location, not by the word fashion in its path", "[mnist][find]") {
    EnvGuard guard("MNIST_DIR");
    unsetenv("MNIST_DIR");
    auto rng = test_support::rng_for_test();
    const Sample train = random_sample(rng, 3), test = random_sample(rng, 2);
    TempDir parent;
    const fs::path named = parent.path / "my-fashion-experiments";  // digits, in a directory named "fashion"
    fs::create_directories(named);
    TempDir dir;
    write_dataset(dir, train, test);
    for (const char* name : {kTrainImagesFile, kTrainLabelsFile, kTestImagesFile, kTestLabelsFile}) {
        const std::string from = idx_file_in(dir.path.string(), name);
        fs::copy_file(from, named / fs::path(from).filename());
    }
    CHECK_FALSE(find_mnist(named.string()).fashion);
    CHECK_FALSE(load_mnist(named.string()).fashion);
    CHECK(load_mnist(named.string()).describe().rfind("MNIST from", 0) == 0);
    if (fs::is_directory(kDebianFashionMnistDir)) {  // dataset-fashion-mnist installed: found by --data too
        CHECK(find_mnist(kDebianFashionMnistDir).fashion);
    }
}

TEST_CASE("mnist: finds the data through --data and MNIST_DIR, both name and name.gz, and --limit", "[mnist][find]") {
    EnvGuard guard("MNIST_DIR");
    auto rng = test_support::rng_for_test();
    const Sample train = random_sample(rng, 9), test = random_sample(rng, 4);
    TempDir dir;
    write_dataset(dir, train, test);
    CHECK(idx_file_in(dir.path.string(), "train-images-idx3-ubyte") == dir.file("train-images-idx3-ubyte.gz"));
    CHECK(idx_file_in(dir.path.string(), "t10k-images-idx3-ubyte") == dir.file("t10k-images-idx3-ubyte"));
    CHECK(idx_file_in(dir.path.string(), "nothing").empty());

    unsetenv("MNIST_DIR");
    const DataLocation by_flag = find_mnist(dir.path.string());
    CHECK(by_flag.directory == dir.path.string());
    CHECK(by_flag.found_by == "--data");
    CHECK_FALSE(by_flag.fashion);

    setenv("MNIST_DIR", dir.path.string().c_str(), 1);
    const DataLocation by_env = find_mnist("");
    CHECK(by_env.directory == dir.path.string());
    CHECK(by_env.found_by == "$MNIST_DIR");

    const MnistDataset all = load_mnist("");
    CHECK(all.train.count == 9);
    CHECK(all.test.count == 4);
    CHECK(all.train.images == train.pixels);
    CHECK(all.test.labels == test.labels);
    CHECK(all.describe().find("9 train, 4 test") != std::string::npos);

    const MnistDataset limited = load_mnist(dir.path.string(), 3);
    CHECK(limited.train.count == 3);
    CHECK(limited.test.count == 4);  // --limit cuts the training set only
    CHECK(limited.test.labels == test.labels);
    CHECK(limited.train.images.size() == 3 * 784);
    CHECK(std::equal(limited.train.labels.begin(), limited.train.labels.end(), train.labels.begin()));
}

TEST_CASE("mnist: data not found says exactly how to get it", "[mnist][find]") {
    EnvGuard guard("MNIST_DIR");
    TempDir empty;
    const auto check_instructions = [](const std::string& message) {
        INFO(message);
        CHECK(message.find("make data") != std::string::npos);
        CHECK(message.find("--data DIR") != std::string::npos);
        CHECK(message.find("apt-get install dataset-fashion-mnist") != std::string::npos);
    };
    std::string message = error_of([&] { find_mnist(empty.file("does-not-exist")); });
    check_instructions(message);
    CHECK(message.find("not a directory") != std::string::npos);

    write_raw(empty.file("train-images-idx3-ubyte"), {});
    message = error_of([&] { find_mnist(empty.path.string()); });
    check_instructions(message);
    CHECK(message.find("lacks train-labels-idx1-ubyte[.gz]") != std::string::npos);
    CHECK(message.find("t10k-images-idx3-ubyte[.gz]") != std::string::npos);

    setenv("MNIST_DIR", empty.path.string().c_str(), 1);
    message = error_of([&] { load_mnist(""); });
    check_instructions(message);
    CHECK(message.find("$MNIST_DIR") != std::string::npos);
}

TEST_CASE("mnist: the real MNIST files (MNIST_DIR)", "[mnist][real]") {
    const std::string dir = mnist_dir_for_tests();
    if (dir.empty()) test_support::exit_skipped("MNIST_DIR is not set");
    const MnistDataset data = load_mnist(dir);
    REQUIRE(data.train.count == 60000);
    REQUIRE(data.test.count == 10000);
    CHECK_FALSE(data.fashion);
    const std::array<int, 10> expected = {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949};
    std::array<int, 10> histogram{};
    for (uint8_t label : data.train.labels) ++histogram[label];
    CHECK(histogram == expected);
    CHECK(data.train.labels[0] == 5);  // the well-known first digits
    CHECK(data.test.labels[0] == 7);
    size_t ink = 0;  // about 19% of MNIST pixels are non-zero
    for (size_t i = 0; i < 1000 * size_t(kMnistPixels); ++i) ink += data.train.images[i] != 0;
    CHECK(ink > 100000);
    CHECK(ink < 250000);

    // The header fields, read directly from the decompressed file.
    gzFile file = gzopen(idx_file_in(dir, kTrainImagesFile).c_str(), "rb");
    REQUIRE(file != nullptr);
    unsigned char header[16];
    REQUIRE(gzread(file, header, 16) == 16);
    gzclose(file);
    const auto be = [&](int at) {
        return (uint32_t(header[at]) << 24) | (uint32_t(header[at + 1]) << 16) | (uint32_t(header[at + 2]) << 8) |
               header[at + 3];
    };
    CHECK(be(0) == 2051);
    CHECK(be(4) == 60000);
    CHECK(be(8) == 28);
    CHECK(be(12) == 28);
}

TEST_CASE("data/download_mnist.sh: offline leaves nothing behind and a local mirror is verified by MD5",
          "[mnist][download]") {
    if (std::system("command -v bash > /dev/null && command -v md5sum > /dev/null && "
                    "(command -v curl || command -v wget) > /dev/null") != 0) {
        test_support::exit_skipped("bash, md5sum and curl or wget are needed");
    }
    const std::string script = std::string(TEST_SOURCE_DIR) + "/data/download_mnist.sh";
    TempDir target;
    const auto run = [&](const std::string& mirrors) {
        const std::string command = "MNIST_MIRRORS='" + mirrors + "' bash '" + script + "' '" + target.path.string() +
                                    "' > '" + target.file("log") + "' 2>&1";
        const int status = std::system(command.c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };
    const auto data_files = [&] {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(target.path)) {
            if (entry.path().filename() != "log") names.push_back(entry.path().filename().string());
        }
        return names;
    };

    // An unreachable mirror (what offline looks like): non-zero, no files, no partial downloads.
    CHECK(run("file:///nonexistent-mirror/") != 0);
    CHECK(data_files().empty());
    const std::vector<uint8_t> log = read_raw(target.file("log"));
    const std::string log_text(log.begin(), log.end());
    INFO(log_text);
    CHECK(log_text.find("could not download") != std::string::npos);

    const std::string mnist = mnist_dir_for_tests();
    if (mnist.empty()) return;  // the rest needs the real files to copy from
    // A mirror serving a corrupted file: that file is refused, the others land.
    TempDir bad_mirror;
    for (const char* name : {kTrainImagesFile, kTrainLabelsFile, kTestImagesFile, kTestLabelsFile}) {
        fs::copy_file(fs::path(mnist) / (std::string(name) + ".gz"), bad_mirror.path / (std::string(name) + ".gz"));
    }
    std::vector<uint8_t> labels = read_raw(bad_mirror.file("t10k-labels-idx1-ubyte.gz"));
    labels[labels.size() / 2] ^= 1;
    write_raw(bad_mirror.file("t10k-labels-idx1-ubyte.gz"), labels);
    CHECK(run("file://" + bad_mirror.path.string() + "/") != 0);
    std::vector<std::string> files = data_files();
    std::sort(files.begin(), files.end());
    CHECK(files == std::vector<std::string>{"t10k-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz",
                                            "train-labels-idx1-ubyte.gz"});

    // The good mirror completes the set; the result loads.
    CHECK(run("file://" + mnist + "/") == 0);
    CHECK(data_files().size() == 4);
    const MnistDataset data = load_mnist(target.path.string(), 10);
    CHECK(data.test.labels[0] == 7);
}
