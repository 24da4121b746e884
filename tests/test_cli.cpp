// tests/test_cli.cpp — the shared command line: good values, every kind of bad value (exit code 2), --help,
// flags a lesson adds, the learning-rate schedule, and the batch-versus-dataset check.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include "tests/test_support.h"

#include "common/cli.h"

namespace {

CliResult parse(Cli& cli, std::vector<std::string> args) {
    args.insert(args.begin(), "lesson");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return cli.parse(static_cast<int>(argv.size()), argv.data());
}

CliResult parse_fresh(std::vector<std::string> args, TrainOptions* out = nullptr) {
    TrainOptions options;
    Cli cli("lesson", "test", options);
    const CliResult result = parse(cli, std::move(args));
    if (out) *out = options;
    return result;
}

}  // namespace

TEST_CASE("cli: defaults, every shared flag, and --flag=value", "[cli]") {
    TrainOptions o;
    REQUIRE(parse_fresh({}, &o).kind == CliResult::Kind::ok);
    CHECK(o.epochs == 3);
    CHECK(o.batch == 128);
    CHECK(o.layer_sizes() == std::vector<int>{784, 256, 10});
    CHECK(o.optimizer == OptimizerKind::sgd);
    CHECK(o.lr == 0.05);
    CHECK(o.lr_schedule == LrSchedule::constant);
    CHECK(o.limit == 0);
    CHECK(o.test_limit == 0);

    const CliResult r = parse_fresh({"--epochs",
                                     "5",
                                     "--batch=32",
                                     "--hidden",
                                     "1024,1024",
                                     "--lr",
                                     "0.1",
                                     "--momentum",
                                     "0.5",
                                     "--weight-decay",
                                     "1e-4",
                                     "--seed",
                                     "18446744073709551615",
                                     "--data",
                                     "/some/dir",
                                     "--limit",
                                     "1000",
                                     "--test-limit=500",
                                     "--lr-schedule",
                                     "cosine",
                                     "--json",
                                     "out.json",
                                     "--quiet"},
                                    &o);
    INFO(r.message);
    REQUIRE(r.kind == CliResult::Kind::ok);
    CHECK(r.exit_code == 0);
    CHECK(o.epochs == 5);
    CHECK(o.batch == 32);
    CHECK(o.hidden == std::vector<int>{1024, 1024});
    CHECK(o.layer_sizes() == std::vector<int>{784, 1024, 1024, 10});
    CHECK(o.lr == 0.1);
    CHECK(o.momentum == 0.5);
    CHECK(o.weight_decay == 1e-4);
    CHECK(o.seed == 18446744073709551615ull);
    CHECK(o.data_dir == "/some/dir");
    CHECK(o.limit == 1000);
    CHECK(o.test_limit == 500);
    CHECK(o.lr_schedule == LrSchedule::cosine);
    CHECK(std::string(lr_schedule_name(o.lr_schedule)) == "cosine");
    CHECK(o.json_path == "out.json");
    CHECK(o.quiet);
}

TEST_CASE("cli: adamw gets its own learning rate and weight decay unless given", "[cli]") {
    TrainOptions o;
    REQUIRE(parse_fresh({"--optimizer", "adamw"}, &o).kind == CliResult::Kind::ok);
    CHECK(o.optimizer == OptimizerKind::adamw);
    CHECK(o.lr == o.adamw_lr);
    CHECK(o.weight_decay == o.adamw_weight_decay);
    REQUIRE(parse_fresh({"--lr", "0.003", "--optimizer=adamw", "--weight-decay", "0"}, &o).kind == CliResult::Kind::ok);
    CHECK(o.lr == 0.003);
    CHECK(o.weight_decay == 0.0);
    CHECK(std::string(optimizer_name(o.optimizer)) == "adamw");
}

