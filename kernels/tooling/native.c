/* Fused CPU attention for a forward without backward (the evaluation's): the core of softmax
 * attention, Diff, CoPE, trela and TDA, with no [query, key] tensor in memory; and, at the end,
 * trela's and TDA's rotated unit queries and keys with their gradient, and the training path's
 * block rules of CoPE, Shaw, trela and TDA (training's too). Built and loaded by
 * kernels/tooling/native.py.
 *
 * Work goes by groups of GROUP query rows of one sequence-head, so that each key (a vector of
 * LANES keys' values of one dimension) loaded from memory serves GROUP rows. Per group:
 * the scores of every row against the keys up to the group's last query, in registers; the
 * mechanism's logits and softmax weights, row by row, in loops along the keys that the
 * compiler vectorises (with glibc's vector expf); the weighted sum of the values.
 *
 * Layout, per sequence-head: queries [pos, d] (row-major), keys transposed [d, stride] with
 * stride a multiple of PAD and zeros past the last key, values [pos, d_value] with d_value
 * a multiple of PAD. A query at position i reads keys 0..i. `rows` [n_bh, n_rows] names
 * the query positions, or is NULL for all of them. z [n_bh, n_rows, d_value] gets the output.
 *
 * Compiled with -ffast-math (the vector expf, reductions in any order): equal to the PyTorch
 * paths up to float rounding. Weights past a row's last key are set to exactly zero.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* A vector is one register of the target: 16 floats with AVX-512, 8 with AVX, else 4 (wider
 * vectors on a narrower target run out of registers). The caller pads keys and values to a
 * multiple of PAD, a multiple of every width. */
#if defined(__AVX512F__)
enum { LANES = 16 };
#elif defined(__AVX__)
enum { LANES = 8 };
#else
enum { LANES = 4 };
#endif
enum { GROUP = 4, PAD = 16 };
typedef float vec __attribute__((vector_size(LANES * sizeof(float)), aligned(sizeof(float))));

/* The vector width this build uses, in floats (kernels/tooling/native.py runs the kernels only where
 * it is at least 8: with 4, an SSE build measured slower than PyTorch's paths for TDA). */
int vector_lanes(void) { return LANES; }

static int64_t chunks(int64_t n) { return (n + LANES - 1) / LANES; }

/* The caller's row length for n entries (kernels/tooling/native.py pads to a multiple of PAD). */
static int64_t padded(int64_t n) { return (n + PAD - 1) / PAD * PAD; }

/* The positions of the group of rows starting at row r0 (the last row repeated to fill it). */
static int64_t group_positions(const int64_t *rows, int64_t n_rows, int64_t r0, int64_t i[GROUP]) {
    int64_t last = 0;
    for (int r = 0; r < GROUP; r++) {
        const int64_t row = r0 + r < n_rows ? r0 + r : n_rows - 1;
        i[r] = rows ? rows[row] : row;
        last = i[r] > last ? i[r] : last;
    }
    return last;
}

/* s[r][j] = scale * q_r . k_j, keys in n_chunks chunks of LANES (kT [d, stride], s [GROUP][stride]). */
static void group_scores(const float *q, const int64_t i[GROUP], const float *kT, int64_t d, int64_t stride,
                         int64_t n_chunks, float scale, float *s) {
    float scaled[d][GROUP];
    for (int64_t c = 0; c < d; c++)
        for (int r = 0; r < GROUP; r++)
            scaled[c][r] = q[i[r] * d + c] * scale;
    /* Even and odd dimensions sum apart: twice the independent chains of multiply-adds to keep
     * the units busy, and a shorter chain of roundings than one running sum. */
    for (int64_t ch = 0; ch < n_chunks; ch++) {
        vec even[GROUP] = {0}, odd[GROUP] = {0};
        const float *k = kT + ch * LANES;
        int64_t c = 0;
        for (; c + 1 < d; c += 2) {
            const vec k0 = *(const vec *)(k + c * stride), k1 = *(const vec *)(k + (c + 1) * stride);
            for (int r = 0; r < GROUP; r++) {
                even[r] += scaled[c][r] * k0;
                odd[r] += scaled[c + 1][r] * k1;
            }
        }
        if (c < d)
            for (int r = 0; r < GROUP; r++)
                even[r] += scaled[c][r] * *(const vec *)(k + c * stride);
        for (int r = 0; r < GROUP; r++)
            *(vec *)(s + r * stride + ch * LANES) = even[r] + odd[r];
    }
}

