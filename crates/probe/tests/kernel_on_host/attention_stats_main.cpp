// Runs kernels/attention_stats.cu on the host (emulate_cuda.hpp) for crates/probe/tests/kernel_on_host.rs.
//   attention_stats_main INPUT OUTPUT
// INPUT (little-endian): i64 heads, kv_heads, query_rows, key_count, dim, rows, nk, ns, has_mask; f64
// softmax_scale; f32 queries [heads, query_rows, dim]; f32 keys [kv_heads, key_count, dim]; u8 visible
// [query_rows, key_count] when has_mask; i32 row_index [rows]; i32 ks [nk]; f64 scales [ns].
// OUTPUT: the kernel's f64 out [heads, rows, 4 + nk (5 + ns)].
#include "emulate_cuda.hpp"
#include ATTENTION_STATS_SOURCE

#include <cstdint>
#include <cstdio>

template <typename T>
static std::vector<T> read_values(std::FILE* file, std::size_t count) {
    std::vector<T> values(count);
    if (count && std::fread(values.data(), sizeof(T), count, file) != count) {
        std::fprintf(stderr, "input ends early\n");
        std::exit(2);
    }
    return values;
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 2;
    }
    std::FILE* input = std::fopen(argv[1], "rb");
    if (!input) return 2;
    auto header = read_values<std::int64_t>(input, 9);
    const std::int64_t heads = header[0], kv_heads = header[1], query_rows = header[2], key_count = header[3],
                       dim = header[4], rows = header[5], nk = header[6], ns = header[7], has_mask = header[8];
    const double softmax_scale = read_values<double>(input, 1)[0];
    auto queries = read_values<float>(input, heads * query_rows * dim);
    auto keys = read_values<float>(input, kv_heads * key_count * dim);
    auto visible = read_values<unsigned char>(input, has_mask ? query_rows * key_count : 0);
    auto row_index = read_values<int>(input, rows);
    auto ks = read_values<int>(input, nk);
    auto scales = read_values<double>(input, ns);
    std::fclose(input);

    std::vector<double> out(heads * rows * (4 + nk * (5 + ns)));
    launch_on_host(rows, heads, STATS_THREADS, [&] {
        attention_stats(queries.data(), query_rows * dim, dim, keys.data(), key_count * dim, dim,
                        has_mask ? visible.data() : nullptr, key_count, row_index.data(), heads, kv_heads,
                        key_count, dim, (float)softmax_scale, ks.data(), nk, scales.data(), ns, out.data());
    });
    std::FILE* output = std::fopen(argv[2], "wb");
    if (!output || std::fwrite(out.data(), sizeof(double), out.size(), output) != out.size()) return 2;
    std::fclose(output);
    return 0;
}
