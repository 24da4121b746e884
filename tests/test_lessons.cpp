// tests/test_lessons.cpp — the lesson executables end to end: what each one promises about the others (01 and 02
// train bitwise-equal weights and 02 copies a quarter of the image bytes; 03, with and without --resident, equals
// 02), that lesson 01 follows the float64 reference trainer step by step, that every JSON report has the keys
// scripts read, and that bad input gets one message and a non-zero exit.
//
// The data: real MNIST when MNIST_DIR is set (CI), else a generated learnable stand-in written as IDX files.
#include "tests/test_support.h"  // first: Catch2 pulls in <memory> before the backend's macros

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/gemm_version.h"  // kGemmVersionCount (host-only)
#include "lessons/lesson.h"           // kCpuTrainImages, training_step_gemm_flops

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Scratch = test_support::TempDir;  // one test case's data and reports

// MNIST-like statistics without MNIST: mostly background (4 pixels in 5 are 0, as in MNIST), random ink, random
// labels. Nothing to learn, so the loss stays near log 10 and comparing losses stays well conditioned (a learnable
// stand-in drives it to ~1e-6 within 20 steps; dense random pixels make AdamW's first steps chaotic).
MnistSplit random_split(std::mt19937_64& rng, size_t count) {
    MnistSplit split;
    split.count = count;
    split.images.resize(count * kMnistPixels);
    split.labels.resize(count);
    for (uint8_t& p : split.images) p = rng() % 5 == 0 ? static_cast<uint8_t>(rng()) : 0;
    for (uint8_t& l : split.labels) l = static_cast<uint8_t>(rng() % 10);
    return split;
}

// The data flag for the runs: MNIST_DIR, or generated IDX files in `scratch`.
std::string data_dir(const Scratch& scratch) {
    const std::string mnist = test_support::mnist_dir_for_tests();
    if (!mnist.empty()) return mnist;
    auto rng = test_support::rng_for_test();
    test_support::write_idx_dataset(scratch.path.string(), random_split(rng, 3000), random_split(rng, 500));
    return scratch.path.string();
}

struct Run {
    int exit_code = -1;
    std::string output;  // stdout and stderr
    json report;         // the --json file, when the run wrote one
};

// Runs a program of this build (lessons/NAME or tools/NAME) with `args`, writing its JSON to scratch/<tag>.json.
Run run(const Scratch& scratch, const std::string& binary, const std::string& args, const std::string& tag,
        const std::string& environment = "") {
    const std::string json_path = scratch.file(tag + ".json"), log_path = scratch.file(tag + ".log");
    const std::string command = environment + " '" + std::string(BUILD_DIR) + "/" + binary + "' " + args + " --json '" +
                                json_path + "' >'" + log_path + "' 2>&1";
    const int status = std::system(command.c_str());
    Run result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    result.output = text.str();
    if (fs::exists(json_path)) result.report = json::parse(std::ifstream(json_path));
    return result;
}

// Every key the README promises scripts (and `make run`'s comparison table) can read.
void check_report_keys(const json& r) {
    for (const char* key : {"program", "backend", "config", "epochs", "transfers", "memory", "results"}) {
        INFO(key);
        REQUIRE(r.contains(key));
    }
    REQUIRE(!r["epochs"].empty());
    for (const json& epoch : r["epochs"]) {
        CHECK(epoch.contains("train_loss"));
        CHECK(epoch.contains("test_accuracy"));
        CHECK(epoch.contains("seconds"));
        const json& h2d = epoch["timing"]["phases"]["h2d"];
        CHECK(h2d.contains("ms"));
        CHECK(h2d.contains("bytes"));
    }
    for (const char* key : {"h2d_pageable_bytes", "h2d_pinned_bytes", "d2h_pageable_bytes", "d2h_pinned_bytes"}) {
        INFO(key);
        CHECK(r["transfers"].contains(key));
    }
    for (const char* category : {"parameters", "gradients", "optimizer_state", "activations", "input_staging"}) {
        INFO(category);
        CHECK(r["memory"]["device"][category]["peak_bytes"].get<uint64_t>() > 0);
    }
    CHECK(r["results"]["final_test_accuracy"].get<double>() >= 0.0);
    CHECK(r["results"]["weights_checksum"].get<std::string>().size() == 16);
}

// Small and quick, with a partial last batch: 300 images in batches of 64 (4 × 64 + 44), two epochs.
const std::string kQuick = " --limit 300 --test-limit 100 --batch 64 --hidden 128,64 --epochs 2 --quiet";

}  // namespace

