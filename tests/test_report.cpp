// tests/test_report.cpp — text tables, byte formatting, the epoch line, the notes under the timing and memory
// tables, and the --json document (parsed back with nlohmann/json).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

#include "common/report.h"

TEST_CASE("report: format_bytes uses binary units with three significant digits", "[report]") {
    CHECK(format_bytes(0) == "0 B");
    CHECK(format_bytes(1023) == "1023 B");
    CHECK(format_bytes(1024) == "1.00 KiB");
    CHECK(format_bytes(1536) == "1.50 KiB");
    CHECK(format_bytes(814120) == "795 KiB");
    CHECK(format_bytes(uint64_t{47040000}) == "44.9 MiB");
    CHECK(format_bytes(uint64_t{1} << 30) == "1.00 GiB");
    CHECK(format_bytes(uint64_t{1} << 44) == "16.0 TiB");
}

TEST_CASE("report: text tables align columns, counting µ as one column", "[report]") {
    TextTable table({"name", "avg µs"}, "lr");
    table.add_row({"a", "1.5"});
    table.add_row({"longer", "12345.0"});
    table.add_rule();
    table.add_row({"total", "µ"});
    const std::string text = table.render("");
    CHECK(text ==
          "name      avg µs\n"
          "----------------\n"
          "a            1.5\n"
          "longer   12345.0\n"
          "----------------\n"
          "total          µ\n");
    CHECK(display_width("avg µs") == 6);
}

TEST_CASE("report: one summary line per epoch and the config line", "[report]") {
    EpochMetrics m;
    m.epoch = 2;
    m.epochs = 3;
    m.train_loss = 0.08234;
    m.train_accuracy = 0.97456;
    m.test_accuracy = 0.9719;
    m.samples_per_second = 5558.4;
    m.seconds = 10.8;
    CHECK(epoch_line(m) == "epoch 2/3  loss 0.0823  train 97.46%  test 97.19%  5558 samples/s  10.80 s");
    TrainOptions o;
    CHECK(format_config(o) == "784-256-10, batch 128, sgd (lr 0.05, momentum 0.9), 3 epochs, seed 1");
    o.optimizer = OptimizerKind::adamw;
    o.lr = 1e-3;
    o.weight_decay = 0.01;
    o.hidden = {1024, 1024};
    o.limit = 500;
    CHECK(format_config(o) ==
          "784-1024-1024-10, batch 128, adamw (lr 0.001, betas 0.9/0.999, weight decay 0.01), "
          "3 epochs, seed 1, first 500 training images only");
    o.lr_schedule = LrSchedule::cosine;
    o.test_limit = 1000;
    CHECK(format_config(o) ==
          "784-1024-1024-10, batch 128, adamw (lr 0.001 with cosine decay to 0, betas 0.9/0.999, weight decay 0.01), "
          "3 epochs, seed 1, first 500 training images only, first 1000 test images only");
}

TEST_CASE("report: under the timing table, what wall covers, the time in no phase or the overlap, and a legend",
          "[report][timer]") {
    EpochTiming t;
    t.clock = "GPU time from CUDA events";
    t.phases[int(Phase::h2d)] = {2.0, 4, 8'000'000};
    t.phases[int(Phase::host)] = {1.0, 4, 0};
    t.wall_ms = 10.0;
    const std::string table = timing_table(t, "all epochs");
    INFO(table);
    CHECK(table.find("wall 10.00 ms: the host clock around training only (data loading and test-set evaluation are "
                     "not in it)") != std::string::npos);
    CHECK(table.find("7.00 ms in no phase") != std::string::npos);
    CHECK(table.find("may overlap") == std::string::npos);
    CHECK(table.find("host = the CPU's own work inside the training loop") != std::string::npos);
    CHECK(table.find("CUDA events") != std::string::npos);

    t.clock = "CPU timings (host clock)";
    CHECK(timing_table(t, "all epochs").find("CUDA events") == std::string::npos);  // none to speak of

    t.wall_ms = 2.5;  // a copy on another stream overlapped the host work
    const std::string overlapped = timing_table(t, "all epochs");
    INFO(overlapped);
    CHECK(overlapped.find("in no phase") == std::string::npos);
    CHECK(overlapped.find("phases may overlap (e.g. a copy on another stream), so their sum can exceed wall") !=
          std::string::npos);
}

