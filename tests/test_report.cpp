// tests/test_report.cpp — text tables, byte formatting, the epoch line, JSON escaping and the --json document
// (parsed by python3's json module when python3 is installed).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <unistd.h>

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
    CHECK(table.find("device memory allocated through the ledger") != std::string::npos);
    CHECK(table.find("host pinned memory allocated through the ledger") != std::string::npos);
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

TEST_CASE("report: JSON strings are escaped, numbers exact, non-finite numbers null", "[report][json]") {
    CHECK(json_escape("plain") == "plain");
    CHECK(json_escape("a\"b\\c") == "a\\\"b\\\\c");
    CHECK(json_escape("line\nnext\ttab\r") == "line\\nnext\\ttab\\r");
    CHECK(json_escape(std::string("\x01\x1f", 2)) == "\\u0001\\u001f");
    CHECK(json_escape("µs → GB/s") == "µs → GB/s");  // UTF-8 is valid JSON as is

    JsonWriter json;
    json.begin_object();
    json.key("name").value("x\"y");
    json.key("pi").value(0.1);
    json.key("nan").value(std::nan(""));
    json.key("inf").value(std::numeric_limits<double>::infinity());
    json.key("big").value(uint64_t{18446744073709551615ull});
    json.key("neg").value(-3);
    json.key("ok").value(true);
    json.key("list").begin_array().value(1).value(2.5).end_array();
    json.key("empty").begin_object().end_object();
    json.key("none").begin_array().end_array();
    json.end_object();
    CHECK(json.str() ==
          "{\n"
          "  \"name\": \"x\\\"y\",\n"
          "  \"pi\": 0.1,\n"
          "  \"nan\": null,\n"
          "  \"inf\": null,\n"
          "  \"big\": 18446744073709551615,\n"
          "  \"neg\": -3,\n"
          "  \"ok\": true,\n"
          "  \"list\": [\n"
          "    1,\n"
          "    2.5\n"
          "  ],\n"
          "  \"empty\": {},\n"
          "  \"none\": []\n"
          "}\n");
}

TEST_CASE("report: --json writes everything printed, and it parses", "[report][json]") {
    RunReport report("lesson99_test");
    report.set_device("Test \"GPU\"\n(sm_90)");
    report.set_data("MNIST from /tmp/x");
    TrainOptions options;
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
    memory.h2d_pinned_bytes = 8'000'000;
    report.set_memory(memory);
    report.add_result("final_test_accuracy", 0.9778);
    const std::string text = report.to_json();
    INFO(text);
    CHECK(text.find("\"device\": \"Test \\\"GPU\\\"\\n(sm_90)\"") != std::string::npos);
    CHECK(text.find("\"test_accuracy\": null") != std::string::npos);
    CHECK(text.find("\"gb_per_s\": 4") != std::string::npos);
    CHECK(text.find("\"seed\": \"1\"") != std::string::npos);
    CHECK(text.find("\"current_bytes\": 814120") != std::string::npos);
    CHECK(text.find("\"pinned_bytes\": 8000000") != std::string::npos);
    CHECK(text.find("\"backend\": \"" + std::string(BACKEND_NAME) + "\"") != std::string::npos);

    const std::string path =
        (std::filesystem::temp_directory_path() / ("report_test_" + std::to_string(getpid()) + ".json")).string();
    report.write_json(path);
    std::ifstream in(path);
    const std::string written((std::istreambuf_iterator<char>(in)), {});
    CHECK(written == text);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    if (std::system("python3 -c 'import json' > /dev/null 2>&1") == 0) {
        const std::string check =
            "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
            "assert d[\"epochs\"][0][\"timing\"][\"phases\"][\"h2d\"][\"gb_per_s\"] == 4.0; "
            "assert d[\"device\"] == \"Test \\\"GPU\\\"\\n(sm_90)\"; "
            "assert d[\"config\"][\"note\"] == \"tab\\there\"; "
            "assert d[\"memory\"][\"device\"][\"parameters\"][\"peak_bytes\"] == 814120; "
            "assert d[\"results\"][\"final_test_accuracy\"] == 0.9778' '" +
            path + "'";
        CHECK(std::system(check.c_str()) == 0);
    } else {
        WARN("python3 not found: the JSON was checked as text only");
    }
    std::filesystem::remove(path);

    std::string message;
    try {
        report.write_json("/nonexistent-dir/out.json");
    } catch (const std::runtime_error& error) {
        message = error.what();
    }
    CHECK(message.find("cannot write /nonexistent-dir/out.json") != std::string::npos);
}