TEST_CASE("lessons: 01 and 02 train bitwise-equal weights, and 02 copies exactly 1/4 of 01's image bytes",
          "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const Run naive = run(scratch, "lessons/lesson01_naive_fp32", data + kQuick, "01");
    const Run device = run(scratch, "lessons/lesson02_device_normalize", data + kQuick, "02");
    INFO(naive.output);
    INFO(device.output);
    REQUIRE(naive.exit_code == 0);
    REQUIRE(device.exit_code == 0);
    check_report_keys(naive.report);
    check_report_keys(device.report);

    // Same inputs (one normalize formula on host and device), same kernels, same order: the same bits.
    CHECK(naive.report["results"]["weights_checksum"] == device.report["results"]["weights_checksum"]);
    CHECK(naive.report["epochs"][1]["train_loss"] == device.report["epochs"][1]["train_loss"]);
    const uint64_t image_bytes_01 = naive.report["results"]["image_bytes_per_epoch"];
    const uint64_t image_bytes_02 = device.report["results"]["image_bytes_per_epoch"];
    CHECK(image_bytes_01 == 300ull * 784 * 4);
    CHECK(image_bytes_02 * 4 == image_bytes_01);
    // Both copy from pageable memory; lesson 01 also reads the loss back every step (5 steps × 2 epochs).
    CHECK(naive.report["transfers"]["h2d_pinned_bytes"] == 0);
    CHECK(naive.report["epochs"][0]["timing"]["phases"]["d2h"]["calls"] == 5);
    // The host's float copy of the training set is in lesson 01's host memory and gone from lesson 02's.
    CHECK(naive.report["memory"]["host_pageable"]["input_staging"]["peak_bytes"].get<uint64_t>() >= 300ull * 784 * 4);
    CHECK(device.report["memory"]["host_pageable"]["input_staging"]["peak_bytes"].get<uint64_t>() < 300ull * 784);
}

TEST_CASE("lessons: 03 (pinned, async, prefetched) and 03 --resident train lesson 02's weights bitwise", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const Run device = run(scratch, "lessons/lesson02_device_normalize", data + kQuick, "02");
    const Run async = run(scratch, "lessons/lesson03_pinned_async", data + kQuick, "03");
    const Run resident = run(scratch, "lessons/lesson03_pinned_async", data + kQuick + " --resident", "03r");
    INFO(async.output);
    INFO(resident.output);
    REQUIRE(device.exit_code == 0);
    REQUIRE(async.exit_code == 0);
    REQUIRE(resident.exit_code == 0);
    check_report_keys(async.report);
    check_report_keys(resident.report);
    const json& want = device.report["results"]["weights_checksum"];
    CHECK(async.report["results"]["weights_checksum"] == want);
    CHECK(resident.report["results"]["weights_checksum"] == want);
    // The loss summed on the device is the host's sum of lesson 02, bit for bit.
    CHECK(async.report["epochs"][1]["train_loss"] == device.report["epochs"][1]["train_loss"]);

    // Pinned staging: the batches cross from pinned memory, and as many image bytes as lesson 02.
    CHECK(async.report["results"]["image_bytes_per_epoch"] == device.report["results"]["image_bytes_per_epoch"]);
    CHECK(async.report["transfers"]["h2d_pinned_bytes"].get<uint64_t>() >= 2ull * 300 * 785);
    CHECK(async.report["memory"]["host_pinned"]["input_staging"]["peak_bytes"].get<uint64_t>() == 2ull * 64 * 785);
    // --resident: no image crosses per epoch, only the order (4 bytes per image).
    CHECK(resident.report["results"]["image_bytes_per_epoch"] == 0);
    CHECK(resident.report["epochs"][0]["timing"]["phases"]["h2d"]["bytes"] == 300 * 4);
}

