// Just enough of CUDA for kernels/*.cu to compile as C++ and run on the host: each block's threads are
// std::threads meeting at a std::barrier for __syncthreads, blocks run one after another (so a
// function-static array is exactly a block's shared memory). Slow, and only for checking arithmetic.
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

struct HostDim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local HostDim3 threadIdx;
inline HostDim3 blockIdx, blockDim, gridDim;
inline std::barrier<>* host_block_barrier = nullptr;

#define __device__
#define __global__
#define __shared__ static

inline void __syncthreads() { host_block_barrier->arrive_and_wait(); }
inline double __longlong_as_double(unsigned long long bits) {
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// Runs `kernel` over a grid of (grid_x, grid_y) blocks of `threads` threads.
inline void launch_on_host(unsigned grid_x, unsigned grid_y, unsigned threads, const std::function<void()>& kernel) {
    gridDim = {grid_x, grid_y, 1};
    blockDim = {threads, 1, 1};
    for (unsigned y = 0; y < grid_y; ++y) {
        for (unsigned x = 0; x < grid_x; ++x) {
            blockIdx = {x, y, 1};
            std::barrier<> barrier(threads);
            host_block_barrier = &barrier;
            std::vector<std::thread> block;
            for (unsigned t = 0; t < threads; ++t) {
                block.emplace_back([t, &kernel] {
                    threadIdx = {t, 0, 0};
                    kernel();
                });
            }
            for (auto& thread : block) thread.join();
        }
    }
}
