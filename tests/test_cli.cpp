// tests/test_cli.cpp — the shared command line: good values, every kind of bad value (exit code 2), --help,
// flags a lesson adds, and the batch-versus-dataset check.
#include <unistd.h>

#include <filesystem>
#include <fstream>
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
        {"--epochs"},
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
        {"--optimizer", "adam"},
        {"--optimizer", "SGD"},
        {"--seed", "-1"},
        {"--seed", "18446744073709551616"},
        {"--seed", "7up"},
        {"--limit", "0"},
        {"--limit", "-5"},
        {"--data", "--epochs", "3"},
        {"--data="},
        {"--json"},
        {"--json", "/nonexistent-dir/out.json"},  // found while parsing, not after training
        {"--json", "/"},                          // a directory
        {"--quiet=yes"},
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
    CHECK(parse_fresh({"--epochs", "12x"}).message == "--epochs: '12x' is not a whole number (unexpected 'x')");
    CHECK(parse_fresh({"--batch", "0"}).message.find("--batch: '0' is out of range: expected 1..") == 0);
    CHECK(parse_fresh({"--frobnicate"}).message == "unknown flag '--frobnicate'");
    CHECK(parse_fresh({"--epochs"}).message == "--epochs needs a value (N)");
    CHECK(parse_fresh({"--optimizer", "adam"}).message.find("expected sgd or adamw") != std::string::npos);
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
    for (const char* flag : {"--epochs N", "--batch N", "--hidden LIST", "--lr X", "--optimizer NAME", "--seed N",
                             "--data DIR", "--limit N", "--json FILE", "--batches LIST", "--depth N", "--help",
                             "usage: lesson07_batches", "Sweeps the batch size.", "(default 64,256)"}) {
        INFO(help.message);
        CHECK(help.message.find(flag) != std::string::npos);
    }
    CHECK(cli.usage() == help.message);

    const CliResult ok = parse(cli, {"--batches", "32,128,512", "--depth=4"});
    REQUIRE(ok.kind == CliResult::Kind::ok);
    CHECK(batches == std::vector<int>{32, 128, 512});
    CHECK(depth == 4);
    CHECK(cli.given("--depth"));
    CHECK_FALSE(cli.given("--epochs"));
    CHECK(parse(cli, {"--depth", "17"}).exit_code == 2);
    CHECK(parse(cli, {"--batches", "32,x"}).exit_code == 2);
}

TEST_CASE("cli: the number parsers accept exactly what they should", "[cli]") {
    int i = -7;
    CHECK(parse_int_value("2147483647", 1, 2147483647, &i).empty());
    CHECK(i == 2147483647);
    CHECK_FALSE(parse_int_value("2147483648", 1, 2147483647, &i).empty());
    CHECK(i == 2147483647);  // untouched on failure
    CHECK_FALSE(parse_int_value("+5", 1, 10, &i).empty());
    CHECK_FALSE(parse_int_value("0x10", 1, 100, &i).empty());
    double d = 0;
    CHECK(parse_double_value("1e-3", 0, 1, false, &d).empty());
    CHECK(d == 1e-3);
    CHECK(parse_double_value(".5", 0, 1, false, &d).empty());
    CHECK(d == 0.5);
    CHECK_FALSE(parse_double_value("1e-3.", 0, 1, false, &d).empty());
    uint64_t u = 0;
    CHECK(parse_uint64_value("0", &u).empty());
    CHECK_FALSE(parse_uint64_value("", &u).empty());
    std::vector<int> list;
    CHECK(parse_int_list_value("7", 1, 10, &list).empty());
    CHECK(list == std::vector<int>{7});
    CHECK_FALSE(parse_int_list_value("1,,2", 1, 10, &list).empty());
}

TEST_CASE("cli: a batch larger than the training set is refused after loading", "[cli]") {
    CHECK(check_batch_fits(128, 60000).empty());
    CHECK(check_batch_fits(60000, 60000).empty());
    const std::string message = check_batch_fits(128, 100);
    CHECK(message.find("--batch 128 is larger than the training set (100 images)") != std::string::npos);
    CHECK_FALSE(check_batch_fits(0, 10).empty());
}