TEST_CASE("lessons: 04 with every GEMM step follows lesson 03, and one step twice gives the same bits", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const Run simple = run(scratch, "lessons/lesson03_pinned_async", data + kQuick, "03");
    REQUIRE(simple.exit_code == 0);
    const double want = simple.report["epochs"][1]["train_loss"];
    for (int v = 1; v <= kGemmVersionCount; ++v) {
        char name[16];  // "v" and any int
        std::snprintf(name, sizeof name, "v%d", v);  // (not "v" + to_string: g++ 12 warns -Wrestrict on that)
        const std::string step = name;
        const Run fast = run(scratch, "lessons/lesson04_fast_kernels", data + kQuick + " --gemm " + step, step);
        UNSCOPED_INFO(step << " relative loss difference "
                           << std::fabs(fast.report["epochs"][1]["train_loss"].get<double>() - want) / want);
        INFO(fast.output);
        REQUIRE(fast.exit_code == 0);
        check_report_keys(fast.report);
        CHECK(fast.report["config"]["gemm"] == step);
        // Each GEMM step sums its K products in its own order (tiles, register blocks), so the floats differ in the
        // last bits from lesson 03's and may drift apart a little over 10 AdamW steps; the second epoch's mean loss
        // differed by at most 1.7e-8 relative on real MNIST (CPU backend, 2026-12-01). 1e-5 leaves room for a GPU's
        // fused multiply-adds, while a wrong GEMM or epilogue is off by far more.
        const double got = fast.report["epochs"][1]["train_loss"];
        CHECK(std::fabs(got - want) <= 1e-5 * want);
        CHECK(fast.report["results"]["gemm_v1_forward_ms"].get<double>() > 0);  // the staircase table ran
    }
    const Run again = run(scratch, "lessons/lesson04_fast_kernels", data + kQuick + " --gemm v6", "v6_again");
    const Run first = run(scratch, "lessons/lesson04_fast_kernels", data + kQuick + " --gemm v6", "v6_first");
    CHECK(again.report["results"]["weights_checksum"] == first.report["results"]["weights_checksum"]);
    char past_the_top[32];  // a step past the top
    std::snprintf(past_the_top, sizeof past_the_top, " --gemm v%d", kGemmVersionCount + 1);
    const Run bad = run(scratch, "lessons/lesson04_fast_kernels", data + past_the_top, "bad_gemm");
    CHECK(bad.exit_code == 2);
}

TEST_CASE("lessons: 08 trains bitwise the same weights with 1, 2 and 4 loader workers and on the device, and "
          "--augment none is lesson 04",
          "[lessons][augment]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const std::string lesson = "lessons/lesson08_data_loading";
    const std::string quick = kQuick + " --compare-steps 0";
    const Run host1 = run(scratch, lesson, data + quick + " --augment host --workers 1", "host1");
    INFO(host1.output);
    REQUIRE(host1.exit_code == 0);
    check_report_keys(host1.report);
    const std::string want = host1.report["results"]["weights_checksum"];
    for (const char* workers : {"2", "4"}) {
        const Run host = run(scratch, lesson, data + quick + " --augment host --workers " + workers, workers);
        INFO(workers << " workers: " << host.output);
        REQUIRE(host.exit_code == 0);
        CHECK(host.report["results"]["weights_checksum"] == want);
        CHECK(host.report["config"]["workers"] == std::stoi(workers));
        // N + 1 pinned staging slots of 64 images (785 bytes each).
        CHECK(host.report["memory"]["host_pinned"]["input_staging"]["peak_bytes"].get<uint64_t>() ==
              uint64_t(std::stoi(workers) + 1) * 64 * 785);
    }
    // The kernel's augmented pixels are the host's bit for bit, so the weights are too; with the comparison runs.
    const Run device = run(scratch, lesson, data + kQuick + " --augment device --compare-steps 2", "device");
    INFO(device.output);
    REQUIRE(device.exit_code == 0);
    CHECK(device.report["results"]["weights_checksum"] == want);
    // 1 byte per pixel crosses, as in lesson 04 (the originals), plus the epoch's order (4 bytes per image).
    CHECK(device.report["results"]["image_bytes_per_epoch"] == 300 * 784);
    CHECK(device.report["epochs"][0]["timing"]["phases"]["h2d"]["bytes"] == 300 * (784 + 1 + 4));
    const json& runs = device.report["results"]["loader_runs"];
    REQUIRE(runs.size() == 6);  // none, host × 1, 2, 4 workers, device; then the main run
    CHECK(runs[0]["mode"] == "none");
    CHECK(runs[3]["workers"] == 4);
    CHECK(runs[5]["mode"] == "device");
    for (const json& r : runs) {
        INFO(r.dump());
        CHECK(r["wall_ms_per_step"].get<double>() > 0);
        CHECK(r["image_bytes_per_image"] == 784);
        CHECK(r["test_accuracy"].get<double>() > 0);
    }
    CHECK(runs[1]["loader_images_per_second"].get<double>() > 0);
    // Without augmentation: lesson 04's data path and kernels, bit for bit.
    const Run none = run(scratch, lesson, data + quick + " --augment none", "none");
    const Run fast = run(scratch, "lessons/lesson04_fast_kernels", data + kQuick, "04");
    REQUIRE(none.exit_code == 0);
    CHECK(none.report["results"]["weights_checksum"] == fast.report["results"]["weights_checksum"]);
    CHECK(none.report["results"]["weights_checksum"] != want);
    const Run bad = run(scratch, lesson, data + " --workers 0", "bad_workers");
    CHECK(bad.exit_code == 2);
    CHECK(bad.output.find("--workers") != std::string::npos);
}

