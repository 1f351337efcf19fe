// Per-row attention statistics for the probe (derivation.md §6), streamed over the keys: the logits
// q.k * softmax_scale of a row are computed on the fly and never stored, so memory does not grow with the
// number of keys. The CPU reference is crates/probe/src/row_statistics.rs; this kernel returns the same
// numbers (f32 logits, f64 statistics).
//
// Launch: grid (rows, heads), block STATS_THREADS threads; one block reduces one (head, row).
//
// Inputs
//   queries  [heads, query_rows, dim] f32, the dim axis contiguous; strides in elements
//   keys     [kv_heads, keys, dim]    f32, the dim axis contiguous; query head h reads kv head
//                                     h / (heads / kv_heads) (grouped-query attention)
//   visible  [query_rows, keys] u8 (1 = visible) with row stride `visible_stride`, or null: every key
//   row_index[rows] the query rows to reduce (indices into query_rows)
//   ks       [nk <= STATS_MAX_KS] each in 1..STATS_MAX_K; scales [ns] the query scales of estimator (iii)
// Output
//   out [heads, rows, 4 + nk * (5 + ns)] f64: n, entropy, log-sum-exp, sink share, then per k: M_k,
//   background mean, background variance, top mean, weighted background mean, then M_k at each scale.
//   Statistics of a k that is not below the row's n are NaN.

#define STATS_THREADS 128
#define STATS_MAX_K 64
#define STATS_MAX_KS 16
#define STATS_MAX_SCALES 64
#define STATS_MAX_DIM 256

// The per-row fields before the per-k blocks, and the fields of a per-k block before its scale curve.
#define STATS_ROW_FIELDS 4
#define STATS_K_FIELDS 5

__device__ double stats_neg_inf() { return __longlong_as_double(0xfff0000000000000ULL); }
__device__ double stats_nan() { return __longlong_as_double(0x7ff8000000000000ULL); }

// The softmax input q.k * softmax_scale of one key, f32 as the reference's matrix product gives it. Both
// passes over the keys call this, so they see the same bits.
__device__ float key_logit(const float* query, const float* key, int dim, float softmax_scale) {
    float dot = 0.0f;
    for (int d = 0; d < dim; ++d) dot += query[d] * key[d];
    return dot * softmax_scale;
}

// Whether a logit counts as a key: the reference counts finite logits (an overflowed or NaN one does not).
__device__ bool is_key(float logit) { return fabsf(logit) <= 3.402823466e38f; }

// Sum of one value per thread, returned to every thread. `scratch` holds STATS_THREADS doubles.
__device__ double block_sum(double value, double* scratch) {
    const int t = threadIdx.x;
    scratch[t] = value;
    __syncthreads();
    for (int half = STATS_THREADS / 2; half > 0; half /= 2) {
        if (t < half) scratch[t] += scratch[t + half];
        __syncthreads();
    }
    const double total = scratch[0];
    __syncthreads();
    return total;
}

// Largest of one value per thread, returned to every thread.
__device__ double block_max(double value, double* scratch) {
    const int t = threadIdx.x;
    scratch[t] = value;
    __syncthreads();
    for (int half = STATS_THREADS / 2; half > 0; half /= 2) {
        if (t < half) scratch[t] = fmax(scratch[t], scratch[t + half]);
        __syncthreads();
    }
    const double largest = scratch[0];
    __syncthreads();
    return largest;
}