/* s[j] = exp(s[j] - max s) for j < n; returns their sum. */
static float exp_shifted(float *restrict s, int64_t n) {
    float top = s[0];
    for (int64_t j = 1; j < n; j++)
        top = fmaxf(top, s[j]);
    float total = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - top);
        total += s[j];
    }
    return total;
}

static void zero_from(float *s, int64_t from, int64_t to) {
    for (int64_t j = from; j < to; j++)
        s[j] = 0.0f;
}

/* z_r = sum_j w[r][j] v_j over the first n keys (v [pos, d_value], w [GROUP][stride]). */
static void group_values(const float *w, int64_t stride, const float *v, int64_t d_value, int64_t n,
                         float *z, const int64_t out[GROUP]) {
    for (int64_t c = 0; c < d_value; c += LANES) {
        vec acc[GROUP] = {0};
        for (int64_t j = 0; j < n; j++) {
            const vec value = *(const vec *)(v + j * d_value + c);
            for (int r = 0; r < GROUP; r++)
                acc[r] += w[r * stride + j] * value;
        }
        for (int r = 0; r < GROUP; r++)
            *(vec *)(z + out[r] * d_value + c) = acc[r];
    }
}

/* Output rows of the group starting at r0 within sequence-head h (the tail repeats its last). */
static void group_outputs(int64_t h, int64_t n_rows, int64_t r0, int64_t out[GROUP]) {
    for (int r = 0; r < GROUP; r++)
        out[r] = h * n_rows + (r0 + r < n_rows ? r0 + r : n_rows - 1);
}

/* p[r][j] = sum_{t >= j} p[r][t] in place over the first n entries of the GROUP rows, summed in
 * double as torch's cumsum does on the CPU (one rounding per entry, where a float running sum
 * has n); the rows' chains run side by side. */
static void suffix_sums(float *p, int64_t stride, int64_t n) {
    double later[GROUP] = {0};
    for (int64_t j = n - 1; j >= 0; j--)
        for (int r = 0; r < GROUP; r++) {
            later[r] += p[r * stride + j];
            p[r * stride + j] = (float)later[r];
        }
}

/* CoPE (Golovneva et al., eq. 3-9, App. B): gates g_j = sigmoid(S_j) from the scaled scores,
 * positions p_j = sum_{t=j..i} g_t clamped to p_max - 1, the position logit interpolated
 * between z[floor p] and z[floor p + 1], z[m] = q . e[m] with the unscaled q (eT [d,
 * e_stride]), added to S before the softmax. */