TEST_CASE("lessons: lesson 08's first 20 augmented steps follow the float64 reference trainer with --augment",
          "[lessons][reference][augment]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string flags = " --data '" + data_dir(scratch) + "' --limit 2560 --test-limit 100 --epochs 1 --quiet";
    const Run lesson =
        run(scratch, "lessons/lesson08_data_loading", flags + " --augment host --workers 2 --compare-steps 0", "08");
    const Run reference = run(scratch, "tools/reference",
                              flags + " --hidden 1024,1024 --optimizer adamw --lr-schedule cosine --augment", "ref");
    const Run plain = run(scratch, "tools/reference",
                          flags + " --hidden 1024,1024 --optimizer adamw --lr-schedule cosine", "plain");
    INFO(lesson.output);
    INFO(reference.output);
    REQUIRE(lesson.exit_code == 0);
    REQUIRE(reference.exit_code == 0);
    REQUIRE(plain.exit_code == 0);
    const std::vector<double> got = lesson.report["results"]["step_losses"];
    const std::vector<double> want = reference.report["results"]["step_losses"];
    const std::vector<double> unaugmented = plain.report["results"]["step_losses"];
    REQUIRE(got.size() == 20);
    REQUIRE(want.size() == 20);
    // As lesson 01's test (float32 against float64 from the same float32 inputs): the augmented pixels are the same
    // bytes in both, so only the float32 rounding separates them: measured at most 4.1e-7 relative on real MNIST
    // (CPU backend, 2026-12-02). The generated stand-in (no MNIST_DIR: random labels, and its sparse random ink
    // blurred by the bilinear sampling into dense noise) makes AdamW's first steps amplify rounding: measured 6.8e-5
    // there, hence its own bound. The reference without --augment is 0.78 (MNIST) and 0.17 (generated) relative away
    // at its farthest step.
    const double tolerance = test_support::mnist_dir_for_tests().empty() ? 3e-4 : 2e-5;
    double apart = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("step " << i + 1 << ": lesson " << got[i] << ", reference " << want[i]);
        CHECK(std::fabs(got[i] - want[i]) <= tolerance * std::fabs(want[i]));
        apart = std::max(apart, std::fabs(unaugmented[i] - want[i]) / std::fabs(want[i]));
    }
    CHECK(apart > 1e-3);  // augmentation changed the inputs: the check above would catch a lesson that skipped it
}

TEST_CASE("lessons: 05 trains all four precisions, and --precision fp32 is lesson 04 bit for bit", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const Run fp32 = run(scratch, "lessons/lesson05_mixed_precision", data + kQuick + " --precision fp32", "05_fp32");
    const Run fast = run(scratch, "lessons/lesson04_fast_kernels", data + kQuick, "04");
    INFO(fp32.output);
    REQUIRE(fp32.exit_code == 0);
    REQUIRE(fast.exit_code == 0);
    check_report_keys(fp32.report);
    // Same kernels (GEMM step 6), same data path, same AdamW arithmetic (the counting kernel's fp32 instantiation).
    CHECK(fp32.report["results"]["weights_checksum"] == fast.report["results"]["weights_checksum"]);

    const Run all = run(scratch, "lessons/lesson05_mixed_precision", data + kQuick, "05_all");
    INFO(all.output);
    REQUIRE(all.exit_code == 0);
    check_report_keys(all.report);
    const json& runs = all.report["results"]["precision_runs"];
    REQUIRE(runs.size() == 4);
    std::vector<std::string> modes;
    for (const json& r : runs) {
        modes.push_back(r["mode"]);
        for (const char* key :
             {"test_accuracy", "final_train_loss", "stalled_update_fraction", "underflow_fraction_unscaled",
              "underflow_fraction_scaled", "seconds_per_epoch", "peak_device_bytes", "skipped_steps"}) {
            INFO(r["mode"] << " " << key);
            CHECK(r.contains(key));
        }
        CHECK(std::isfinite(r["final_train_loss"].get<double>()));
    }
    CHECK(modes == std::vector<std::string>{"fp32", "fp16-pure", "fp16-weights", "mixed"});
    // The mixed run is the one the tables describe: fp16 parameters and activations (half of fp32's bytes), fp32
    // gradients, optimizer state and master weights.
    const json& device = all.report["memory"]["device"];
    const json& device_fp32 = fp32.report["memory"]["device"];
    CHECK(device["parameters"]["peak_bytes"].get<uint64_t>() * 2 ==
          device_fp32["parameters"]["peak_bytes"].get<uint64_t>());
    CHECK(device["activations"]["peak_bytes"].get<uint64_t>() * 2 ==
          device_fp32["activations"]["peak_bytes"].get<uint64_t>());
    CHECK(device["master_weights"]["peak_bytes"] == device_fp32["parameters"]["peak_bytes"]);
    CHECK(device["gradients"]["peak_bytes"] == device_fp32["gradients"]["peak_bytes"]);
    // fp32 master weights never round an update away at these sizes; fp16 weights do.
    CHECK(runs[3]["stalled_update_fraction"].get<double>() < runs[2]["stalled_update_fraction"].get<double>());
    CHECK(all.output.find("loss scale now") != std::string::npos);
    const Run bad = run(scratch, "lessons/lesson05_mixed_precision", data + " --precision fp8", "bad");
    CHECK(bad.exit_code == 2);
}