TEST_CASE("cli: every bad value or flag is one message and exit code 2", "[cli]") {
    const std::vector<std::vector<std::string>> bad = {
        {"--epochs", "0"},
        {"--epochs", "-1"},
        {"--epochs", "abc"},
        {"--epochs", "12x"},
        {"--epochs", "3.5"},
        {"--epochs", "99999999999999999999"},
        {"--epochs", ""},
        {"--epochs", " 3"},
        {"--epochs", "+3"},
        {"--epochs", "0x10"},  // CLI11's own conversion (strtoll, base 0) would read these as numbers
        {"--epochs", "1e3"},
        {"--epochs"},
        {"--epochs", "--batch", "3"},
        {"--batch", "0"},
        {"--batch", "-64"},
        {"--batch=2147483648"},
        {"--lr", "0"},
        {"--lr", "-0.1"},
        {"--lr", "nan"},
        {"--lr", "inf"},
        {"--lr", "1e999"},
        {"--lr", "0.1x"},
        {"--momentum", "1"},
        {"--momentum", "-0.1"},
        {"--weight-decay", "-1"},
        {"--hidden", "0"},
        {"--hidden", "1024,"},
        {"--hidden", ",5"},
        {"--hidden", "5,-1"},
        {"--hidden", "5;6"},
        {"--hidden="},
        {"--hidden", "1,,2"},
        {"--hidden", "1, 2"},
        {"--optimizer", "adam"},
        {"--optimizer", "SGD"},
        {"--seed", "-1"},
        {"--seed", "18446744073709551616"},
        {"--seed", "7up"},
        {"--seed", "0x10"},
        {"--limit", "0"},
        {"--limit", "-5"},
        {"--test-limit", "-1"},
        {"--test-limit", "all"},
        {"--lr-schedule", "linear"},
        {"--lr-schedule", "Cosine"},
        {"--lr-schedule"},
        {"--data", "--epochs", "3"},
        {"--data="},
        {"--data", ""},
        {"--json"},
        {"--json", "/nonexistent-dir/out.json"},  // found while parsing, not after training
        {"--json", "/"},                          // a directory
        {"--quiet=yes"},
        {"--quiet=no"},
        {"--frob=3"},
        {"--unknown"},
        {"--Epochs", "3"},
        {"-e", "3"},
        {"positional"},
    };
    for (const auto& args : bad) {
        std::string joined;
        for (const auto& a : args) joined += a + " ";
        const CliResult r = parse_fresh(args);
        INFO("args: " << joined << "→ " << r.message);
        CHECK(r.kind == CliResult::Kind::error);
        CHECK(r.exit_code == 2);
        CHECK_FALSE(r.message.empty());
        CHECK(r.message.find('\n') == std::string::npos);  // one line
    }
}

TEST_CASE("cli: --json FILE is checked while parsing and the check leaves no file behind", "[cli]") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("cli_test_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string path = (dir / "run.json").string();
    TrainOptions o;
    const CliResult ok = parse_fresh({"--json", path}, &o);
    CHECK(ok.kind == CliResult::Kind::ok);
    CHECK(o.json_path == path);
    CHECK(fs::is_empty(dir));  // neither run.json nor run.json.tmp was left by the check

    const CliResult missing = parse_fresh({"--json", (dir / "no" / "run.json").string()});
    INFO(missing.message);
    CHECK(missing.exit_code == 2);
    CHECK(missing.message.find("--json: cannot write") == 0);
    CHECK(missing.message.find("does not exist") != std::string::npos);

    {  // a .tmp already there (from a crashed run) is not removed by the check, and does not make it fail
        std::ofstream(path + ".tmp") << "old";
    }
    CHECK(check_output_file(path).empty());
    CHECK(fs::exists(path + ".tmp"));
    fs::remove_all(dir);
}

TEST_CASE("cli: messages name the flag and the problem", "[cli]") {
    CHECK(parse_fresh({"--epochs", "12x"}).message == "--epochs: '12x' is not a whole number");
    CHECK(parse_fresh({"--batch", "0"}).message == "--batch: '0' is out of range: expected 1..16777216");
    CHECK(parse_fresh({"--limit", "0"}).message == "--limit: '0' is out of range: expected at least 1");
    CHECK(parse_fresh({"--lr", "0"}).message == "--lr: '0' is out of range: expected more than 0 and at most 1e+06");
    CHECK(parse_fresh({"--lr", "nan"}).message == "--lr: 'nan' is not a finite number");
    CHECK(parse_fresh({"--seed", "-1"}).message == "--seed: '-1' is not a non-negative whole number");
    CHECK(parse_fresh({"--hidden", "5,-1"}).message ==
          "--hidden: in list '5,-1': '-1' is out of range: expected 1..65536");
    CHECK(parse_fresh({"--hidden", "1024,"}).message == "--hidden: in list '1024,': an empty item");
    CHECK(parse_fresh({"--frobnicate"}).message == "unknown flag '--frobnicate'");
    CHECK(parse_fresh({"--frobnicate=3"}).message == "unknown flag '--frobnicate'");
    CHECK(parse_fresh({"positional"}).message == "unexpected argument 'positional' (flags start with --)");
    CHECK(parse_fresh({"--epochs"}).message.find("--epochs: ") == 0);  // CLI11's words for a missing value
    CHECK(parse_fresh({"--data", "--epochs", "3"}).message == "--data: expected DIR, got the flag '--epochs'");
    CHECK(parse_fresh({"--quiet=yes"}).message == "--quiet: takes no value (got 'yes')");
    CHECK(parse_fresh({"--optimizer", "adam"}).message == "--optimizer: 'adam' is not one of: sgd, adamw");
    // The first bad flag on the line is the one reported.
    CHECK(parse_fresh({"--epochs", "0", "--batch", "0"}).message.find("--epochs: ") == 0);
}