int cope_attention(const float *q, const float *kT, const float *v, const float *eT, const int64_t *rows,
                   int64_t n_bh, int64_t n_pos, int64_t n_rows, int64_t d, int64_t p_max, int64_t d_value,
                   float scale, float *z) {
    const int64_t stride = padded(n_pos), e_stride = padded(p_max);
    float *s = malloc(GROUP * (size_t)(2 * stride + e_stride) * sizeof(float));
    if (!s)
        return 1;
    float *p = s + GROUP * stride, *z_pos = p + GROUP * stride;
    const float top = (float)(p_max - 1);
    for (int64_t h = 0; h < n_bh; h++) {
        const int64_t *head_rows = rows ? rows + h * n_rows : NULL;
        for (int64_t r0 = 0; r0 < n_rows; r0 += GROUP) {
            int64_t i[GROUP], out[GROUP];
            const int64_t n_keys = group_positions(head_rows, n_rows, r0, i) + 1;
            /* p_j < n, so the interpolation reads the position logits at 0..n only */
            const int64_t n_emb = n_keys + 1 < p_max ? n_keys + 1 : p_max;
            group_scores(q + h * n_pos * d, i, kT + h * d * stride, d, stride, chunks(n_keys), scale, s);
            group_scores(q + h * n_pos * d, i, eT, d, e_stride, chunks(n_emb), 1.0f, z_pos);   /* eq. 7 */
            for (int r = 0; r < GROUP; r++) {                                                /* eq. 3 */
                const float *s_r = s + r * stride;
                float *g = p + r * stride;
                for (int64_t j = 0; j <= i[r]; j++)
                    g[j] = 1.0f / (1.0f + expf(-s_r[j]));
                zero_from(g, i[r] + 1, n_keys);
            }
            suffix_sums(p, stride, n_keys);                                                 /* eq. 4 */
            for (int r = 0; r < GROUP; r++) {                                                /* eq. 8-9 */
                float *w = s + r * stride;
                const float *p_r = p + r * stride, *z_r = z_pos + r * e_stride;
                const int64_t n = i[r] + 1;
                for (int64_t j = 0; j < n; j++) {
                    const float p_j = fminf(p_r[j], top);
                    const int64_t lo = (int64_t)p_j, hi = lo + 1 < p_max ? lo + 1 : lo;
                    w[j] += z_r[lo] + (p_j - (float)lo) * (z_r[hi] - z_r[lo]);
                }
                const float norm = 1.0f / exp_shifted(w, n);
                for (int64_t j = 0; j < n; j++)
                    w[j] *= norm;
                zero_from(w, n, n_keys);
            }
            group_outputs(h, n_rows, r0, out);
            group_values(s, stride, v + h * n_pos * d_value, d_value, n_keys, z, out);
        }
    }
    free(s);
    return 0;
}

/* a = (x)_+^p, with the square spelled out (p = 2 is every shipped model's). */
static void rectified_power(float *restrict x, int64_t n, float p) {
    if (p == 2.0f) {
        for (int64_t j = 0; j < n; j++)
            x[j] = x[j] > 0.0f ? x[j] * x[j] : 0.0f;
    } else {
        for (int64_t j = 0; j < n; j++)
            x[j] = x[j] > 0.0f ? powf(x[j], p) : 0.0f;
    }
}

/* What turns one query row's scores into its weights: the mechanism's constants. */
typedef struct {
    float lam, p;        /* the second view's weight; the threshold's power */
    const float *tau;    /* the threshold, [n_bh, n_pos], per sequence-head and query position */
    int64_t n_pos;
} Rule;

/* One row's weights, in place in w1, from its n scores w1 (and w2, the second view's, if any)
 * for query position i of sequence-head h. */
typedef void (*RowWeights)(float *restrict w1, float *restrict w2, int64_t n, int64_t h, int64_t i,
                           const Rule *rule);

/* softmax(S1), or Diff's softmax(S1) - lam softmax(S2) (Ye et al., eq. 1). */
static void softmax_weights(float *restrict w1, float *restrict w2, int64_t n, int64_t h, int64_t i,
                            const Rule *rule) {
    (void)h, (void)i;
    const float a = 1.0f / exp_shifted(w1, n);
    if (!w2) {
        for (int64_t j = 0; j < n; j++)
            w1[j] *= a;
        return;
    }
    const float b = rule->lam / exp_shifted(w2, n);
    for (int64_t j = 0; j < n; j++)
        w1[j] = a * w1[j] - b * w2[j];
}

/* (s1 - tau_i)_+^p, or TDA's (s1 - tau_i)_+^p - lam (s2 - tau_i)_+^p (TDA paper Sec. 4.1-4.2). */
static void threshold_weights(float *restrict w1, float *restrict w2, int64_t n, int64_t h, int64_t i,
                              const Rule *rule) {
    const float tau_i = rule->tau[h * rule->n_pos + i];
    for (int64_t j = 0; j < n; j++)
        w1[j] -= tau_i;
    rectified_power(w1, n, rule->p);
    if (!w2)
        return;
    for (int64_t j = 0; j < n; j++)
        w2[j] -= tau_i;
    rectified_power(w2, n, rule->p);
    for (int64_t j = 0; j < n; j++)
        w1[j] -= rule->lam * w2[j];
}

