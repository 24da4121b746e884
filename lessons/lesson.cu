// lessons/lesson.cu — see lesson.h. Compiled once into the `lesson_common` library every lesson links.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <thread>

#include "lessons/lesson.h"

#include "common/device_info.h"
#include "common/reference_mlp.h"
#include "kernels/count_correct.cuh"
#include "kernels/normalize.cuh"

namespace {

TrainOptions lesson_defaults() {
    TrainOptions o;
    o.hidden = {1024, 1024};
    o.optimizer = OptimizerKind::adamw;
    o.lr = o.adamw_lr;
    o.weight_decay = o.adamw_weight_decay;
    o.lr_schedule = LrSchedule::cosine;
    o.epochs = 5;
    o.batch = 128;
    return o;
}

// 64-bit FNV-1a over bytes: equal checksums of the final weights mean bitwise-equal weights (for comparing lessons).
uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
    return hash;
}

}  // namespace

Lesson::Lesson(int argc, char** argv, const char* program, const char* idea, const std::function<void(Cli&)>& add_flags,
               size_t cpu_train_images)
    : options(lesson_defaults()), program_(program), report_(program) {
    bool full = false;
    Cli cli(program, std::string(idea) + "\nOn the CPU backend it trains on a subset unless --full (see the banner).",
            options);
    cli.add_flag("--full", &full, "CPU backend: all of MNIST instead of the quick subset (a GPU always uses all)");
    cli.add_output_file("--trace", &trace_path_, "FILE",
                        "write a timeline of the training (each phase on its stream and the host thread) as Chrome "
                        "Trace Event JSON: open it in ui.perfetto.dev or chrome://tracing");
    cli.add_int("--trace-steps", &trace_steps_, "N", "steps per epoch on the --trace timeline", 1, 1000000);
    if (add_flags) add_flags(cli);
    cli.parse_or_exit(argc, argv);
    if (!trace_path_.empty()) timer.enable_trace(trace_steps_);
    std::string unused_notes;  // for the banner: flags given that this lesson does not use
    for (const auto& [flag, why] : cli.unused()) {
        if (flag == "--epochs") options.epochs = 0;  // the lesson counts its work otherwise: no "5 epochs" shown
        if (cli.given(flag)) unused_notes += "note:   " + flag + " is not used by this lesson: " + why + "\n";
    }
    if (options.optimizer == OptimizerKind::sgd) {  // the defaults above are AdamW's; sgd's are TrainOptions'
        const TrainOptions plain;
        if (!cli.given("--lr")) options.lr = plain.lr;
        if (!cli.given("--weight-decay")) options.weight_decay = plain.weight_decay;
    }

#if defined(CUDA_TEACH_CPU)
    // Every core: the kernels use no float atomics, so results do not depend on how blocks are spread over workers.
    if (std::getenv("CUDA_CPU_WORKERS") == nullptr) {
        setenv("CUDA_CPU_WORKERS", std::to_string(std::max(1u, std::thread::hardware_concurrency())).c_str(), 0);
    }
#endif
    require_device_or_exit(program);
    ledger.note_device_memory_before();  // before the lesson's first cudaMalloc
    const bool subset = on_cpu_backend() && !full;
    if (subset && !cli.given("--limit")) options.limit = cpu_train_images;
    if (subset && !cli.given("--test-limit")) options.test_limit = kCpuTestImages;
    data = load_mnist_or_exit(program, options.data_dir, options.limit, options.test_limit);
    require_batch_fits_or_exit(program, options.batch, data.train.count);

    std::string banner = program_ + " — " + idea + "\n";
    banner += "device: " + device_summary() + "\n";
    banner += "data:   " + data.describe() + "\n";
    if (subset) {
        banner +=
            "        CPU backend: a subset, so that the lesson takes a minute or two; --full trains on all of MNIST\n"
            "        (about 1 s per step of 128 images on 2 cores: some 45 minutes for 5 epochs)\n";
    }
    banner += "model:  " + format_config(options) + "\n" + unused_notes + "\n";
    print_flushed(banner);

    report_.set_device(device_summary());
    peaks_ = query_device_peaks();
    report_.set_device_peaks(peaks_);
    report_.set_data(data.describe());
    report_.add_options(options);
    report_.add_config("full", !subset);
}

bool Lesson::on_cpu_backend() const {
    return std::string(BACKEND_NAME) == "cpu";
}

bool Lesson::streams_overlap() const {
#if defined(CUDA_TEACH_CPU)
    return cpu_backend::async_streams();
#else
    return true;
#endif
}

size_t Lesson::batches_per_epoch() const {
    return batch_count(data.train.count, options.batch);
}

long Lesson::total_steps() const {
    return long(batches_per_epoch()) * options.epochs;
}