TEST_CASE("lessons: lesson 05's first 20 mixed-precision steps follow the float64 reference trainer",
          "[lessons][reference]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string flags = " --data '" + data_dir(scratch) + "' --limit 2560 --test-limit 100 --epochs 1 --quiet";
    const Run lesson = run(scratch, "lessons/lesson05_mixed_precision", flags + " --precision mixed", "05");
    const Run reference = run(scratch, "tools/reference",
                              flags + " --hidden 1024,1024 --optimizer adamw --lr-schedule cosine", "reference");
    INFO(lesson.output);
    REQUIRE(lesson.exit_code == 0);
    REQUIRE(reference.exit_code == 0);
    const std::vector<double> got = lesson.report["results"]["step_losses"];
    const std::vector<double> want = reference.report["results"]["step_losses"];
    REQUIRE(got.size() == 20);
    REQUIRE(want.size() == 20);
    // fp16 stores each input, weight and activation with a relative rounding error of up to 2⁻¹¹ ≈ 4.9e-4; the
    // products are exact and summed in fp32, so the first step's loss agrees to about that (measured 5.5e-5). Each
    // step's rounding then nudges AdamW's updates, and the two runs drift apart slowly: at most 7.2e-3 relative
    // over these 20 steps on real MNIST (CPU backend, 2026-12-01). 2e-2 leaves room for a GPU's own rounding and
    // still fails for a wrong GEMM, layout or loss gradient, which are off by far more within a few steps.
    // (AdamW divides by √v̂, so a wrong loss-scale factor alone barely moves the loss: tests/test_loss_scaling.cu
    // checks the unscaling bit for bit.)
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("step " << i + 1 << ": lesson " << got[i] << ", reference " << want[i]);
        CHECK(std::fabs(got[i] - want[i]) <= 2e-2 * std::fabs(want[i]));
    }
}

TEST_CASE("lessons: --optimizer sgd trains lessons 01-04 with momentum SGD, the fp16 lessons refuse it", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const std::string sgd = kQuick + " --optimizer sgd";
    const Run naive = run(scratch, "lessons/lesson01_naive_fp32", data + sgd, "01_sgd");
    const Run async = run(scratch, "lessons/lesson03_pinned_async", data + sgd, "03_sgd");
    const Run adamw = run(scratch, "lessons/lesson01_naive_fp32", data + kQuick, "01_adamw");
    INFO(naive.output);
    REQUIRE(naive.exit_code == 0);
    REQUIRE(async.exit_code == 0);
    CHECK(naive.report["config"]["optimizer"] == "sgd");
    CHECK(naive.report["config"]["lr"] == 0.05);  // sgd's default, not AdamW's 1e-3
    CHECK(naive.report["results"]["weights_checksum"] == async.report["results"]["weights_checksum"]);
    CHECK(naive.report["results"]["weights_checksum"] != adamw.report["results"]["weights_checksum"]);
    CHECK(std::isfinite(naive.report["epochs"][1]["train_loss"].get<double>()));
    const Run half = run(scratch, "lessons/lesson05_mixed_precision", data + sgd, "05_sgd");
    CHECK(half.exit_code == 2);
    CHECK(half.output.find("AdamW") != std::string::npos);
}