/* z = sum_j w_ij v_j with each row's weights from its scores S = scale * q . k in one view, or in
 * two (q2 not NULL), by `weights`. */
static int views_attention(const float *q1, const float *k1T, const float *q2, const float *k2T, const float *v,
                           const int64_t *rows, int64_t n_bh, int64_t n_pos, int64_t n_rows, int64_t d,
                           int64_t d_value, float scale, RowWeights weights, const Rule *rule, float *z) {
    const int64_t stride = padded(n_pos);
    float *s1 = malloc(2 * GROUP * (size_t)stride * sizeof(float));
    if (!s1)
        return 1;
    float *s2 = s1 + GROUP * stride;
    for (int64_t h = 0; h < n_bh; h++) {
        const int64_t queries = h * n_pos * d, keys = h * d * stride;
        const int64_t *head_rows = rows ? rows + h * n_rows : NULL;
        for (int64_t r0 = 0; r0 < n_rows; r0 += GROUP) {
            int64_t i[GROUP], out[GROUP];
            const int64_t n_keys = group_positions(head_rows, n_rows, r0, i) + 1;
            group_scores(q1 + queries, i, k1T + keys, d, stride, chunks(n_keys), scale, s1);
            if (q2)
                group_scores(q2 + queries, i, k2T + keys, d, stride, chunks(n_keys), scale, s2);
            for (int r = 0; r < GROUP; r++) {
                float *w = s1 + r * stride;
                weights(w, q2 ? s2 + r * stride : NULL, i[r] + 1, h, i[r], rule);
                zero_from(w, i[r] + 1, n_keys);
            }
            group_outputs(h, n_rows, r0, out);
            group_values(s1, stride, v + h * n_pos * d_value, d_value, n_keys, z, out);
        }
    }
    free(s1);
    return 0;
}

/* Causal softmax attention, z = softmax(S) V with S = scale * q . k, or with a second view (q2
 * not NULL) Diff's z = (softmax(S1) - lam softmax(S2)) V, each view over its d_view dimensions. */
int softmax_attention(const float *q1, const float *k1T, const float *q2, const float *k2T, const float *v,
                      const int64_t *rows, int64_t n_bh, int64_t n_pos, int64_t n_rows, int64_t d_view,
                      int64_t d_value, float scale, float lam, float *z) {
    const Rule rule = {.lam = lam};
    return views_attention(q1, k1T, q2, k2T, v, rows, n_bh, n_pos, n_rows, d_view, d_value, scale, softmax_weights,
                           &rule, z);
}

/* trela and TDA before the output norm: z = sum_j (a1_ij - lam a2_ij) v_j with a_ij =
 * (s_ij - tau_i)_+^p and s the unscaled products of the unit q and k; trela when q2 is NULL. */
int threshold_attention(const float *q1, const float *k1T, const float *q2, const float *k2T, const float *tau,
                        const float *v, const int64_t *rows, int64_t n_bh, int64_t n_pos, int64_t n_rows, int64_t d,
                        int64_t d_value, float lam, float p, float *z) {
    const Rule rule = {.lam = lam, .p = p, .tau = tau, .n_pos = n_pos};
    return views_attention(q1, k1T, q2, k2T, v, rows, n_bh, n_pos, n_rows, d, d_value, 1.0f, threshold_weights,
                           &rule, z);
}

/* trela's and TDA's q~ and k~ with their gradient (these two run in training too): a row y =
 * RoPE(x) (cos_both, sin_signed [n_pos, d], a row rotating to x cos_both + roll(x, d / 2)
 * sin_signed; no rotation when cos_both is NULL), its length |y| and its unit u = y / max(|y|,
 * eps). A row of shape [batch, pos, head] sits at b * s[0] + t * s[1] + h * s[2] of its tensor,
 * its d entries consecutive; `length` is [batch, pos, head] contiguous. The rotated row is built
 * in a buffer of d floats, so each row is read and written once. */