TEST_CASE("cli: numbers are read as plain decimal, and a repeated flag's last value counts", "[cli]") {
    TrainOptions o;
    REQUIRE(parse_fresh({"--lr", "1e-3", "--momentum", ".5", "--epochs", "010", "--seed", "0"}, &o).kind ==
            CliResult::Kind::ok);
    CHECK(o.lr == 1e-3);
    CHECK(o.momentum == 0.5);
    CHECK(o.epochs == 10);  // decimal, not octal 8 (what strtoll with base 0 would make of it)
    CHECK(o.seed == 0);
    REQUIRE(parse_fresh({"--epochs", "2", "--epochs=4", "--hidden", "8,8", "--hidden", "16"}, &o).kind ==
            CliResult::Kind::ok);
    CHECK(o.epochs == 4);
    CHECK(o.hidden == std::vector<int>{16});
    REQUIRE(parse_fresh({"--batch", "2147483647"}, &o).kind == CliResult::Kind::error);  // past --batch's own limit
    REQUIRE(parse_fresh({"--test-limit", "0"}, &o).kind == CliResult::Kind::ok);
    CHECK(o.test_limit == 0);
}

TEST_CASE("cli: --help returns the usage with exit code 0, including a lesson's own flags", "[cli]") {
    TrainOptions options;
    std::vector<int> batches = {64, 256};
    int depth = 2;
    Cli cli("lesson07_batches", "Sweeps the batch size.", options);
    cli.add_int_list("--batches", &batches, "LIST", "batch sizes to compare");
    cli.add_int("--depth", &depth, "N", "hidden layers", 1, 16);
    const CliResult help = parse(cli, {"--epochs", "2", "--help"});
    REQUIRE(help.kind == CliResult::Kind::help);
    CHECK(help.exit_code == 0);
    for (const char* flag : {"--epochs N",
                             "--batch N",
                             "--hidden LIST",
                             "--lr X",
                             "--optimizer sgd|adamw",
                             "--seed N",
                             "--data DIR",
                             "--limit N",
                             "--test-limit N",
                             "--lr-schedule constant|cosine",
                             "--json FILE",
                             "--quiet",
                             "--batches LIST",
                             "--depth N",
                             "--help",
                             "usage: lesson07_batches",
                             "Sweeps the batch size.",
                             "(default 64,256)",
                             "passes over the training set (default 3)",
                             "(default 0.05; adamw: 0.001)",
                             "(default constant)",
                             "cosine decay from --lr to 0 over the whole run",
                             "first N test images; 0 = all"}) {
        INFO(help.message);
        CHECK(help.message.find(flag) != std::string::npos);
    }
    CHECK(help.message.find("train on only the first N training images") != std::string::npos);
    CHECK(cli.usage() == help.message);
    // --help wins wherever it is, even after or before a bad value.
    CHECK(parse(cli, {"--help", "--epochs", "0"}).kind == CliResult::Kind::help);
    CHECK(parse(cli, {"--epochs", "7", "-h"}).kind == CliResult::Kind::help);

    const CliResult ok = parse(cli, {"--batches", "32,128,512", "--depth=4"});
    REQUIRE(ok.kind == CliResult::Kind::ok);
    CHECK(batches == std::vector<int>{32, 128, 512});
    CHECK(depth == 4);
    CHECK(cli.given("--depth"));
    CHECK_FALSE(cli.given("--epochs"));
    CHECK(parse(cli, {"--depth", "17"}).exit_code == 2);
    CHECK(parse(cli, {"--batches", "32,x"}).exit_code == 2);
}

