// tools/reference.cpp — the `reference` executable: trains the MLP on MNIST on the CPU in float64, with the
// same initialization, batch order, report and JSON as the lessons. Its accuracy is what a correct lesson
// reaches.
//
//     build/cpu/tools/reference                       # 784-256-10, 3 epochs, SGD momentum (the defaults
//     below) build/cpu/tools/reference --optimizer adamw --json reference.json build/cpu/tools/reference
//     --limit 2000 --epochs 1   # a few seconds
#include <chrono>
#include <cstdio>

#include "common/cli.h"
#include "common/mnist.h"
#include "common/phase_timer.h"
#include "common/reference_mlp.h"
#include "common/report.h"

int main(int argc, char** argv) {
    const char* program = "reference";
    TrainOptions options;  // the shared defaults: 784-256-10, batch 128, SGD lr 0.05 momentum 0.9, 3 epochs
    Cli cli(program,
            "Trains an MLP on MNIST on the CPU in float64 (plain C++, one thread): the reference a lesson's "
            "loss\n"
            "and accuracy are compared with. Same Philox initialization and batch order as the lessons.",
            options);
    cli.parse_or_exit(argc, argv);

    const MnistDataset data = load_mnist_or_exit(program, options.data_dir, options.limit);
    require_batch_fits_or_exit(program, options.batch, data.train.count);

    const std::string device = "CPU reference: float64, one thread (no GPU, no CPU backend)";
    std::printf("%s\n%s\n%s\n", device.c_str(), data.describe().c_str(), format_config(options).c_str());
    RunReport report(program);
    report.set_device(device);
    report.set_data(data.describe());
    report.add_options(options);

    ReferenceMlp model(ReferenceConfig::from_options(options));
    PhaseTimer timer(TimerClock::host);
    double test_accuracy = 0;
    for (int epoch = 1; epoch <= options.epochs; ++epoch) {
        ProgressBar progress("epoch " + std::to_string(epoch), batch_count(data.train.count, options.batch),
                             !options.quiet);
        timer.begin_epoch(epoch);
        const EpochResult result = model.train_epoch(data.train, epoch, &timer, &progress);
        const EpochTiming& timing = timer.end_epoch();
        progress.finish();
        test_accuracy = model.evaluate(data.test);

        EpochMetrics metrics;
        metrics.epoch = epoch;
        metrics.epochs = options.epochs;
        metrics.train_loss = result.mean_loss;
        metrics.train_accuracy = result.train_accuracy;
        metrics.test_accuracy = test_accuracy;
        metrics.seconds = timing.wall_ms / 1000.0;
        metrics.samples_per_second = metrics.seconds > 0 ? double(result.samples) / metrics.seconds : 0.0;
        std::printf("%s\n", epoch_line(metrics).c_str());
        std::fflush(stdout);
        report.add_epoch(metrics, timing);
    }

    const MemorySnapshot memory = model.memory().snapshot();
    std::printf("\n%s", timing_table(timer.total(), "time per phase, all epochs").c_str());
    std::printf("\n%s", memory_table(memory).c_str());
    report.set_memory(memory);
    report.add_result("final_test_accuracy", test_accuracy);
    report.write_json_or_exit(options.json_path);
    if (!options.json_path.empty()) std::printf("\nwrote %s\n", options.json_path.c_str());
    return 0;
}