TEST_CASE("lessons: 07 sweeps the batch, proves the largest batch fits, and refuses one that does not", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const std::string small = " --limit 256 --test-limit 64 --hidden 64 --samples 256 --batches 16,64,128,512 --quiet";
    const Run sweep = run(scratch, "lessons/lesson07_batch_size", data + small, "07", "CUDA_CPU_MEMORY=64M");
    INFO(sweep.output);
    REQUIRE(sweep.exit_code == 0);
    const json& points = sweep.report["results"]["batch_sweep"];
    REQUIRE(points.size() == 3);  // 512 is more than the 256 training images: skipped
    uint64_t previous_activations = 0;
    for (const json& p : points) {
        INFO("batch " << p["batch"]);
        CHECK(p["samples_per_second"].get<double>() > 0);
        CHECK(p["test_accuracy"].get<double>() >= 0);
        const uint64_t activations = p["activation_peak_bytes"];
        CHECK(activations > previous_activations);  // linear in the batch
        previous_activations = activations;
    }
    CHECK(points[0]["steps"] == 16);  // 256 samples in batches of 16
    CHECK(points[2]["steps"] == 2);
    // The reported accuracy is the --batch run's (128 by default, the sweep's last point here), never a left-over 0.
    const double final_accuracy = sweep.report["results"]["final_test_accuracy"];
    CHECK(final_accuracy == points[2]["test_accuracy"].get<double>());
    CHECK(final_accuracy > 0.0);
    // It trains by --samples: the banner shows no epoch count (the shared --epochs is accepted and not used).
    CHECK(sweep.output.find(" epochs, seed") == std::string::npos);
    const int64_t largest = sweep.report["results"]["largest_batch_that_fits"];
    CHECK(largest > 512);
    CHECK(sweep.report["results"]["largest_batch_peak_device_bytes"].get<int64_t>() > 0);
#if defined(CUDA_TEACH_CPU)
    // Asking for more than fits: one message naming the category that overflows and the largest batch, exit 2.
    const Run oom =
        run(scratch, "lessons/lesson07_batch_size",
            data + " --limit 3000 --test-limit 64 --batch 2048 --batches 16 --quiet", "07_oom", "CUDA_CPU_MEMORY=40M");
    INFO(oom.output);
    CHECK(oom.exit_code == 2);
    CHECK(oom.output.find("is what overflows") != std::string::npos);
    CHECK(oom.output.find("The largest batch that fits is --batch ") != std::string::npos);
    CHECK(!fs::exists(scratch.file("07_oom.json")));
#endif
}

TEST_CASE("lessons: lesson 01's first 20 steps follow the float64 reference trainer", "[lessons][reference]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    // The default model (784-1024-1024-10, AdamW, cosine schedule) on 2560 images: 20 steps of 128.
    const std::string flags = " --data '" + data_dir(scratch) + "' --limit 2560 --test-limit 100 --epochs 1 --quiet";
    const Run lesson = run(scratch, "lessons/lesson01_naive_fp32", flags, "01");
    const Run reference = run(scratch, "tools/reference",
                              flags + " --hidden 1024,1024 --optimizer adamw --lr-schedule cosine", "reference");
    INFO(lesson.output);
    INFO(reference.output);
    REQUIRE(lesson.exit_code == 0);
    REQUIRE(reference.exit_code == 0);
    const std::vector<double> got = lesson.report["results"]["step_losses"];
    const std::vector<double> want = reference.report["results"]["step_losses"];
    REQUIRE(got.size() == 20);
    REQUIRE(want.size() == 20);
    // The lesson computes in float32 from the same float32 inputs and initial weights as the float64 reference.
    // A dot product of K = 784 or 1024 float32 terms summed in order has a relative error of about √K · 2⁻²⁴ ≈ 2e-6
    // (K · 2⁻²⁴ ≈ 6e-5 at worst), and AdamW's updates of lr · m̂/√v̂ barely depend on the gradients' last bits, so
    // the losses stay close: measured at most 6.4e-7 relative over these 20 steps on real MNIST (CPU backend,
    // 2026-12-01). 2e-5 leaves room for a GPU's fused multiply-adds and fails at once for a wrong kernel,
    // schedule or batch order (those change the loss by 1e-2 or more).
    for (size_t i = 0; i < got.size(); ++i) {
        INFO("step " << i + 1 << ": lesson " << got[i] << ", reference " << want[i]);
        CHECK(std::fabs(got[i] - want[i]) <= 2e-5 * std::fabs(want[i]));
    }
}