TEST_CASE("cli: a lesson's flags: doubles, strings, choices, flags, changed defaults, redefined shared flags",
          "[cli]") {
    TrainOptions options;
    options.epochs = 5;  // a lesson may change a default before parsing; --help shows it
    double scale = 1.0;
    std::string out_dir = "runs";
    std::string gemm = "v1";
    bool resident = false;
    Cli cli("lesson05_gemm", "Compares GEMM versions.", options);
    cli.add_double("--scale", &scale, "X", "a factor", 0.0, 10.0, false);
    cli.add_string("--out", &out_dir, "DIR", "where to write");
    cli.add_choice("--gemm", &gemm, {"v1", "v2", "v3"}, "which GEMM kernel");
    cli.add_flag("--resident", &resident, "keep the data set on the device");
    // Replaces the shared --batch (a lesson whose kernel has a limit).
    cli.add_int("--batch", &options.batch, "N", "images per step, at most 4096 here", 1, 4096);
    const std::string usage = cli.usage();
    INFO(usage);
    for (const char* text : {"--scale X", "a factor (default 1)", "--out DIR", "(default runs)", "--gemm v1|v2|v3",
                             "which GEMM kernel (default v1)", "--resident", "passes over the training set (default 5)",
                             "at most 4096 here"}) {
        CHECK(usage.find(text) != std::string::npos);
    }
    CHECK(usage.find("the last batch of an epoch") == std::string::npos);  // the shared --batch is gone

    REQUIRE(parse(cli, {"--scale=2.5", "--out", "/tmp/x", "--gemm", "v3", "--resident", "--batch", "4096"}).kind ==
            CliResult::Kind::ok);
    CHECK(scale == 2.5);
    CHECK(out_dir == "/tmp/x");
    CHECK(gemm == "v3");
    CHECK(resident);
    CHECK(options.batch == 4096);
    CHECK(options.epochs == 5);
    CHECK(cli.given("--gemm"));
    CHECK(cli.given("--resident"));
    CHECK_FALSE(cli.given("--epochs"));
    CHECK_FALSE(cli.given("--no-such-flag"));

    const CliResult bad_choice = parse(cli, {"--gemm", "v4"});
    CHECK(bad_choice.exit_code == 2);
    CHECK(bad_choice.message == "--gemm: 'v4' is not one of: v1, v2, v3");
    CHECK(parse(cli, {"--scale", "0"}).exit_code == 2);  // min excluded
    CHECK(parse(cli, {"--scale", "10"}).kind == CliResult::Kind::ok);
    CHECK(parse(cli, {"--batch", "4097"}).exit_code == 2);
    CHECK(parse(cli, {"--resident=false"}).exit_code == 2);
}

TEST_CASE("cli: scheduled_lr: constant, or cosine from lr at step 0 down towards 0", "[cli]") {
    TrainOptions o;
    o.lr = 0.1;
    CHECK(scheduled_lr(o, 0, 100) == 0.1);
    CHECK(scheduled_lr(o, 99, 100) == 0.1);
    o.lr_schedule = LrSchedule::cosine;
    CHECK(scheduled_lr(o, 0, 100) == 0.1);  // the first step gets the full rate
    CHECK(test_support::close_enough(scheduled_lr(o, 50, 100), 0.05, 0, 1e-12));
    CHECK(test_support::close_enough(scheduled_lr(o, 25, 100), 0.1 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 0,
                                     1e-12));
    const double last = scheduled_lr(o, 99, 100);
    CHECK(last > 0.0);
    CHECK(last < 1e-4);
    double previous = 1.0;
    for (long step = 0; step < 100; ++step) {  // decreasing all the way
        const double lr = scheduled_lr(o, step, 100);
        CHECK(lr < previous);
        previous = lr;
    }
    CHECK(scheduled_lr(o, 0, 0) == 0.1);  // no steps: nothing to schedule
    CHECK(scheduled_lr(LrSchedule::cosine, 0.1, 50, 100) == scheduled_lr(o, 50, 100));
    CHECK(scheduled_lr(LrSchedule::constant, 0.1, 50, 100) == 0.1);
}

TEST_CASE("cli: a batch larger than the training set is refused after loading", "[cli]") {
    CHECK(check_batch_fits(128, 60000).empty());
    CHECK(check_batch_fits(60000, 60000).empty());
    const std::string message = check_batch_fits(128, 100);
    CHECK(message.find("--batch 128 is larger than the training set (100 images)") != std::string::npos);
    CHECK_FALSE(check_batch_fits(0, 10).empty());
}
