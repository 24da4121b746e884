// common/launch_grid.h — the grid argument of launch(): the grid's dimensions plus where the launch was written.
// launch() keeps CUDA's argument order (kernel, grid, block, ...), so the call site rides along with the grid:
// each constructor's defaulted __builtin_FILE()/__builtin_LINE() are evaluated at the caller's line, and a failed
// launch is reported there rather than inside launch.h.
#pragma once

#include <vector_types.h>

struct LaunchGrid {
    dim3 dims;
    const char* file;
    int line;
    const char* function;

    LaunchGrid(dim3 d, const char* f = __builtin_FILE(), int l = __builtin_LINE(),
               const char* fn = __builtin_FUNCTION())
        : dims(d), file(f), line(l), function(fn) {}
    LaunchGrid(uint3 d, const char* f = __builtin_FILE(), int l = __builtin_LINE(),
               const char* fn = __builtin_FUNCTION())
        : dims(d.x, d.y, d.z), file(f), line(l), function(fn) {}
    LaunchGrid(unsigned x, const char* f = __builtin_FILE(), int l = __builtin_LINE(),
               const char* fn = __builtin_FUNCTION())
        : dims(x), file(f), line(l), function(fn) {}
    // launch(kernel, {gx, gy}, ...) and {gx, gy, gz}, as `dim3` accepts them.
    LaunchGrid(unsigned x, unsigned y, unsigned z = 1, const char* f = __builtin_FILE(), int l = __builtin_LINE(),
               const char* fn = __builtin_FUNCTION())
        : dims(x, y, z), file(f), line(l), function(fn) {}
};