static void rotate(const float *x, const float *c, const float *s, int64_t d, float sign, float *y) {
    const int64_t half = d / 2;
    if (!c) {
        for (int64_t j = 0; j < d; j++)
            y[j] = x[j];
        return;
    }
    for (int64_t j = 0; j < half; j++)
        y[j] = x[j] * c[j] + sign * x[j + half] * s[j];
    for (int64_t j = half; j < d; j++)
        y[j] = x[j] * c[j] + sign * x[j - half] * s[j];
}

/* Row (b, t, h) of x rotated into y by row t of the tables (copied where cos_both is NULL). */
static void rotated_row(const float *x, const int64_t *xs, const float *cos_both, const float *sin_signed, int64_t b,
                        int64_t t, int64_t h, int64_t d, float *y) {
    const float *c = cos_both ? cos_both + t * d : NULL, *s = sin_signed ? sin_signed + t * d : NULL;
    rotate(x + b * xs[0] + t * xs[1] + h * xs[2], c, s, d, 1.0f, y);
}

int rotated_unit_forward(const float *x, const int64_t *xs, const float *cos_both, const float *sin_signed,
                         int64_t n_batch, int64_t n_pos, int64_t n_heads, int64_t d, float eps, float *u,
                         const int64_t *us, float *length) {
    float y[d];
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t t = 0; t < n_pos; t++)
            for (int64_t h = 0; h < n_heads; h++) {
                rotated_row(x, xs, cos_both, sin_signed, b, t, h, d, y);
                float squares = 0.0f;
                for (int64_t j = 0; j < d; j++)
                    squares += y[j] * y[j];
                const float norm = sqrtf(squares), scale = 1.0f / fmaxf(norm, eps);
                float *out = u + b * us[0] + t * us[1] + h * us[2];
                for (int64_t j = 0; j < d; j++)
                    out[j] = y[j] * scale;
                length[(b * n_pos + t) * n_heads + h] = norm;
            }
    return 0;
}

/* The attention kernels' layouts in one pass, RoPE on the way (the evaluation's copies of q, k and
 * v; no rotation where cos_both is NULL): row (b, t, h) of x, as above, goes rotated to out at
 * (b * n_heads + h) * os[0] + t * os[1] + j * os[2] for its entries j, so os = {pos * d, d, 1}
 * lays it out [bh, pos, d] (queries, values) and {d * stride, 1, stride} transposed [bh, d,
 * stride] (keys). Padding is the caller's. */
int laid_out(const float *x, const int64_t *xs, const float *cos_both, const float *sin_signed, int64_t n_batch,
             int64_t n_pos, int64_t n_heads, int64_t d, float *out, const int64_t *os) {
    float y[d];
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t h = 0; h < n_heads; h++)
            for (int64_t t = 0; t < n_pos; t++) {
                rotated_row(x, xs, cos_both, sin_signed, b, t, h, d, y);
                float *row = out + (b * n_heads + h) * os[0] + t * os[1];
                for (int64_t j = 0; j < d; j++)
                    row[j * os[2]] = y[j];
            }
    return 0;
}

/* dx from du: dy = (du - u (u . du)) / |y| where |y| >= eps, du / eps below; dx = dy turned by
 * the opposite angles, dy cos_both - roll(dy, d / 2) sin_signed. */