extern "C" __global__ void attention_stats(
    const float* queries, long long query_head_stride, long long query_row_stride,
    const float* keys, long long key_head_stride, long long key_row_stride,
    const unsigned char* visible, long long visible_stride,
    const int* row_index, int heads, int kv_heads, int key_count, int dim, float softmax_scale,
    const int* ks, int nk, const double* scales, int ns, double* out)
{
    __shared__ float query[STATS_MAX_DIM];
    __shared__ double scratch[STATS_THREADS];
    // The row's top STATS_MAX_K logits, decreasing, merged from each thread's own sorted list.
    __shared__ float top[STATS_MAX_K];
    __shared__ int winner[STATS_THREADS];
    __shared__ float winner_value[STATS_THREADS];

    const int t = threadIdx.x;
    const int r = blockIdx.x;
    const int h = blockIdx.y;
    const int rows = gridDim.x;
    const int query_row = row_index[r];
    const int kv_head = h / (heads / kv_heads);
    int k_max = 1;
    for (int c = 0; c < nk; ++c) k_max = ks[c] > k_max ? ks[c] : k_max;

    for (int d = t; d < dim; d += STATS_THREADS)
        query[d] = queries[h * query_head_stride + query_row * query_row_stride + d];
    __syncthreads();

    // Streaming pass: this thread's keys t, t + STATS_THREADS, ...
    // Running maximum m; sums relative to it: sum exp(l - m), sum exp(l - m) l, sum exp(s (l - m)).
    double m = stats_neg_inf();
    double sum_exp = 0.0, sum_exp_logit = 0.0;
    double sum_exp_at_scale[STATS_MAX_SCALES];
    for (int i = 0; i < ns; ++i) sum_exp_at_scale[i] = 0.0;
    double count = 0.0, sum = 0.0, sum_sq = 0.0, sink_logit = stats_neg_inf();
    float local_top[STATS_MAX_K];
    for (int i = 0; i < k_max; ++i) local_top[i] = (float)stats_neg_inf();

    const float* key_base = keys + kv_head * key_head_stride;
    const unsigned char* visible_row = visible ? visible + query_row * visible_stride : 0;
    for (int j = t; j < key_count; j += STATS_THREADS) {
        if (visible_row && !visible_row[j]) continue;
        const float logit = key_logit(query, key_base + j * key_row_stride, dim, softmax_scale);
        if (!is_key(logit)) continue;
        const double l = (double)logit;
        if (j == 0) sink_logit = l;
        count += 1.0;
        sum += l;
        sum_sq += l * l;
        if (l > m) {
            if (m != stats_neg_inf()) { // before this thread's first key every sum is still 0
                const double shift = m - l;
                const double rescale = exp(shift);
                sum_exp *= rescale;
                sum_exp_logit *= rescale;
                for (int i = 0; i < ns; ++i) sum_exp_at_scale[i] *= exp(scales[i] * shift);
            }
            m = l;
        }
        const double centred = l - m;
        const double weight = exp(centred);
        sum_exp += weight;
        sum_exp_logit += weight * l;
        for (int i = 0; i < ns; ++i) sum_exp_at_scale[i] += exp(scales[i] * centred);
        if (logit > local_top[k_max - 1]) {
            int i = k_max - 1;
            while (i > 0 && local_top[i - 1] < logit) {
                local_top[i] = local_top[i - 1];
                --i;
            }
            local_top[i] = logit;
        }
    }

    // Combine the threads: every sum re-centred on the row's maximum.
    const double row_max = block_max(m, scratch);
    const double to_row = (m == stats_neg_inf()) ? 0.0 : exp(m - row_max);
    const double total_exp = block_sum(sum_exp * to_row, scratch);
    const double total_exp_logit = block_sum(sum_exp_logit * to_row, scratch);
    const double n = block_sum(count, scratch);
    const double total = block_sum(sum, scratch);
    const double total_sq = block_sum(sum_sq, scratch);
    const double sink = block_max(sink_logit, scratch);
    const double lse = row_max + log(total_exp);
    const double mean_p = total_exp_logit / total_exp; // E_p[l]

    double* row_out = out + ((long long)h * rows + r) * (STATS_ROW_FIELDS + nk * (STATS_K_FIELDS + ns));
    // log Z(s) = log sum exp(s l) over every visible key, for the curves M_k(s).
    double log_z[STATS_MAX_SCALES];
    for (int i = 0; i < ns; ++i) {
        const double at_scale = (m == stats_neg_inf()) ? 0.0 : sum_exp_at_scale[i] * exp(scales[i] * (m - row_max));
        log_z[i] = scales[i] * row_max + log(block_sum(at_scale, scratch));
    }

    // Merge the threads' sorted lists: k_max rounds, each taking the largest head of any list.
    int next = 0;
    for (int round = 0; round < k_max; ++round) {
        winner_value[t] = next < k_max ? local_top[next] : (float)stats_neg_inf();
        winner[t] = t;
        __syncthreads();
        for (int half = STATS_THREADS / 2; half > 0; half /= 2) {
            if (t < half && winner_value[t + half] > winner_value[t]) {
                winner_value[t] = winner_value[t + half];
                winner[t] = winner[t + half];
            }
            __syncthreads();
        }
        if (t == 0) top[round] = winner_value[0];
        if (winner[0] == t) ++next;
        __syncthreads();
    }

    // <l>_B per k from the background's own softmax: a second pass over the keys, now that each k's
    // threshold top[k - 1] is known. (E_p[l] - M <l>_R) / (1 - M) would be 0 / 0 for a head that puts
    // all its mass on k keys.) Keys equal to a threshold beyond those in the top k are background too.
    double background_exp[STATS_MAX_KS], background_exp_logit[STATS_MAX_KS], at_threshold[STATS_MAX_KS];
    for (int c = 0; c < nk; ++c) background_exp[c] = background_exp_logit[c] = at_threshold[c] = 0.0;
    for (int j = t; j < key_count; j += STATS_THREADS) {
        if (visible_row && !visible_row[j]) continue;
        const float logit = key_logit(query, key_base + j * key_row_stride, dim, softmax_scale);
        if (!is_key(logit)) continue;
        const double l = (double)logit, weight = exp(l - row_max);
        for (int c = 0; c < nk; ++c) {
            const float threshold = top[ks[c] - 1];
            if (logit < threshold) {
                background_exp[c] += weight;
                background_exp_logit[c] += weight * l;
            } else if (logit == threshold) {
                at_threshold[c] += 1.0;
            }
        }
    }
    double weighted_background[STATS_MAX_KS];
    for (int c = 0; c < nk; ++c) {
        const float threshold = top[ks[c] - 1];
        double in_top = 0.0;
        for (int i = 0; i < ks[c]; ++i) in_top += (top[i] == threshold) ? 1.0 : 0.0;
        const double tied = block_sum(at_threshold[c], scratch) - in_top;
        const double tied_weight = tied > 0.0 ? tied * exp((double)threshold - row_max) : 0.0;
        const double exp_sum = block_sum(background_exp[c], scratch) + tied_weight;
        const double exp_logit_sum = block_sum(background_exp_logit[c], scratch) + tied_weight * (double)threshold;
        weighted_background[c] = exp_logit_sum / exp_sum;
    }

    if (t == 0) {
        row_out[0] = n;
        row_out[1] = lse - mean_p;
        row_out[2] = lse;
        row_out[3] = exp(sink - lse); // 0 where key 0 is invisible
    }
    // Per k: thread 0 writes the moments, every thread some points of the scale curve. Each thread
    // recomputes the top's log-sum-exp itself (k <= STATS_MAX_K terms) rather than synchronising.
    const double top_max = (double)top[0];
    for (int c = 0; c < nk; ++c) {
        const int k = ks[c];
        double* k_out = row_out + STATS_ROW_FIELDS + c * (STATS_K_FIELDS + ns);
        if ((double)k >= n) {
            for (int f = t; f < STATS_K_FIELDS + ns; f += STATS_THREADS) k_out[f] = stats_nan();
            continue;
        }
        double top_sum = 0.0, top_sum_sq = 0.0, top_exp = 0.0, top_exp_logit = 0.0;
        for (int i = 0; i < k; ++i) {
            const double l = (double)top[i];
            const double weight = exp(l - top_max);
            top_sum += l;
            top_sum_sq += l * l;
            top_exp += weight;
            top_exp_logit += weight * l;
        }
        const double lse_top = top_max + log(top_exp);
        const double mass = exp(lse_top - lse);
        if (t == 0) {
            const double rest = n - k;
            const double background_mean = (total - top_sum) / rest;
            const double top_mean = top_exp_logit / top_exp;
            k_out[0] = mass;
            k_out[1] = background_mean;
            k_out[2] = (total_sq - top_sum_sq) / rest - background_mean * background_mean;
            k_out[3] = top_mean;
            k_out[4] = weighted_background[c];
        }
        for (int i = t; i < ns; i += STATS_THREADS) {
            double scaled = 0.0;
            for (int j = 0; j < k; ++j) scaled += exp(scales[i] * ((double)top[j] - top_max));
            k_out[STATS_K_FIELDS + i] = exp(scales[i] * top_max + log(scaled) - log_z[i]);
        }
    }
}