TEST_CASE("lessons: bad input gets one message and a non-zero exit, nothing half-written", "[lessons][errors]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    const std::string lesson = "lessons/lesson02_device_normalize";

    const Run bad_flag = run(scratch, lesson, data + " --batch 0", "bad_flag");
    CHECK(bad_flag.exit_code == 2);
    CHECK(bad_flag.output.find("--batch") != std::string::npos);
    const Run unknown = run(scratch, lesson, data + " --bogus", "unknown");
    CHECK(unknown.exit_code == 2);
    const Run no_data = run(scratch, lesson, " --data '" + scratch.file("nowhere") + "'", "no_data");
    CHECK(no_data.exit_code == 1);
    CHECK(no_data.output.find("nowhere") != std::string::npos);
    const Run too_big = run(scratch, lesson, data + " --limit 300 --batch 301", "too_big");
    CHECK(too_big.exit_code == 2);
    CHECK(too_big.output.find("larger than the training set") != std::string::npos);
    for (const char* tag : {"bad_flag", "unknown", "no_data", "too_big"}) {
        INFO(tag);
        CHECK(!fs::exists(scratch.file(std::string(tag) + ".json")));  // no report from a run that failed
    }
#if defined(CUDA_TEACH_CPU)
    // The out-of-memory path, against the CPU backend's emulated capacity (a GPU has its own; the prediction and the
    // message are unit-tested in test_memory_ledger.cpp): refused before allocating, naming what overflows.
    const Run oom = run(scratch, lesson, data + " --limit 3000 --batch 2048 --quiet", "oom", "CUDA_CPU_MEMORY=48M");
    INFO(oom.output);
    CHECK(oom.exit_code == 2);
    CHECK(oom.output.find("activations is what overflows") != std::string::npos);
    CHECK(oom.output.find("The largest batch that fits is --batch ") != std::string::npos);
    CHECK(!fs::exists(scratch.file("oom.json")));
#endif
}

TEST_CASE("lessons: help and the CPU backend's subset are said plainly", "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const Run help = run(scratch, "lessons/lesson03_pinned_async", "--help", "help");
    CHECK(help.exit_code == 0);
    CHECK(help.output.find("--resident") != std::string::npos);
    CHECK(help.output.find("--full") != std::string::npos);
#if defined(CUDA_TEACH_CPU)
    const Run subset = run(scratch, "lessons/lesson01_naive_fp32",
                           " --data '" + data_dir(scratch) + "' --epochs 1 --hidden 16 --quiet", "subset");
    INFO(subset.output);
    REQUIRE(subset.exit_code == 0);
    CHECK(subset.output.find("CPU backend: a subset") != std::string::npos);
    CHECK(subset.output.find("--full") != std::string::npos);
    CHECK(subset.report["config"]["limit"] == kCpuTrainImages);  // lessons/lesson.h
    CHECK(subset.output.find("CPU timings") != std::string::npos);
#endif
}

