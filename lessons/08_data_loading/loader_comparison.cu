// lessons/08_data_loading/loader_comparison.cu — see loader_comparison.h.
#include "lessons/08_data_loading/loader_comparison.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "common/report.h"
#include "lessons/03_pinned_async/copy_figures.h"  // report_copies

const char* augment_name(Augment augment) {
    switch (augment) {
        case Augment::none:
            return "none";
        case Augment::host:
            return "host";
        case Augment::device:
            return "device";
    }
    return "?";
}

Augment augment_from_name(const std::string& name) {
    for (const Augment a : {Augment::none, Augment::host, Augment::device})
        if (name == augment_name(a)) return a;
    throw std::invalid_argument("unknown --augment mode: " + name);
}

std::string LoaderMode::label() const {
    return std::string(augment_name(augment)) + ", " + std::to_string(workers) +
           (workers == 1 ? " worker" : " workers");
}

std::vector<LoaderMode> comparison_modes(int main_workers) {
    std::vector<LoaderMode> modes = {{Augment::none, 1}, {Augment::host, 1}, {Augment::host, 2}, {Augment::host, 4}};
    if (main_workers != 1 && main_workers != 2 && main_workers != 4) modes.push_back({Augment::host, main_workers});
    modes.push_back({Augment::device, 1});
    return modes;
}

namespace {

std::string per_step_ms(double ms, long steps) {
    return fixed(steps > 0 ? ms / double(steps) : 0.0, 2);
}

void print_comparison(Lesson& lesson, const std::vector<LoaderRun>& runs) {
    const bool cpu = lesson.on_cpu_backend();
    TextTable table({"mode", "steps", "loader stall", "back-pressure", "input wait", "h2d", "kernels", "wall",
                     "kernels/wall", "loader img/s", "bytes copied/img", "test acc"},
                    "lrrrrrrrrrrr");
    std::vector<RunReport::Row> rows;
    for (const LoaderRun& r : runs) {
        const EpochTiming& t = r.timing;
        double kernels_ms = 0;
        for (const Phase p : {Phase::normalize, Phase::forward, Phase::loss, Phase::backward, Phase::optimizer})
            kernels_ms += t[p].ms;
        const double busy_fraction = t.wall_ms > 0 ? kernels_ms / t.wall_ms : 0.0;
        // What the workers could deliver if they never waited: images ÷ (busy seconds per worker).
        const double capacity =
            r.loader.busy_seconds > 0 ? double(r.loader.images) / (r.loader.busy_seconds / r.mode.workers) : 0.0;
        const double bytes_per_image = r.images > 0 ? double(r.image_bytes) / double(r.images) : 0.0;
        const double stall_ms = 1e3 * r.loader.fill_wait_seconds;
        const double pressure_ms = 1e3 * (r.loader.next_wait_seconds - r.loader.fill_wait_seconds);
        table.add_row({r.mode.label(), std::to_string(r.steps), per_step_ms(stall_ms, r.steps),
                       per_step_ms(pressure_ms, r.steps), per_step_ms(t[Phase::input_wait].ms, r.steps),
                       per_step_ms(t[Phase::h2d].ms, r.steps), per_step_ms(kernels_ms, r.steps),
                       per_step_ms(t.wall_ms, r.steps), fixed(100.0 * busy_fraction, 1) + "%", fixed(capacity, 0),
                       fixed(bytes_per_image, 0), fixed(100.0 * r.test_accuracy, 2) + "%"});
        rows.push_back({{"mode", std::string(augment_name(r.mode.augment))},
                        {"workers", int64_t(r.mode.workers)},
                        {"steps", int64_t(r.steps)},
                        {"loader_stall_ms_per_step", r.steps ? stall_ms / double(r.steps) : 0.0},
                        {"back_pressure_ms_per_step", r.steps ? pressure_ms / double(r.steps) : 0.0},
                        {"input_wait_ms_per_step", r.steps ? t[Phase::input_wait].ms / double(r.steps) : 0.0},
                        {"h2d_ms_per_step", r.steps ? t[Phase::h2d].ms / double(r.steps) : 0.0},
                        {"kernels_ms_per_step", r.steps ? kernels_ms / double(r.steps) : 0.0},
                        {"wall_ms_per_step", r.steps ? t.wall_ms / double(r.steps) : 0.0},
                        {"kernels_busy_fraction", busy_fraction},
                        {"loader_images_per_second", capacity},
                        {"image_bytes_per_image", bytes_per_image},
                        {"test_accuracy", r.test_accuracy}});
    }
    print_flushed(
        std::string("\nthe data paths side by side (same seed, same batches; ms per step") +
        (cpu ? "; CPU timings: the loader's threads and the emulated GPU share this machine's cores" : "") + "):\n" +
        table.render() +
        "  loader stall: the training loop waited in the loader's next() for a batch whose fill had already\n"
        "    begun: the loader is slower than the loop, which queues nothing meanwhile; once the work already\n"
        "    queued runs out, the device idles (kernels/wall drops). back-pressure: the batch's worker was still\n"
        "    waiting for its staging slot's previous copy (then filled it): the device is the slower side.\n"
        "  input wait: the compute stream waiting for the batch's copy. kernels: normalize (with --augment\n"
        "    device: augment + normalize), forward, loss, backward, optimizer; kernels/wall: the share of the\n"
        "    wall time the device spent computing" +
        (cpu ? " (here: the share of CPU time spent in the kernels)" : "") +
        ".\n"
        "  loader img/s: what the workers deliver when they never wait (images ÷ their busy time per worker),\n"
        "    assuming each keeps the speed it was measured at: optimistic once they outnumber the cores (" +
        std::to_string(std::thread::hardware_concurrency()) +
        " here).\n"
        "  test acc: after each run's own steps (the comparison runs train only a few).\n");
    lesson.add_result("loader_runs", rows);
}

}  // namespace