int rotated_unit_backward(const float *u, const int64_t *us, const float *length, const float *du,
                          const int64_t *dus, const float *cos_both, const float *sin_signed, int64_t n_batch,
                          int64_t n_pos, int64_t n_heads, int64_t d, float eps, float *dx, const int64_t *dxs) {
    float dy[d];
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t t = 0; t < n_pos; t++)
            for (int64_t h = 0; h < n_heads; h++) {
                const float *u_row = u + b * us[0] + t * us[1] + h * us[2];
                const float *du_row = du + b * dus[0] + t * dus[1] + h * dus[2];
                const float norm = length[(b * n_pos + t) * n_heads + h];
                float along = 0.0f;
                for (int64_t j = 0; j < d; j++)
                    along += u_row[j] * du_row[j];
                along = norm < eps ? 0.0f : along;
                const float scale = 1.0f / fmaxf(norm, eps);
                for (int64_t j = 0; j < d; j++)
                    dy[j] = (du_row[j] - u_row[j] * along) * scale;
                const float *c = cos_both ? cos_both + t * d : NULL, *s = sin_signed ? sin_signed + t * d : NULL;
                rotate(dy, c, s, d, -1.0f, dx + b * dxs[0] + t * dxs[1] + h * dxs[2]);
            }
    return 0;
}

/* CoPE's logits and their gradient in training (CoPE paper eq. 3-9, kernels/cope/rows.py), for the
 * PyTorch blocks of query rows: a block holds the rows first_row .. first_row + n_rows - 1 of each
 * of n_bh sequence-heads against keys 0 .. n_keys - 1, every map [n_bh, n_rows, n_keys] and the
 * position logits z [n_bh, n_rows, n_emb] (z_m = q . e[m]) contiguous. Row i's keys past i are
 * future keys: gate 0, logit MASK_FILL, gradient 0. Positions are clamped at top = p_max - 1, where
 * they pass no gradient. */
static const float MASK_FILL = -1e11f;

/* The gates g = sigmoid(S) and the positions p_j = sum_{t >= j} g_t (summed in double). */
int cope_rule_positions(const float *S, int64_t n_bh, int64_t n_rows, int64_t first_row, int64_t n_keys, float *g,
                        float *p) {
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t n = first_row + row % n_rows + 1, at = row * n_keys;
        for (int64_t j = 0; j < n; j++)
            g[at + j] = 1.0f / (1.0f + expf(-S[at + j]));
        zero_from(g + at, n, n_keys);
        double later = 0.0;
        for (int64_t j = n_keys - 1; j >= 0; j--) {
            later += g[at + j];
            p[at + j] = (float)later;
        }
    }
    return 0;
}

/* S += z interpolated at the clamped positions, in place: z[lo] + (p - lo) (z[hi] - z[lo]), lo =
 * floor p, hi = lo + 1 within the table; MASK_FILL on future keys. */
int cope_rule_logits(float *S, const float *p, const float *z, int64_t n_emb, int64_t n_bh, int64_t n_rows,
                     int64_t first_row, int64_t n_keys, int64_t p_max) {
    const float top = (float)(p_max - 1);
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t n = first_row + row % n_rows + 1, at = row * n_keys;
        const float *z_row = z + row * n_emb;
        for (int64_t j = 0; j < n; j++) {
            const float p_j = fminf(p[at + j], top);
            const int64_t lo = (int64_t)p_j, hi = lo + 1 < p_max ? lo + 1 : lo;
            S[at + j] += z_row[lo] + (p_j - (float)lo) * (z_row[hi] - z_row[lo]);
        }
        for (int64_t j = n; j < n_keys; j++)
            S[at + j] = MASK_FILL;
    }
    return 0;
}

/* From the logits' gradient dL (in place: the scores' gradient dS on return): dz [n_bh, n_rows,
 * n_emb] (zeroed here) collects dL (1 - w) at lo and dL w at hi; the position's gradient dL (z[hi]
 * - z[lo]) (0 where clamped) reaches the gates g_t of every key j <= t, and a gate's the scores
 * through sigmoid' = g (1 - g); S also reaches the logits directly. */