TEST_CASE("report: the memory table and bytes moved", "[report][memory]") {
    MemorySnapshot m;
    m.by_space[int(MemorySpace::device)][int(MemoryCategory::parameters)] = {1024, 2048};
    m.by_space[int(MemorySpace::device)][int(MemoryCategory::activations)] = {2048, 2048};
    m.total[int(MemorySpace::device)] = {3072, 4096};
    m.by_space[int(MemorySpace::host_pinned)][int(MemoryCategory::input_staging)] = {100, 100};
    m.total[int(MemorySpace::host_pinned)] = {100, 100};
    m.h2d_pinned_bytes = 3 << 20;
    m.h2d_pageable_bytes = 512;
    m.h2d_copies = 4;
    m.d2h_pageable_bytes = 40;
    m.d2h_copies = 1;
    const std::string table = memory_table(m);
    INFO(table);
    CHECK(table.find("device memory allocated by this program, by category") != std::string::npos);
    CHECK(table.find("host pinned memory allocated by this program, by category") != std::string::npos);
    CHECK(table.find("every allocation goes through common/memory_ledger.h") != std::string::npos);
    CHECK(table.find("ledger ") == std::string::npos);        // never the bare word, unexplained
    CHECK(table.find("host pageable") == std::string::npos);  // nothing there
    // Percentages are of the current total (they add up to 100); the category peaks (2 + 2 KiB) need not add up
    // to the total peak (4 KiB here, but in general less: categories peak at different times).
    CHECK(table.find("parameters    1.00 KiB           33.3   2.00 KiB") != std::string::npos);
    CHECK(table.find("activations   2.00 KiB           66.7   2.00 KiB") != std::string::npos);
    CHECK(table.find("total         3.00 KiB          100.0   4.00 KiB") != std::string::npos);
    CHECK(table.find("peak of the sum, not the sum of the peaks") != std::string::npos);
    CHECK(table.find("gradients") == std::string::npos);
    CHECK(table.find("cudaMemGetInfo") == std::string::npos);  // device never queried
    CHECK(transfer_summary(m) ==
          "bytes moved: host→device 3.00 MiB (pinned 3.00 MiB, pageable 512 B) in 4 copies; "
          "device→host 40 B (pinned 0 B, pageable 40 B) in 1 copy\n");
}