double Lesson::lr_at(long step) const {
    return scheduled_lr(options.lr_schedule, options.lr, step, total_steps());
}

int Lesson::rows_in_batch(size_t batch_index) const {
    return int(std::min<size_t>(options.batch, data.train.count - batch_index * size_t(options.batch)));
}

ModelShape Lesson::model_shape(int staging_slots, bool stage_raw_pixels) const {
    ModelShape shape{options.layer_sizes(), options.batch, sizeof(float), sizeof(float), options.optimizer, false};
    shape.staging_slots = staging_slots;
    shape.stage_raw_pixels = stage_raw_pixels;
    return shape;
}

void Lesson::require_fits(const ModelShape& shape, size_t extra_device_bytes) {
    // Refuse what cannot fit before allocating anything: the prediction is exact (it is what allocate_mlp allocates).
    const size_t test_bytes = test_pixels_ != nullptr ? 0 : data.test.count * (kMnistPixels + 1);
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::string problem =
        check_device_fits(shape, test_bytes + extra_device_bytes,
                          extra_device_bytes > 0 ? "the test set and the lesson's own buffers" : "the test set",
                          usable_device_bytes(free_bytes, total_bytes));
    if (!problem.empty()) {
        std::fprintf(stderr, "%s: %s\n", program_.c_str(), problem.c_str());
        std::exit(2);
    }
}

void Lesson::upload_test_set() {
    if (test_pixels_ != nullptr) return;
    uint8_t* pixels =
        ledger.allocate<uint8_t>(MemoryCategory::input_staging, "test set pixels", data.test.images.size());
    uint8_t* labels = ledger.allocate<uint8_t>(MemoryCategory::input_staging, "test set labels", data.test.count);
    ledger.copy_to_device(pixels, data.test.images.data(), data.test.images.size());
    ledger.copy_to_device(labels, data.test.labels.data(), data.test.count);
    CUDA_CHECK(cudaDeviceSynchronize());  // the host vectors are pageable: be done with them before going on
    test_pixels_ = pixels;
    test_labels_ = labels;
}

Mlp& Lesson::allocate_model(int staging_slots, bool stage_raw_pixels, size_t extra_device_bytes) {
    if (model_allocated_) throw std::logic_error("Lesson::allocate_model: called twice");
    const ModelShape shape = model_shape(staging_slots, stage_raw_pixels);
    require_fits(shape, extra_device_bytes);

    net_ = allocate_initialized_model<float, float>(ledger, shape,
                                                    options.seed);  // the Philox initialization, moments zeroed
    upload_test_set();
    model_allocated_ = true;
    return net_;
}

EpochMetrics Lesson::finish_epoch(int epoch, const EpochTiming& timing, double loss_sum, Mlp& net,
                                  const ForwardPass& forward, cudaStream_t stream) {
    return finish_epoch(epoch, timing, loss_sum, net.correct, test_set_evaluator(net, forward), stream);
}

Lesson::EvaluateBatch Lesson::test_set_evaluator(Mlp& net, const ForwardPass& forward) {
    return [&net, forward](const uint8_t* pixels, const uint8_t* labels, int rows, int* correct, cudaStream_t s) {
        normalize_pixels(pixels, net.input, size_t(rows) * kMnistPixels, kMnistMean, kMnistStd, s);
        forward(net, rows, s);
        count_correct(net.layers.back().output, labels, correct, rows, kMnistClasses, nullptr, s);
    };
}