int cope_rule_backward(float *dL, const float *g, const float *p, const float *z, int64_t n_emb, int64_t n_bh,
                       int64_t n_rows, int64_t first_row, int64_t n_keys, int64_t p_max, float *dz) {
    const float top = (float)(p_max - 1);
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t n = first_row + row % n_rows + 1, at = row * n_keys;
        const float *z_row = z + row * n_emb;
        float *dz_row = dz + row * n_emb;
        zero_from(dz_row, 0, n_emb);
        float gates = 0.0f;   /* sum_{j <= t} dp_j */
        for (int64_t j = 0; j < n; j++) {
            const float d = dL[at + j], p_j = fminf(p[at + j], top), w = p_j - floorf(p_j);
            const int64_t lo = (int64_t)p_j, hi = lo + 1 < p_max ? lo + 1 : lo;
            dz_row[lo] += d - d * w;
            dz_row[hi] += d * w;
            gates += p[at + j] > top ? 0.0f : d * (z_row[hi] - z_row[lo]);
            dL[at + j] = d + gates * g[at + j] * (1.0f - g[at + j]);
        }
        zero_from(dL + at, n, n_keys);
    }
    return 0;
}

/* Shaw et al.'s relative logits in training (models/attention/shaw.py), for the PyTorch blocks of
 * query rows laid out as CoPE's above: row i's logits S_ij + B_i[min(i - j, K)] for j <= i from
 * its per-distance logits B [n_bh, n_pos, K + 1] (q_i . w^K_r / sqrt(d)), MASK_FILL past i; the
 * backward adds dL_ij into dB_i[min(i - j, K)]. */
int shaw_rule_logits(float *S, const float *B, int64_t n_bh, int64_t n_rows, int64_t first_row, int64_t n_keys,
                     int64_t n_pos, int64_t n_dist) {
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t i = first_row + row % n_rows, at = row * n_keys;
        const float *b_row = B + ((row / n_rows) * n_pos + i) * n_dist;
        for (int64_t j = 0; j <= i; j++)
            S[at + j] += b_row[i - j < n_dist ? i - j : n_dist - 1];
        for (int64_t j = i + 1; j < n_keys; j++)
            S[at + j] = MASK_FILL;
    }
    return 0;
}

int shaw_rule_backward(const float *dL, int64_t n_bh, int64_t n_rows, int64_t first_row, int64_t n_keys,
                       int64_t n_pos, int64_t n_dist, float *dB) {
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t i = first_row + row % n_rows, at = row * n_keys;
        float *db_row = dB + ((row / n_rows) * n_pos + i) * n_dist;
        for (int64_t j = 0; j <= i; j++)
            db_row[i - j < n_dist ? i - j : n_dist - 1] += dL[at + j];
    }
    return 0;
}

/* trela's and TDA's weights and their gradient in training (TDA paper Sec. 4.1-4.2,
 * kernels/threshold/rows.py), for the PyTorch blocks of query rows laid out as CoPE's above, the
 * threshold tau [n_bh, n_pos]: each view's scores S in place to its rectified scores r = (S -
 * tau_i)_+ (0 on future keys), and the weights A = r1^p - lam r2^p (r1^p when S2 is NULL), in one
 * pass over each row where PyTorch makes some ten. */
static float powered(float r, float p) { return p == 2.0f ? r * r : powf(r, p); }

int threshold_rule_weights(float *S1, float *S2, const float *tau, int64_t n_bh, int64_t n_rows, int64_t first_row,
                           int64_t n_keys, int64_t n_pos, float lam, float p, float *A) {
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t i = first_row + row % n_rows, n = i + 1, at = row * n_keys;
        const float tau_i = tau[(row / n_rows) * n_pos + i];
        float *restrict r1 = S1 + at, *restrict a = A + at;
        for (int64_t j = 0; j < n; j++) {
            r1[j] = fmaxf(r1[j] - tau_i, 0.0f);
            a[j] = powered(r1[j], p);
        }
        zero_from(r1, n, n_keys);
        zero_from(a, n, n_keys);
        if (!S2)
            continue;
        float *restrict r2 = S2 + at;
        for (int64_t j = 0; j < n; j++) {
            r2[j] = fmaxf(r2[j] - tau_i, 0.0f);
            a[j] -= powered(r2[j], p) * lam;
        }
        zero_from(r2, n, n_keys);
    }
    return 0;
}