void compare_loaders(Lesson& lesson, const std::vector<LoaderMode>& modes, size_t batches, const TrainMode& train,
                     const LoaderRun& main_run) {
    std::vector<LoaderRun> runs;
    for (const LoaderMode& mode : modes) {
        print_flushed("--- " + mode.label() + " (for comparison, " + std::to_string(batches) + " steps)\n");
        MemoryLedger side_ledger;  // a comparison run's buffers: freed before the next run
        PhaseTimer side_timer;
        runs.push_back(train(lesson, mode, batches, side_ledger, side_timer));
    }
    runs.push_back(main_run);
    print_comparison(lesson, runs);
}

void LoaderFlags::add(Cli& cli) {
    cli.add_choice("--augment", &augment, {"device", "host", "none"},
                   "where each training image is augmented (random affine): in a kernel after the copy, in the "
                   "loader before it, or not at all (lesson 04's data path)");
    cli.add_int("--workers", &workers, "N", "loader threads filling the staging slots", 1, 64);
    cli.add_int("--compare-steps", &compare_steps, "N",
                "steps each data path trains for the side-by-side table (0: none)", 0);
}

LoaderMode LoaderFlags::mode(Lesson& lesson) const {
    lesson.add_config("augment", augment);
    lesson.add_config("workers", int64_t(workers));
    return LoaderMode{augment_from_name(augment), workers};
}

LoaderRun finish_main_run(Lesson& lesson, LoaderRun run, PhaseTimer& timer, uint64_t image_bytes_per_epoch,
                          const std::vector<float>& step_losses, std::vector<std::vector<float>> parameters) {
    run.test_accuracy = lesson.final_test_accuracy();
    report_copies(lesson, timer, image_bytes_per_epoch, false);
    lesson.add_series("step_losses", std::vector<double>(step_losses.begin(), step_losses.end()));
    lesson.set_final_parameters(std::move(parameters));
    return run;
}