EpochMetrics Lesson::finish_epoch(int epoch, const EpochTiming& timing, double loss_sum, int* correct,
                                  const EvaluateBatch& evaluate, cudaStream_t stream) {
    if (test_pixels_ == nullptr) throw std::logic_error("Lesson::finish_epoch: the test set is not uploaded");
    // The training count (the counter was zeroed before the epoch: by model() or at the end of the previous one).
    int train_correct = 0;
    ledger.copy_to_host(&train_correct, correct, sizeof(int), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // pageable destination: wait before reading it

    // The test set, in batches of the training batch size (the activation buffers are that big), on the device.
    const double test_accuracy = evaluate_test_set(correct, evaluate, options.batch, stream);

    EpochMetrics metrics;
    metrics.epoch = epoch;
    metrics.epochs = options.epochs;
    metrics.train_loss = loss_sum / double(data.train.count);
    metrics.train_accuracy = double(train_correct) / double(data.train.count);
    metrics.test_accuracy = test_accuracy;
    metrics.seconds = timing.wall_ms / 1000.0;
    metrics.samples_per_second = metrics.seconds > 0 ? double(data.train.count) / metrics.seconds : 0.0;
    // The epoch's work (common/phase_work.h) for the phases it timed, and the model FLOPs rate against the peak.
    EpochWork work = mlp_epoch_work(WorkShape{options.layer_sizes(), data.train.count, options.batch, options.optimizer,
                                              gemm_element_bytes_, tensor_core_gemms_});
    for (int p = 0; p < kPhaseCount; ++p) {
        if (timing.phases[p].calls == 0) work[p] = {};
        if (!run_label_.empty()) continue;  // the final table is the main run's (timer's) alone
        work_total_[p].flops += work[p].flops;
        work_total_[p].bytes_device += work[p].bytes_device;
        work_total_[p].tensor_core = work[p].tensor_core;
    }
    if (metrics.seconds > 0) metrics.model_flops_per_second = model_flops(work) / metrics.seconds;
    const double peak = tensor_core_gemms_ ? peaks_.fp16_tensor_flops : peaks_.fp32_flops;
    if (peaks_.known && peak > 0) metrics.mfu = metrics.model_flops_per_second / peak;  // else unknown
    const std::string prefix = run_label_.empty() ? std::string() : std::string("[").append(run_label_).append("] ");
    print_flushed(prefix + epoch_line(metrics) + "\n");
    if (run_label_.empty()) {
        last_test_accuracy_ = metrics.test_accuracy;
        report_.add_epoch(metrics, timing, work);
    }
    return metrics;
}

double Lesson::evaluate_test_set(int* correct, const EvaluateBatch& evaluate, int chunk_rows, cudaStream_t stream) {
    if (test_pixels_ == nullptr) throw std::logic_error("Lesson::evaluate_test_set: the test set is not uploaded");
    CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(int), stream));
    for (size_t first = 0; first < data.test.count; first += size_t(chunk_rows)) {
        const int rows = int(std::min<size_t>(chunk_rows, data.test.count - first));
        evaluate(test_pixels_ + first * kMnistPixels, test_labels_ + first, rows, correct, stream);
    }
    int test_correct = 0;
    ledger.copy_to_host(&test_correct, correct, sizeof(int), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));                     // pageable destination
    CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(int), stream));  // ready for the next count
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return double(test_correct) / double(data.test.count);
}

int Lesson::finish(const std::string& timing_title) {
    print_flushed("\n");
    const std::string epochs = options.epochs == 1 ? "the epoch" : "all " + std::to_string(options.epochs) + " epochs";
    print_flushed(timing_table(timer.total(), timing_title.empty() ? "time per phase, " + epochs : timing_title,
                               work_total_, peaks_));

    // A checksum of the final weights: lessons that change only the data path must print the same one.
    uint64_t checksum = 0xcbf29ce484222325ull;
    if (final_parameters_.empty()) final_parameters_ = download_parameters(ledger, net_);  // model()'s
    for (const std::vector<float>& tensor : final_parameters_) {
        checksum = fnv1a(tensor.data(), tensor.size() * sizeof(float), checksum);
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(checksum));

    const MemorySnapshot memory = ledger.snapshot();
    print_flushed("\n");
    print_flushed(memory_table(memory) + transfer_summary(memory));
    print_flushed("final weights: checksum " + std::string(hex) +
                  " (FNV-1a of every weight's bytes; equal = bitwise equal)\n");
    report_.set_memory(memory);
    report_.add_result("final_test_accuracy", last_test_accuracy_);
    report_.add_result("weights_checksum", std::string(hex));
    report_.write_json_or_exit(options.json_path);
    if (!options.json_path.empty()) print_flushed("wrote " + options.json_path + "\n");
    if (!trace_path_.empty()) {
        try {
            timer.write_trace(trace_path_, program_ + " — " + device_summary(),
                              {{"program", program_}, {"backend", on_cpu_backend() ? "cpu" : "cuda"}});
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: --trace: %s\n", program_.c_str(), e.what());
            return 1;
        }
        print_flushed("wrote " + trace_path_ + " (the first " + std::to_string(trace_steps_) +
                      " steps of each epoch; open it in ui.perfetto.dev)\n");
    }
    return 0;
}

int Lesson::finish(Mlp& net) {
    set_final_parameters(download_parameters(ledger, net));
    return finish();
}

void Lesson::add_series(const std::string& key, const std::vector<double>& values) {
    report_.add_result(key, values);
}

int max_indexable_batch(const std::vector<int>& layer_sizes) {
    int widest = 1;
    for (const int width : layer_sizes) widest = std::max(widest, width);
    return gemm_max_rows(widest);
}

int run_lesson(int (*train)(int, char**), int argc, char** argv) {
    const char* program = argc > 0 ? argv[0] : "lesson";
    try {
        return train(argc, argv);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "%s: out of host memory (std::bad_alloc); try a smaller --batch or --hidden\n", program);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s: %s\n", program, error.what());
    }
    return 1;
}