/* d/dr r^p = p r^(p-1), 0 where the key did not survive (r = 0; p = 1 included). */
static float power_slope(float r, float p) { return p == 2.0f ? r : r > 0.0f ? powf(r, p - 1.0f) : 0.0f; }

/* From the weights' gradient dA of a block (in place: view 1's scores' gradient on return) and the
 * views' rectified scores r1, r2 (r2 NULL for one view): dS1 = p r1^(p-1) dA and, into dS2, dS2 =
 * -lam p r2^(p-1) dA, 0 on future keys; tau's gradient at the block's rows, d_tau_i = -sum_j (dS1_ij
 * + dS2_ij) (written into d_tau [n_bh, n_pos]), and lam's, -sum_j r2_ij^(p-1) dA_ij r2_ij (added
 * into d_lam [n_bh], per sequence-head). */
int threshold_rule_backward(float *dA, const float *r1, const float *r2, int64_t n_bh, int64_t n_rows,
                            int64_t first_row, int64_t n_keys, int64_t n_pos, float lam, float p, float *dS2,
                            float *d_tau, double *d_lam) {
    for (int64_t row = 0; row < n_bh * n_rows; row++) {
        const int64_t h = row / n_rows, i = first_row + row % n_rows, n = i + 1, at = row * n_keys;
        float *restrict d1 = dA + at;
        float total = 0.0f;
        if (r2) {   /* first, while d1 still holds dA; in loops along the row that the compiler vectorises */
            const float *restrict x2 = r2 + at;
            float *restrict d2 = dS2 + at;
            float inhibition = 0.0f;
            for (int64_t j = 0; j < n; j++)
                d2[j] = d1[j] * power_slope(x2[j], p);
            for (int64_t j = 0; j < n; j++) {
                inhibition += d2[j] * x2[j];
                d2[j] *= -lam * p;
                total += d2[j];
            }
            zero_from(d2, n, n_keys);
            d_lam[h] -= inhibition;
        }
        const float *restrict x1 = r1 + at;
        for (int64_t j = 0; j < n; j++) {
            d1[j] = d1[j] * power_slope(x1[j], p) * p;
            total += d1[j];
        }
        zero_from(d1, n, n_keys);
        d_tau[h * n_pos + i] = -total;
    }
    return 0;
}

/* The blocks' per-position work in the evaluation, one pass where PyTorch makes several. */

/* RMSNorm (models/backbone.py's RMSNorm): row r of x [n_rows, d] to y = x / sqrt(mean(x^2) + eps) * w. */
int rms_norm_rows(const float *x, const float *w, int64_t n_rows, int64_t d, float eps, float *y) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *restrict row = x + r * d;
        float *restrict out = y + r * d, squares = 0.0f;
        for (int64_t j = 0; j < d; j++)
            squares += row[j] * row[j];
        const float inverse_rms = 1.0f / sqrtf(squares / (float)d + eps);
        for (int64_t j = 0; j < d; j++)
            out[j] = row[j] * inverse_rms * w[j];
    }
    return 0;
}

/* SwiGLU's hidden activation (models/backbone.py's SwiGLU) from its two products x W_gate and x W_in
 * [n_rows, d], each with its bias added here (NULL: none): h = silu(gate + b_gate) * (linear + b_in).
 * exp's argument is held below 88, where expf overflows: -ffast-math's reciprocal of an infinite
 * 1 + e^-pre is NaN, where silu(pre) for pre < -88 is below 1e-36 either way. */
int swiglu_hidden(const float *gate, const float *linear, const float *b_gate, const float *b_in, int64_t n_rows,
                  int64_t d, float *h) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *restrict a = gate + r * d, *restrict c = linear + r * d;
        float *restrict out = h + r * d;
        for (int64_t j = 0; j < d; j++) {
            const float pre = a[j] + (b_gate ? b_gate[j] : 0.0f), pre_linear = c[j] + (b_in ? b_in[j] : 0.0f);
            out[j] = pre / (1.0f + expf(fminf(-pre, 88.0f))) * pre_linear;
        }
    }
    return 0;
}