TEST_CASE("report: --json writes everything printed, and it parses back", "[report][json]") {
    RunReport report("lesson99_test");
    report.set_device("Test \"GPU\"\n(sm_90)");
    report.set_data("MNIST from /tmp/x");
    TrainOptions options;
    options.lr_schedule = LrSchedule::cosine;
    options.test_limit = 1000;
    report.add_options(options);
    report.add_config("note", std::string("tab\there"));
    EpochMetrics m;
    m.epoch = 1;
    m.epochs = 1;
    m.train_loss = 0.25;
    m.train_accuracy = 0.9;
    m.test_accuracy = std::nan("");  // not measured: becomes null
    EpochTiming t;
    t.clock = "GPU time from CUDA events";
    t.phases[int(Phase::h2d)] = {2.0, 4, 8'000'000};
    t.wall_ms = 3.0;
    report.add_epoch(m, t);
    MemorySnapshot memory;
    memory.by_space[int(MemorySpace::device)][int(MemoryCategory::parameters)] = {814120, 814120};
    memory.by_space[int(MemorySpace::host_pinned)][int(MemoryCategory::optimizer_state)] = {64, 128};
    memory.h2d_pinned_bytes = 8'000'000;
    memory.h2d_pageable_bytes = 1000;
    memory.d2h_pageable_bytes = 40;
    memory.h2d_copies = 5;
    memory.d2h_copies = 1;
    memory.device_queried = true;
    memory.device_total_before = 1 << 30;
    report.set_memory(memory);
    report.add_result("final_test_accuracy", 0.9778);
    report.add_result("steps", int64_t{469});
    report.add_result("converged", true);
    report.add_result("infinite", std::numeric_limits<double>::infinity());
    report.add_result("step_losses", std::vector<double>{2.3, 0.5, std::nan("")});
    report.results()["per_layer"] = {{"fc1", 12}, {"fc2", 3}};  // anything else, through nlohmann/json
    const std::string text = report.to_json();
    INFO(text);

    const nlohmann::json d = nlohmann::json::parse(text);
    CHECK(d["program"] == "lesson99_test");
    CHECK(d["backend"] == BACKEND_NAME);
    CHECK(d["device"] == "Test \"GPU\"\n(sm_90)");
    CHECK(d["data"] == "MNIST from /tmp/x");
    const nlohmann::json& config = d["config"];
    CHECK(config["layers"] == "784-256-10");
    CHECK(config["epochs"] == 3);
    CHECK(config["optimizer"] == "sgd");
    CHECK(config["lr"] == 0.05);
    CHECK(config["lr_schedule"] == "cosine");
    CHECK(config["momentum"] == 0.9);
    CHECK(config["seed"] == "1");  // a string: 64-bit seeds do not survive a double
    CHECK(config["limit"] == 0);
    CHECK(config["test_limit"] == 1000);
    CHECK(config["note"] == "tab\there");

    REQUIRE(d["epochs"].size() == 1);
    const nlohmann::json& epoch = d["epochs"][0];
    CHECK(epoch["epoch"] == 1);
    CHECK(epoch["train_loss"] == 0.25);
    CHECK(epoch["train_accuracy"] == 0.9);
    CHECK(epoch["test_accuracy"].is_null());
    for (const char* key : {"seconds", "samples_per_second"}) CHECK(epoch.contains(key));
    const nlohmann::json& timing = epoch["timing"];
    CHECK(timing["clock"] == "GPU time from CUDA events");
    CHECK(timing["wall_ms"] == 3.0);
    CHECK(timing["phases_ms"] == 2.0);
    const nlohmann::json& h2d = timing["phases"]["h2d"];
    CHECK(h2d["ms"] == 2.0);
    CHECK(h2d["calls"] == 4);
    CHECK(h2d["avg_us"] == 500.0);
    CHECK(h2d["bytes"] == 8'000'000);
    CHECK(h2d["gb_per_s"] == 4.0);
    CHECK_FALSE(timing["phases"].contains("forward"));  // never entered

    RunReport every_phase("phases");
    EpochTiming all;
    for (PhaseTotals& totals : all.phases) totals = {1.0, 1, 0};
    every_phase.add_epoch(m, all);
    const nlohmann::json phases = nlohmann::json::parse(every_phase.to_json())["epochs"][0]["timing"]["phases"];
    CHECK(phases.size() == size_t(kPhaseCount));
    for (const auto& [name, value] : phases.items()) CHECK(name.find(' ') == std::string::npos);  // snake_case keys

    const nlohmann::json& results = d["results"];
    CHECK(results["final_test_accuracy"] == 0.9778);
    CHECK(results["steps"] == 469);
    CHECK(results["converged"] == true);
    CHECK(results["infinite"].is_null());
    CHECK(results["step_losses"].size() == 3);
    CHECK(results["step_losses"][0] == 2.3);
    CHECK(results["step_losses"][2].is_null());
    CHECK(results["per_layer"]["fc2"] == 3);

    // Memory: snake_case spaces and categories, every one of them, with a total each.
    for (const char* space : {"device", "host_pinned", "host_pageable"}) {
        INFO(space);
        for (const char* category : {"parameters", "gradients", "optimizer_state", "master_weights", "activations",
                                     "input_staging", "workspace", "total"}) {
            INFO(category);
            CHECK(d["memory"][space][category].contains("current_bytes"));
            CHECK(d["memory"][space][category].contains("peak_bytes"));
        }
    }
    CHECK(d["memory"]["device"]["parameters"]["peak_bytes"] == 814120);
    CHECK(d["memory"]["host_pinned"]["optimizer_state"]["current_bytes"] == 64);
    CHECK(d["memory"]["host_pinned"]["optimizer_state"]["peak_bytes"] == 128);
    CHECK(d["memory"]["device_info"]["total_bytes"] == 1 << 30);
    const nlohmann::json& transfers = d["transfers"];
    CHECK(transfers["h2d_pinned_bytes"] == 8'000'000);
    CHECK(transfers["h2d_pageable_bytes"] == 1000);
    CHECK(transfers["d2h_pinned_bytes"] == 0);
    CHECK(transfers["d2h_pageable_bytes"] == 40);
    CHECK(transfers["h2d_copies"] == 5);
    CHECK(transfers["d2h_copies"] == 1);
    CHECK_FALSE(d.contains("bytes_moved"));

    // The file reads in the order things were added (program first), not alphabetically.
    CHECK(text.find("\"program\"") < text.find("\"backend\""));
    CHECK(text.find("\"train_loss\"") < text.find("\"seconds\""));

    const std::string path =
        (std::filesystem::temp_directory_path() / ("report_test_" + std::to_string(getpid()) + ".json")).string();
    report.write_json(path);
    std::ifstream in(path);
    const std::string written((std::istreambuf_iterator<char>(in)), {});
    CHECK(written == text);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    std::filesystem::remove(path);

    std::string message;
    try {
        report.write_json("/nonexistent-dir/out.json");
    } catch (const std::runtime_error& error) {
        message = error.what();
    }
    CHECK(message.find("cannot write /nonexistent-dir/out.json") != std::string::npos);
}

TEST_CASE("report: a run without memory or epochs is still a whole document, and bad UTF-8 does not throw",
          "[report][json]") {
    RunReport report("bare");
    report.set_data(std::string("MNIST from /tmp/caf\xe9"));  // a Latin-1 path: not UTF-8
    report.add_result("note", "µs → GB/s");                   // a const char* is a string, not a bool
    std::string text;
    REQUIRE_NOTHROW(text = report.to_json());
    INFO(text);
    const nlohmann::json d = nlohmann::json::parse(text);
    CHECK(d["epochs"].is_array());
    CHECK(d["epochs"].empty());
    CHECK(d["config"].is_object());
    CHECK(d["results"]["note"] == "µs → GB/s");
    CHECK(d["data"] == "MNIST from /tmp/caf\xef\xbf\xbd");  // U+FFFD in place of the bad byte
    CHECK_FALSE(d.contains("memory"));
    CHECK_FALSE(d.contains("transfers"));

    RunReport moved = std::move(report);
    CHECK(nlohmann::json::parse(moved.to_json())["program"] == "bare");
}