TEST_CASE("lessons: 06 compares none with sqrt, activations as predicted, and trains bitwise the same weights",
          "[lessons]") {
    REQUIRE_DEVICE();
    Scratch scratch;
    const std::string data = " --data '" + data_dir(scratch) + "'";
    // 16 hidden layers of 64 (the default depth, narrow), 64 images in batches of 32, one epoch: seconds on the CPU.
    std::string hidden = " --hidden 64";
    for (int l = 1; l < 16; ++l) hidden += ",64";
    const std::string small = " --limit 64 --test-limit 64 --batch 32 --epochs 1 --quiet" + hidden;
    const std::string lesson = "lessons/lesson06_activation_checkpointing";
    const Run compared = run(scratch, lesson, data + small + " --compare", "06");
    INFO(compared.output);
    REQUIRE(compared.exit_code == 0);
    check_report_keys(compared.report);
    const json& results = compared.report["results"];
    const json& runs = results["checkpoint_runs"];
    REQUIRE(runs.size() == 2);
    CHECK(runs[0]["policy"] == "none");
    CHECK(runs[1]["policy"] == "sqrt");
    for (const json& r : runs) {
        INFO(r["policy"]);
        for (const char* key : {"policy", "activation_peak_bytes", "predicted_activation_bytes", "peak_device_bytes",
                                "extra_forward_flops_fraction", "seconds_per_epoch", "largest_batch_that_fits"}) {
            INFO(key);
            CHECK(r.contains(key));
        }
        CHECK(r["activation_peak_bytes"] == r["predicted_activation_bytes"]);  // the ledger against the plan
        CHECK(r["seconds_per_epoch"].get<double>() > 0);
    }
    CHECK(runs[1]["activation_peak_bytes"].get<int64_t>() < runs[0]["activation_peak_bytes"].get<int64_t>());
    CHECK(runs[1]["largest_batch_that_fits"].get<int64_t>() > runs[0]["largest_batch_that_fits"].get<int64_t>());
    CHECK(runs[0]["extra_forward_flops_fraction"].get<double>() == 0.0);
    CHECK(runs[1]["extra_forward_flops_fraction"].get<double>() > 0.0);
    // The recomputation runs the same kernels on the same inputs: the same losses and weights, bit for bit.
    CHECK(results["step_losses_equal"] == true);
    CHECK(results["weights_bitwise_equal"] == true);
    CHECK(results["step_losses"] == results["step_losses_none"]);
    CHECK(results["step_losses"].size() == 2);
    // The report's memory table is the policy's run.
    CHECK(compared.report["memory"]["device"]["activations"]["peak_bytes"] == runs[1]["activation_peak_bytes"]);

    // --precision fp32 --checkpoint none is lesson 04's training (same kernels, data path and AdamW): the same
    // weights; every=2 recomputes and still lands on them.
    const Run fp32 = run(scratch, lesson, data + small + " --precision fp32 --checkpoint none", "06_fp32");
    const Run every2 =
        run(scratch, lesson, data + small + " --precision fp32 --checkpoint every=2 --no-compare", "06_every2");
    const Run fast = run(scratch, "lessons/lesson04_fast_kernels", data + small, "04");
    INFO(fp32.output);
    REQUIRE(fp32.exit_code == 0);
    REQUIRE(every2.exit_code == 0);
    REQUIRE(fast.exit_code == 0);
    CHECK(fp32.report["results"]["checkpoint_runs"].size() == 1);
    CHECK(every2.report["results"]["checkpoint_runs"].size() == 1);
    CHECK(fp32.report["results"]["weights_checksum"] == fast.report["results"]["weights_checksum"]);
    CHECK(every2.report["results"]["weights_checksum"] == fast.report["results"]["weights_checksum"]);

#if defined(CUDA_TEACH_CPU)
    // What checkpointing is for: a batch whose activations do not fit the (emulated) device with none fits with sqrt.
    // With 16 × 64 at batch 2048 and 12 MiB: none needs about 16 MiB, sqrt about 10.
    const std::string big = " --limit 2048 --batch 2048 --test-limit 64 --epochs 1 --no-compare --quiet" + hidden;
    const Run fits = run(scratch, lesson, data + big + " --checkpoint sqrt", "06_fits", "CUDA_CPU_MEMORY=12M");
    const Run too_big = run(scratch, lesson, data + big + " --checkpoint none", "06_too_big", "CUDA_CPU_MEMORY=12M");
    INFO(fits.output);
    INFO(too_big.output);
    CHECK(fits.exit_code == 0);
    CHECK(too_big.exit_code == 2);
    CHECK(too_big.output.find("The largest batch that fits with this policy is --batch ") != std::string::npos);
    CHECK(!fs::exists(scratch.file("06_too_big.json")));
#endif
    for (const char* bad : {" --checkpoint every=0", " --checkpoint half", " --compare --no-compare"}) {
        const Run refused = run(scratch, lesson, data + small + bad, "06_bad");
        INFO(bad << ": " << refused.output);
        CHECK(refused.exit_code == 2);
        CHECK(!fs::exists(scratch.file("06_bad.json")));
    }
}

TEST_CASE("lessons: the staircase's FLOP count is the GEMM work a training step does, by hand", "[lessons]") {
    // 784-16-10 at 3 rows. Forward: 2·3·784·16 + 2·3·16·10 = 75264 + 960. Backward: dW in both layers (the same
    // 76224), dX only for the second layer (2·3·16·10 = 960): the first layer's input is the images.
    const StepGemmFlops small = training_step_gemm_flops({784, 16, 10}, 3);
    CHECK(small.forward == 76224.0);
    CHECK(small.backward == 77184.0);
    // The lessons' model at batch 128: 3× the forward (dW and dX everywhere) would overcount by about 17 %.
    const StepGemmFlops lessons = training_step_gemm_flops({784, 1024, 1024, 10}, 128);
    CHECK(lessons.forward == 476577792.0);
    CHECK(lessons.backward == 747634688.0);
    CHECK(std::abs(3 * lessons.forward / (lessons.forward + lessons.backward) - 1.168) < 1e-3);
}
